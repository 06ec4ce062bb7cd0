package throttle

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/throttle/coalesce"
)

// Reserve calls are coalesced: while one reserve script is in flight, the
// calls that arrive queue up and go together in the next script, one
// EVALSHA for up to maxReserveBatch sends. A lone call goes at once, so
// latency is unchanged; under load the round trip, the script's setup and
// the client's system calls are shared by the batch. Sends in one script
// are decided in arrival order, each seeing what the earlier ones took, as
// if they had come one by one.
const maxReserveBatch = 64

// reserveLinger is the least time between two reserve scripts of a busy
// limiter, for the calls that may wait that long (reserveDue): a worker
// reserving a thousand sends a second then decides more of them a script.
// A script call costs Redis about 30 µs beyond its sends' work (the round
// trip's system calls, parsing, the script's setup; docs/pacing.md,
// "Calls that wait for company").
const reserveLinger = 10 * time.Millisecond

// reserveDue is when a call must be decided (coalesce.Batcher.SetDue).
// A worker's batch reserves its sends one after another, each once the
// one before has its slot, so every wait is a step of that chain: a call
// may wait half the emission interval of its fastest rated limit (6.25 ms
// for 80/s), at most the linger, so that a chain keeps ahead of its
// number's pace. (Letting a send planned well ahead wait the whole linger
// would not: each of a chain's steps would take the linger, and a number
// faster than one send a linger would spend its batch's lead.) A retake
// (a send already late) and a call without a rated limit are decided at
// once.
func reserveDue(opts ReserveOptions, reqs []Request, now time.Time) time.Time {
	if opts.Retake {
		return time.Time{}
	}
	wait, rated := reserveLinger, false
	for _, r := range reqs {
		if r.Limit.Rate.Limit <= 0 {
			continue
		}
		rated = true
		wait = min(wait, r.Limit.Rate.Period/time.Duration(r.Limit.Rate.Limit)/2)
	}
	if !rated || wait <= 0 {
		return time.Time{}
	}
	return now.Add(wait)
}

// reserveTimeout bounds a batch's script: it serves several callers, so no
// caller's context may cut it short.
const reserveTimeout = 10 * time.Second

type reserveCall struct {
	opts     ReserveOptions
	hold     time.Duration
	headroom float64
	reqs     []Request
	fields   []string
	callID   string
	due      time.Time          // reserveDue; zero: decided at once
	done     chan reserveResult // buffered: the batcher never blocks on it

	mu        sync.Mutex
	abandoned bool // the caller's context ended before the result came
}

type reserveResult struct {
	r   Reservation
	err error
}

type reserveBatcher struct {
	l *Redis
	q *coalesce.Batcher[*reserveCall]
}

// batcherIdle is how long the batcher's goroutine waits for calls before it
// exits; the next call starts it again. A limiter nobody uses holds no
// goroutine.
const batcherIdle = time.Second

// batcher returns the limiter's batcher.
func (l *Redis) batcher() *reserveBatcher {
	l.batchOnce.Do(func() {
		b := &reserveBatcher{l: l}
		b.q = coalesce.New(maxReserveBatch, batcherIdle, b.serve)
		b.q.SetLinger(reserveLinger)
		b.q.SetDue(func(c *reserveCall) time.Time { return c.due })
		l.batch = b
	})
	return l.batch
}

func (b *reserveBatcher) do(ctx context.Context, c *reserveCall) (reserveResult, error) {
	if err := b.q.Add(ctx, c); err != nil {
		return reserveResult{}, err
	}
	select {
	case res := <-c.done:
		return res, res.err
	case <-ctx.Done():
		c.mu.Lock()
		c.abandoned = true
		c.mu.Unlock()
		// The reservation may have been made meanwhile: its leases must not
		// wait for their expiry (a firm slot unused is only a gap).
		select {
		case res := <-c.done:
			b.releaseLeases(res)
		default:
		}
		return reserveResult{}, ctx.Err()
	}
}

func (b *reserveBatcher) releaseLeases(res reserveResult) {
	b.l.releaseLeases(context.Background(), res.r.Leases)
}

// serve runs one batch: one script per set of pacing settings, and on a
// Redis Cluster per scope (a hash slot), in the order of their first
// calls.
func (b *reserveBatcher) serve(batch []*reserveCall) {
	type group struct {
		scope    string
		hold     time.Duration
		headroom float64
	}
	groups := map[group][]*reserveCall{}
	var order []group
	for _, c := range batch {
		g := group{"", c.hold, c.headroom}
		if b.l.slots {
			g.scope = scope(c.reqs[0].Key) // a call's keys are of one scope (Reserve)
		}
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], c)
	}
	for _, g := range order {
		b.exec(groups[g])
	}
}

// exec runs one reserve script for calls of one group (serve) and hands
// each its result.
func (b *reserveBatcher) exec(calls []*reserveCall) {
	l := b.l
	var all []Request
	ra := l.newReserveArgs("reserve", calls[0].hold, calls[0].headroom, len(calls))
	for _, c := range calls {
		all = append(all, c.reqs...)
		ra.send(c.opts.TaskID, c.opts.Priority, c.opts.Retake, c.callID, c.opts.Tenant, c.opts.Weight, c.reqs, c.fields)
	}
	ctx, cancel := context.WithTimeout(context.Background(), reserveTimeout)
	raw, err := runInts(ctx, l.rdb, reserveScriptFor(all), ra.keys, ra.argv())
	cancel()
	if err != nil {
		err = fmt.Errorf("throttle: reserve %q: %w", calls[0].reqs[0].Key, err)
	}
	pos := 1
	for _, c := range calls {
		res := reserveResult{err: err}
		if err == nil {
			res = b.decodeOne(raw, &pos, c)
		}
		c.done <- res
		c.mu.Lock()
		gone := c.abandoned
		c.mu.Unlock()
		if gone {
			b.releaseLeases(res) // the caller may have missed it; a second release is harmless
		}
	}
}

// decodeOne reads one send's values at raw[*pos:] and advances pos:
// firm, at, then each limit's 6 values, or 1 alone for a pause that does
// not hold the send (reserve.lua).
func (b *reserveBatcher) decodeOne(raw []int64, pos *int, c *reserveCall) reserveResult {
	// v is {now, firm, limits...}, as decode reads it, the open pauses'
	// values filled in.
	v := make([]int64, 2, 2+replyPerLimit*len(c.reqs))
	p := *pos
	if len(raw) < 1 || len(raw) < p+2 {
		return reserveResult{err: fmt.Errorf("%w: %d values from reserve", ErrMalformedReply, len(raw))}
	}
	now, firm, at := raw[0], raw[p], raw[p+1]
	v[0], v[1] = now, firm
	p += 2
	for _, r := range c.reqs {
		if r.Limit.Algorithm == Pause && p < len(raw) && raw[p] == 1 {
			v = append(v, 1, 1, now, 0, 0, 0)
			p++
			continue
		}
		if len(raw) < p+replyPerLimit {
			return reserveResult{err: fmt.Errorf("%w: %d values from reserve", ErrMalformedReply, len(raw))}
		}
		v = append(v, raw[p:p+replyPerLimit]...)
		p += replyPerLimit
	}
	*pos = p
	d, err := b.l.decode(v, c.reqs, c.callID)
	if err != nil {
		return reserveResult{err: err}
	}
	r := Reservation{Decision: d, Firm: firm >= 1, At: time.UnixMicro(at), prefetched: max(0, firm-1)}
	d.Allowed = r.Firm
	r.Decision.Allowed = r.Firm
	if !r.Firm {
		r.Planned = c.opts.TaskID != "" && firm < 0
		r.Leases = nil
	}
	return reserveResult{r: r}
}
