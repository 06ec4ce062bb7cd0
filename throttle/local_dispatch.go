package throttle

// Local's dispatch: one call decided under the mutex, per-algorithm decide
// and commit (consume.lua, prelude.lua).

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"
)

// run decides reqs in one step, as consume.lua decides the requests of one
// scope: decide every limit, commit all if all allow (consume), else count
// the caller as a waiter in the fixed windows that set the wait.
func (l *Local) run(ctx context.Context, m mode, reqs []Request) (Decision, error) {
	fields, err := validate(reqs)
	if err != nil {
		return Decision{}, err
	}
	if err := ctx.Err(); err != nil {
		return Decision{}, fmt.Errorf("throttle: %s %q: %w", m, reqs[0].Key, err)
	}
	callID := ""
	if m == modeConsume && slices.ContainsFunc(reqs, func(r Request) bool { return r.Limit.Algorithm == Concurrency }) {
		callID = newCallID()
	}
	ds := make([]localDecision, len(reqs))

	l.mu.Lock()
	now := l.clock().UnixMicro()
	l.sweep(now, sweepBatch)
	allOK := true
	for i, r := range reqs {
		ds[i] = l.decide(r, fieldOf(fields, i), now)
		allOK = allOK && ds[i].ok
	}
	committed := m == modeConsume && allOK
	if committed {
		for i := range ds {
			l.commit(&ds[i], now, callID)
		}
	}
	if m == modeConsume && !allOK {
		// As consume.lua: only the limits that set the longest wait count
		// the caller as a waiter (uncapped waits, as the Lua sees them).
		var longest int64
		for _, d := range ds {
			if !d.ok && d.wait > longest {
				longest = d.wait
			}
		}
		for i := range ds {
			if d := &ds[i]; !d.ok && d.wait == longest && d.algo == FixedWindow {
				l.fixedWindowRecord(d, now)
			}
		}
	}
	l.bound(now)
	l.mu.Unlock()

	out := Decision{Now: time.UnixMicro(now), Limits: make([]LimitDecision, len(reqs))}
	for i, r := range reqs {
		d := &ds[i]
		rem, taken, reset := d.remNow, int64(0), d.reset
		if committed {
			rem, taken, reset = d.remAfter, d.taken, d.resetAfter
		}
		ld := LimitDecision{
			Name:       r.Limit.Name,
			Key:        r.Key,
			Allowed:    d.ok,
			Limit:      r.Limit.Capacity(),
			Remaining:  rem,
			Reset:      time.UnixMicro(reset),
			RetryAfter: time.Duration(d.retry) * time.Microsecond,
			Wait:       time.Duration(d.wait) * time.Microsecond,
			Taken:      taken,
			Window:     r.Limit.Window(),
		}
		capConcurrencyRetry(&ld, r.Limit, l.concurrencyRetry)
		out.Limits[i] = ld
		out.Leases = appendLeases(out.Leases, r, callID, taken)
	}
	out.summarize()
	return out, nil
}

// localDecision is the Lua's decision table d (see prelude.lua), times in
// µs since the epoch, plus what the commit needs.
type localDecision struct {
	algo     Algorithm
	key      string
	ok       bool
	remNow   int64
	remAfter int64
	reset    int64 // as the state stands
	// resetAfter is the reset after a commit (GCRA's reset_after; the
	// other algorithms report reset either way).
	resetAfter int64
	retry      int64
	wait       int64
	taken      int64
	cost       int64
	replace    bool // the key holds another Redis type: the commit replaces it

	limit   int64  // units (Max for Concurrency)
	period  int64  // window, lease or interval, µs
	field   string // GCRA: "" or the limit's name in a shared hash
	gcra    gcraParams
	tat     int64 // GCRA: max(stored TAT, now)
	stored  int64 // GCRA: the TAT a commit stores, now + ceil(new ahead)
	start   int64 // FixedWindow, SlidingWindowCounter: this window's start
	current bool  // the state is of this window
	waiting int64 // FixedWindow: units of blocked callers in this window
	prev    int64 // SlidingWindowCounter: the previous window's count
	member  string
}

func (l *Local) decide(r Request, field string, now int64) localDecision {
	lim := r.Limit
	e := l.lookup(r.Key, now)
	d := localDecision{algo: lim.Algorithm, key: r.Key, cost: r.cost(), limit: lim.Rate.Limit, period: lim.Rate.Period.Microseconds()}
	d.taken = d.cost
	switch lim.Algorithm {
	case GCRA:
		gcraDecide(&d, e, field, now, gcraParams{limit: lim.Rate.Limit, period: d.period, burst: max(lim.Burst, 1)})
	case FixedWindow:
		fixedWindowDecide(&d, e, now)
	case SlidingWindowLog:
		slidingLogDecide(&d, e, now)
	case SlidingWindowCounter:
		slidingCounterDecide(&d, e, now)
	case MinInterval:
		d.period = lim.Interval.Microseconds()
		minIntervalDecide(&d, e, now)
	case Concurrency:
		lease := lim.Lease
		if lease <= 0 {
			lease = DefaultLease
		}
		d.limit, d.period = lim.Max, lease.Microseconds()
		concurrencyDecide(&d, e, now)
	case Distinct:
		d.member = r.Member
		distinctDecide(&d, e, now)
	}
	if lim.Algorithm != GCRA && lim.Algorithm != Concurrency {
		d.resetAfter = d.reset
	}
	return d
}

func (l *Local) commit(d *localDecision, now int64, callID string) {
	switch d.algo {
	case GCRA:
		l.gcraCommit(d, now)
	case FixedWindow:
		l.fixedWindowCommit(d, now)
	case SlidingWindowLog:
		l.slidingLogCommit(d, now)
	case SlidingWindowCounter:
		l.slidingCounterCommit(d, now)
	case MinInterval:
		l.minIntervalCommit(d, now)
	case Concurrency:
		l.concurrencyCommit(d, now, callID)
	case Distinct:
		l.distinctCommit(d, now)
	}
}

// ttlUs is prelude.lua's ttl_ms in µs: the state's lifetime rounded up to a
// millisecond, plus one second.
func ttlUs(us int64) int64 {
	us = max(us, 0)
	return ((us+999)/1000 + 1000) * 1000
}

// floorUnits is prelude.lua's floor_units.
func floorUnits(span, interval float64) int64 {
	return int64(math.Floor(span/interval + 1e-9))
}
