package delivery

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/throttle/coalesce"
)

// RecordSent calls are coalesced: while one record script is in flight,
// the calls that arrive queue up and go together in the next one, one
// EVALSHA for up to maxSentBatch sends; a busy store's scripts are at
// least sentLinger apart. A lone call goes at once, so its latency is
// unchanged; under load the round trip and the script's setup are
// shared. A record was the one script call every paced send made on
// its own. On this project's 2-core host, one caller at a time cost Redis
// 47 µs of CPU a record, 64 callers at once 12 to 14
// (`go test -run '^$' -bench RecordSent ./internal/delivery/`).
const maxSentBatch = 64

// sentTimeout bounds a batch's script: it serves several callers, so no
// caller's context may cut it short. A caller whose context ends first
// returns its error; its record may still be written, as RecordSent is
// idempotent.
const sentTimeout = 5 * time.Second

// sentLinger is the least time between two record scripts of a busy
// store (coalesce.Batcher.SetLinger): while records come faster than a
// script's round trip, a call waits for the rest of it, so that a worker
// recording a thousand sends a second writes them about ten a script, not
// one or two. A record comes after its send went: the wait delays nothing
// the provider sees, only the task's completion. A store whose last
// script carried one call (a quiet worker) is never held; the kept
// records, written one at a time, are not held either (lingerFreely). In
// make bench-scale (docs/pacing.md,
// "Calls that wait for company") a 5 ms linger took the EVALSHA calls
// from 1.0 to 0.43 a delivered send and Redis' CPU a send from 145-153 to
// 126-131 µs; 15 ms took 4 µs more. A script call costs Redis about
// 30 µs beyond its sends' work: the round trip's system calls, the
// command's parsing, the script's setup.
const sentLinger = 10 * time.Millisecond

// lingerFreely is a record's due (coalesce.Batcher.SetDue) when nothing
// hurries it: it waits the linger. A worker's kept records
// (worker.KeptRecord), written one at a time after a Redis outage, are due
// at once, and take the calls queued beside them along: held 10 ms each
// by a store busy with new sends, ten thousand would take 100 s.
var lingerFreely = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// sentCall is one RecordSent call waiting for its batch.
type sentCall struct {
	keys []string
	args []any      // a send's values in record_sent.lua, task id to campaign (exec adds the rest)
	due  time.Time  // lingerFreely, or zero: written at once
	done chan error // buffered: the batcher never blocks on it
}

// countersEvery is how often a batcher extends a campaign's counters' TTL
// (the TTL's thousandth, at most a minute): between two extensions a
// record script leaves the counters' TTL alone, unless the call may have
// made them (record_sent.lua). A PEXPIRE a send was about a tenth of the
// record's work. The counters live countersEvery longer than the TTL
// (Store.countersTTL), so that they outlive every record written before
// their next extension: a callback for a record whose counters had gone
// would count into new ones.
func countersEvery(ttl time.Duration) time.Duration { return min(time.Minute, ttl/1000) }

// maxExtended bounds the batcher's memory of extended counters: past it,
// the entries older than countersEvery go (a few thousand campaigns a
// minute at most).
const maxExtended = 4096

// sentBatcher runs the queued calls of one Store.
type sentBatcher struct {
	s *Store
	q *coalesce.Batcher[*sentCall]
	// extended: when each counters key was last extended by a call that
	// succeeded (only exec, one batch at a time, reads and writes it).
	extended map[string]time.Time
	now      func() time.Time // time.Now; tests move it
}

// sentBatcherIdle is how long the batcher's goroutine waits for calls
// before it exits; the next call starts it again. A store nobody writes to
// holds no goroutine.
const sentBatcherIdle = time.Second

func newSentBatcher(s *Store) *sentBatcher {
	b := &sentBatcher{s: s, extended: make(map[string]time.Time), now: time.Now}
	b.q = coalesce.New(maxSentBatch, sentBatcherIdle, b.exec)
	b.q.SetLinger(sentLinger)
	b.q.SetDue(func(c *sentCall) time.Time { return c.due })
	return b
}

func (b *sentBatcher) do(ctx context.Context, c *sentCall) error {
	if err := b.q.Add(ctx, c); err != nil {
		return err
	}
	select {
	case err := <-c.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// exec runs one record script for calls and hands each its result.
func (b *sentBatcher) exec(calls []*sentCall) {
	var keys []string
	args := make([]any, 1, 1+12*len(calls))
	args[0] = len(calls)
	now := b.now()
	every, cttl := countersEvery(b.s.ttl), b.s.countersTTL().Milliseconds()
	var extend []string // the counters keys this call extends
	for _, c := range calls {
		keys = append(keys, c.keys...)
		args = append(args, len(c.keys))
		args = append(args, c.args...)
		counters := c.keys[1]
		if at, ok := b.extended[counters]; ok && now.Sub(at) < every && !now.Before(at) {
			args = append(args, -cttl)
		} else {
			args = append(args, cttl)
			extend = append(extend, counters)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), sentTimeout)
	err := recordSentScript.Run(ctx, b.s.rdb, keys, args...).Err()
	cancel()
	if err == nil {
		b.remember(now, every, extend)
	}
	if err != nil && len(calls) > 1 {
		err = fmt.Errorf("with %d other sends: %w", len(calls)-1, err)
	}
	for _, c := range calls {
		c.done <- err
	}
}

// remember notes that keys were extended at now, forgetting, past
// maxExtended entries, those older than every.
func (b *sentBatcher) remember(now time.Time, every time.Duration, keys []string) {
	for _, k := range keys {
		b.extended[k] = now
	}
	if len(b.extended) <= maxExtended {
		return
	}
	for k, at := range b.extended {
		if now.Sub(at) >= every || now.Before(at) {
			delete(b.extended, k)
		}
	}
}
