package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/throttle"
)

// flakyRecorder is a DeliveryRecorder and SentLookup whose answers the
// test sets: RecordSent fails with fail(s) and hands every call to calls.
type flakyRecorder struct {
	mu      sync.Mutex
	fail    func(Sent) error
	calls   chan Sent
	sentAt  map[string]time.Time
	lookErr error
	lookups int
	// unmarked counts the calls whose context KeptRecord does not mark:
	// every write of a kept send is marked.
	unmarked int
}

func newFlaky() *flakyRecorder {
	return &flakyRecorder{calls: make(chan Sent, 100), sentAt: map[string]time.Time{}}
}

func (r *flakyRecorder) setFail(f func(Sent) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail = f
}

func (r *flakyRecorder) RecordSent(ctx context.Context, s Sent) error {
	r.mu.Lock()
	fail := r.fail
	if !KeptRecord(ctx) {
		r.unmarked++
	}
	r.mu.Unlock()
	r.calls <- s
	if fail != nil {
		return fail(s)
	}
	return nil
}

func (r *flakyRecorder) RecordFailed(context.Context, Failed) error { return nil }

func (r *flakyRecorder) SentAt(_ context.Context, id, _ string) (time.Time, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookups++
	return r.sentAt[id], r.lookErr
}

var errDown = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

func sentOf(id string) Sent {
	return Sent{TaskID: id, Queue: "sms", Channel: "sms", ProviderID: "SM" + id, Status: OutcomeSent}
}

// newTestUnrecorded is an unrecorded whose loop waits on the channel
// returned by wait, which the test feeds (ticks), and reports each wait
// asked for on waits.
func newTestUnrecorded(rec DeliveryRecorder, limit int) (u *unrecorded, logs *syncBuffer, waits chan time.Duration, ticks chan time.Time) {
	logs = &syncBuffer{}
	u = newUnrecorded(rec, limit, slog.New(slog.NewTextHandler(logs, nil)), nil)
	waits, ticks = make(chan time.Duration, 100), make(chan time.Time)
	u.wait = func(d time.Duration) <-chan time.Time { waits <- d; return ticks }
	return u, logs, waits, ticks
}

func TestUnrecordedIsBounded(t *testing.T) {
	t.Parallel()
	rec := newFlaky()
	u, logs, _, _ := newTestUnrecorded(rec, 3)
	defer u.close()
	for i := range 5 {
		u.add(sentOf(fmt.Sprint(i)))
	}
	require.Equal(t, 3, u.len())
	for i, want := range []bool{false, false, true, true, true} {
		require.Equal(t, want, u.has("sms", fmt.Sprint(i)), "task %d", i)
	}
	require.False(t, u.has("whatsapp", "4"), "a task ID is unique per queue")
	require.Contains(t, logs.String(), "forgetting the oldest")
	require.Contains(t, logs.String(), "task_id=1")

	u.add(Sent{TaskID: "4", Queue: "sms", Channel: "sms", ProviderID: "SMnew", Status: OutcomeSent})
	require.Equal(t, 3, u.len(), "the same task's send replaces the one kept")
}

func TestUnrecordedFlushRound(t *testing.T) {
	t.Parallel()
	rec := newFlaky()
	u := newUnrecorded(rec, 10, slog.New(slog.DiscardHandler), nil)
	u.mu.Lock()
	for _, id := range []string{"a", "bad", "b", "c"} { // kept without starting the loop
		u.byKey[unrecordedKey{"sms", id}] = u.fifo.PushBack(&unrecordedSend{s: sentOf(id), added: u.now()})
	}
	u.sync()
	u.mu.Unlock()
	ctx := context.Background()

	// "a" is written, "bad" dropped, "b" fails: the round ends there and
	// "b" goes to the back of the line.
	rec.setFail(func(s Sent) error {
		switch s.TaskID {
		case "bad":
			return fmt.Errorf("provider id: too long: %w", ErrInvalidRecord)
		case "b":
			return errDown
		}
		return nil
	})
	written, err := u.flush(ctx)
	require.ErrorIs(t, err, errDown)
	require.Equal(t, 1, written)
	require.Equal(t, []string{"a", "bad", "b"}, callIDs(rec, 3))
	require.Equal(t, 2, u.len())
	require.Equal(t, []string{"c", "b"}, keptIDs(u))

	// Redis is back: the rest are written, oldest first.
	rec.setFail(nil)
	written, err = u.flush(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, written)
	require.Equal(t, []string{"c", "b"}, callIDs(rec, 2))
	require.Zero(t, u.len())
	require.False(t, u.has("sms", "b"))
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Zero(t, rec.unmarked, "a kept send is written as one (KeptRecord), so that a busy recorder does not hold it")
	require.False(t, KeptRecord(ctx), "the mark is the flush's own")
}

func TestUnrecordedDropsSendsPastTheWindow(t *testing.T) {
	t.Parallel()
	rec := newFlaky()
	rec.setFail(func(Sent) error { return errDown })
	u := newUnrecorded(rec, 10, slog.New(slog.DiscardHandler), nil)
	now := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	u.now = func() time.Time { return now }
	u.mu.Lock()
	u.byKey[unrecordedKey{"sms", "old"}] = u.fifo.PushBack(&unrecordedSend{s: sentOf("old"), added: now.Add(-sentWindow - time.Second)})
	u.byKey[unrecordedKey{"sms", "new"}] = u.fifo.PushBack(&unrecordedSend{s: sentOf("new"), added: now.Add(-sentWindow)})
	u.mu.Unlock()
	_, err := u.flush(context.Background())
	require.ErrorIs(t, err, errDown)
	require.Equal(t, []string{"new"}, keptIDs(u), "a send older than the window is forgotten unwritten")
	require.Equal(t, []string{"new"}, callIDs(rec, 1))
}

// TestUnrecordedRetriesWithBackoff: the loop starts with the first send
// kept, retries while the recorder fails, each wait doubling within
// [first, max] (with equal jitter: between half the step and the step),
// and stops once the send is written; a new send starts again at the first
// step.
func TestUnrecordedRetriesWithBackoff(t *testing.T) {
	t.Parallel()
	rec := newFlaky()
	rec.setFail(func(Sent) error { return errDown })
	u, logs, waits, ticks := newTestUnrecorded(rec, 10)
	u.add(sentOf("a"))
	steps := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i, step := range steps {
		d := <-waits
		require.GreaterOrEqual(t, d, step/2, "wait %d", i)
		require.LessOrEqual(t, d, step, "wait %d", i)
		if i == len(steps)-1 {
			rec.setFail(nil) // Redis is back
		}
		ticks <- time.Time{}
		require.Equal(t, "a", (<-rec.calls).TaskID)
	}
	// The round empties the set, then logs: wait for both.
	require.Eventually(t, func() bool {
		return u.len() == 0 && strings.Contains(logs.String(), "wrote the sends kept")
	}, 5*time.Second, time.Millisecond, "written and logged after the round")

	u.add(sentOf("b"))
	require.LessOrEqual(t, <-waits, unrecordedFirstWait, "a new outage starts at the first step")
	ticks <- time.Time{}
	require.Equal(t, "b", (<-rec.calls).TaskID)
	u.close()
	require.Zero(t, u.len())
	select {
	case s := <-rec.calls:
		t.Fatalf("written again at close: %+v", s)
	default:
	}
}

// TestUnrecordedCloseMakesALastAttempt: close stops the loop, writes what
// Redis takes, and logs the sends it could not write with their task IDs.
func TestUnrecordedCloseMakesALastAttempt(t *testing.T) {
	t.Parallel()
	rec := newFlaky()
	rec.setFail(func(Sent) error { return errDown })
	u, logs, waits, _ := newTestUnrecorded(rec, 10)
	u.add(sentOf("a"))
	u.add(sentOf("b"))
	<-waits // the loop waits for its first round
	u.close()
	require.Equal(t, []string{"a"}, callIDs(rec, 1), "the last round stops at the first failure")
	require.Equal(t, 2, u.len())
	require.Contains(t, logs.String(), "shutting down with sends Redis never recorded")
	require.Contains(t, logs.String(), "unrecorded=2")
	require.Contains(t, logs.String(), "task_ids=\"[b a]\"", "a send that failed goes to the back")

	u.add(sentOf("c"))
	require.False(t, u.has("sms", "c"), "nothing is kept after close")
	require.Contains(t, logs.String(), "after shutdown")
	u.close() // twice is fine

	// Redis answers at shutdown: everything is written.
	rec2 := newFlaky()
	rec2.setFail(func(Sent) error { return errDown })
	u2, logs2, waits2, _ := newTestUnrecorded(rec2, 10)
	u2.add(sentOf("a"))
	<-waits2
	rec2.setFail(nil)
	u2.close()
	require.Zero(t, u2.len())
	require.NotContains(t, logs2.String(), "never recorded")
	require.Equal(t, []string{"a"}, callIDs(rec2, 1))

	var never *unrecorded // a worker without a recorder
	never.close()
	require.False(t, never.has("sms", "a"))
}

// TestRecordKeepsAFailedSend: record keeps a send whose record failed,
// but not one the recorder calls invalid.
func TestRecordKeepsAFailedSend(t *testing.T) {
	t.Parallel()
	rec := newFlaky()
	h := alreadySentHandler(t, rec)
	defer h.w.unrecorded.close()
	a := &attempt{sent: true, resp: channels.Response{ProviderID: "SM1", Status: 201}}
	rec.setFail(func(Sent) error { return fmt.Errorf("provider id: %w", ErrInvalidRecord) })
	h.record(context.Background(), taskMeta{id: "bad", queue: "sms"}, a, nil)
	require.Equal(t, "bad", (<-rec.calls).TaskID)
	require.False(t, h.w.unrecorded.has("sms", "bad"), "an invalid record is not kept")
	rec.setFail(func(Sent) error { return errDown })
	h.record(context.Background(), taskMeta{id: "t1", queue: "sms"}, a, nil)
	require.Equal(t, "t1", (<-rec.calls).TaskID)
	require.True(t, h.w.unrecorded.has("sms", "t1"))
}

// TestAlreadySent: a task whose send is kept unrecorded completes without
// a send on any attempt, without asking Redis; a rerun (retry count above
// 0) asks the recorder; a first attempt never does.
func TestAlreadySent(t *testing.T) {
	t.Parallel()
	rec := newFlaky()
	h := alreadySentHandler(t, rec)
	defer h.w.unrecorded.close()
	reg := prometheus.NewRegistry()
	h.w.opts.Metrics = NewMetrics(reg)
	now := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	h.now = func() time.Time { return now }
	ctx := context.Background()
	rec.setFail(func(Sent) error { return errDown })
	h.w.unrecorded.add(sentOf("kept"))
	rec.sentAt["recorded"] = now.Add(-time.Hour)
	rec.sentAt["stale"] = now.Add(-sentWindow - time.Second)

	for _, tc := range []struct {
		id      string
		retried int
		want    bool
		lookups int // the recorder's lookups so far
	}{
		{"kept", 0, true, 0},
		{"kept", 3, true, 0},
		{"recorded", 0, false, 0}, // a first attempt costs no round trip
		{"recorded", 1, true, 1},
		{"stale", 1, false, 2}, // another task that had the same ID long ago
		{"never", 2, false, 3},
	} {
		got, err := h.alreadySent(ctx, taskMeta{id: tc.id, queue: "sms", retried: tc.retried})
		require.NoError(t, err)
		require.Equal(t, tc.want, got, "%s retried %d", tc.id, tc.retried)
		rec.mu.Lock()
		require.Equal(t, tc.lookups, rec.lookups, "%s retried %d", tc.id, tc.retried)
		rec.mu.Unlock()
	}
	require.Equal(t, 3.0, counterValue(t, reg, "sluice_tasks_total", map[string]string{"channel": "sms", "outcome": OutcomeAlreadySent}))

	rec.mu.Lock()
	rec.lookErr = errDown
	rec.mu.Unlock()
	got, err := h.alreadySent(ctx, taskMeta{id: "recorded", queue: "sms", retried: 1})
	require.ErrorIs(t, err, errDown, "not sent blind when the record cannot be read")
	require.False(t, got)
	require.True(t, IsFailure(err))
}

// alreadySentHandler is the handler of an "sms" channel of a worker whose
// Delivery is rec; nothing in it reaches Redis.
func alreadySentHandler(t *testing.T, rec DeliveryRecorder) *handler {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = rdb.Close() })
	ch := Channel{Name: "sms", TaskType: "test:send", Prepare: func([]byte) (Prepared, error) { return Prepared{}, nil }}
	w, err := New(Options{Redis: rdb, Limiter: throttle.NewLocal(throttle.LocalOptions{}), Channels: []Channel{ch},
		Delivery: rec, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	return w.handlers["sms"]
}

// callIDs takes n calls off rec.calls and returns their task IDs.
func callIDs(rec *flakyRecorder, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = (<-rec.calls).TaskID
	}
	return ids
}

// keptIDs is the task IDs kept, oldest first.
func keptIDs(u *unrecorded) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var ids []string
	for e := u.fifo.Front(); e != nil; e = e.Next() {
		ids = append(ids, e.Value.(*unrecordedSend).s.TaskID)
	}
	return ids
}
