// Package testutil holds what Sluice's tests share: a fake clock for code
// that takes a clock, and waits for a state that sends no signal (an asynq
// task's state in Redis, a count in the provider emulator). A wait polls
// every Poll up to a timeout that bounds a hang; it never measures speed,
// so a busy host only makes it poll longer.
//
// It is for tests only: no non-test file imports it.
package testutil

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluice-dev/sluice/internal/emulator"
)

// T0 is a UTC midnight, so fixed windows of every length (1s, 1m, 1d)
// start there.
var T0 = time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)

// Clock is a fake clock, safe for concurrent use: Now returns the time it
// was set to, which moves only by Set and Advance. Pass c.Now where code
// takes a `func() time.Time` (throttle.Options.Clock, LocalOptions.Clock).
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock that reads t0.
func NewClock(t0 time.Time) *Clock { return &Clock{t: t0} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// Set moves the clock to t (backwards too).
func (c *Clock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// Advance moves the clock d forward.
func (c *Clock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// Poll is how often a wait looks again.
const Poll = 20 * time.Millisecond

// Until polls cond every Poll until it reports true, and fails t when
// timeout passes first, naming what and the last detail cond gave.
func Until(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v (last: %s)", what, timeout, detail)
		}
		time.Sleep(Poll)
	}
}

// Task polls insp until the task id in queue satisfies done, and returns
// its info; after timeout it fails t with the task's last state, retries,
// last error and payload size (never the payload: it may hold a token).
func Task(t testing.TB, insp *asynq.Inspector, queue, id string, timeout time.Duration, done func(*asynq.TaskInfo) bool) *asynq.TaskInfo {
	t.Helper()
	var info *asynq.TaskInfo
	Until(t, timeout, fmt.Sprintf("task %s in queue %s", id, queue), func() (bool, string) {
		var err error
		info, err = insp.GetTaskInfo(queue, id)
		switch {
		case err != nil:
			return false, err.Error()
		case done(info):
			return true, ""
		}
		return false, fmt.Sprintf("state %v, retried %d, last error %q, payload %d bytes",
			info.State, info.Retried, info.LastErr, len(info.Payload))
	})
	return info
}

// In is a Task condition: the task is in one of states.
func In(states ...asynq.TaskState) func(*asynq.TaskInfo) bool {
	return func(info *asynq.TaskInfo) bool {
		for _, s := range states {
			if info.State == s {
				return true
			}
		}
		return false
	}
}

// Handled is a Task condition: a worker has taken the task and let it go
// (it is neither pending nor active: completed, archived, retry or
// scheduled again).
func Handled(info *asynq.TaskInfo) bool {
	return info.State != asynq.TaskStatePending && info.State != asynq.TaskStateActive
}

// Accepted polls emu until it has accepted at least n sends on channel
// (emulator.ChannelSMS, ChannelWhatsApp, ...), and returns its stats then.
func Accepted(t testing.TB, emu *emulator.Server, channel string, n int, timeout time.Duration) emulator.ChannelStats {
	t.Helper()
	var st emulator.ChannelStats
	Until(t, timeout, fmt.Sprintf("%d sends accepted on %s", n, channel), func() (bool, string) {
		st = emu.Stats()[channel]
		return st.Accepted >= n, fmt.Sprintf("%+v", st)
	})
	return st
}

// Median is the middle of v (the mean of the two middle ones for an even
// count, 0 for none); v is not changed. Benchmarks that run alternating
// rounds report it: one round on a shared host says little.
func Median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	n := len(s)
	switch {
	case n == 0:
		return 0
	case n%2 == 1:
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
