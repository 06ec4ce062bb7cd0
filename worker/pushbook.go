package worker

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/throttle"
)

// pushWatcher is implemented by limiters that announce the pushes of
// throttle.Redis.PushAfterLate (*throttle.Redis).
type pushWatcher interface {
	WatchPushes(ctx context.Context, fn func(throttle.Push)) error
}

// pushBook is a worker's view of the recent pushes of every worker
// (throttle.Redis.WatchPushes): a limit's slots moved on after a send left
// later than its margin. The push moves the slots taken after it in Redis;
// a send this worker already holds, whose slot came after the late send's
// and was taken before the push, is held that much longer (moved), so
// that every send after the late one moves by the same amount and the
// limit's worth after it still spans a second from its real departure.
type pushBook struct {
	mu sync.Mutex
	m  map[string][]throttle.Push // limiter key → its pushes, oldest first
}

// takenAt is when a send's slots were taken (the limiter's clock): by its
// reservation (first), and, after a retake (handler.retake), by the
// retake (retaken) on the limits it gave new slots (retook: its limits
// paced faster than one send a second; throttle.LimitDecision.Retook). A
// push made before a slot was taken has moved that slot in Redis
// already: counting it again, for a retaken slot counted from the first
// reservation, held the send a second time, onto the slots taken after
// the push, and a strict provider counted 81 in a second (make
// bench-scale, 2026-11-28).
type takenAt struct {
	first, retaken time.Time
	retook         map[limitID]bool
}

// limitID names one limit of one key (two limits may share a key as hash
// fields).
type limitID struct{ key, name string }

// of is when r's slot was taken; zero when unknown (a prefetched slot).
func (t takenAt) of(r throttle.Request) time.Time {
	if t.retook[limitID{r.Key, r.Limit.Name}] {
		return t.retaken
	}
	return t.first
}

// pushMemory is how long a push is kept: a held send's slot was taken at
// most the hold (seconds) before it goes.
const pushMemory = 30 * time.Second

// add records p, dropping the pushes older than pushMemory (p.At, the
// limiter's clock).
func (b *pushBook) add(p throttle.Push) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string][]throttle.Push{}
	}
	b.m[p.Key] = append(b.m[p.Key], p)
	for k, ps := range b.m {
		i := 0
		for i < len(ps) && p.At.Sub(ps[i].At) > pushMemory {
			i++
		}
		if i == len(ps) {
			delete(b.m, k)
		} else if i > 0 {
			b.m[k] = ps[i:]
		}
	}
}

// moved is how much later a send on reqs, whose slots (the limiter's
// clock) were taken as taken says, goes because of the pushes since: on
// each of its GCRA limits, the sum of the pushes made after its slot was
// taken for a late send before slot; the most of its limits'.
func (b *pushBook) moved(reqs []throttle.Request, taken takenAt, slot time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	var most time.Duration
	for _, r := range reqs {
		if r.Limit.Algorithm != throttle.GCRA {
			continue
		}
		var sum time.Duration
		since := taken.of(r)
		for _, p := range b.m[r.Key] {
			if p.At.After(since) && p.Slot.Before(slot) {
				sum += p.By
			}
		}
		most = max(most, sum)
	}
	return most
}

// maxPushRounds bounds heldForPushes' rounds: a push heard while the send
// waits for an earlier one adds to it.
const maxPushRounds = 3

// heldForPushes holds a send on reqs, firm at *slot (this host's clock)
// by slots taken as taken says (the limiter's clock), for the pushes
// announced since that moved its slot (pushBook.moved), and moves *slot
// with it. The error is ctx's, when it ends during the wait.
func (h *handler) heldForPushes(ctx context.Context, reqs []throttle.Request, taken takenAt, slot *time.Time) error {
	if h.w.pushes == nil {
		return nil
	}
	orig := h.clock.limiter(*slot)
	var done time.Duration
	for range maxPushRounds {
		by := h.w.pushes.moved(reqs, taken, orig)
		if by <= done {
			return nil
		}
		*slot = slot.Add(by - done)
		done = by
		if w := slot.Sub(h.now()); w > 0 && !sleep(ctx, w) {
			return ctx.Err()
		}
	}
	return nil
}
