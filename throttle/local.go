package throttle

import (
	"cmp"
	"container/heap"
	"container/list"
	"context"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// LocalOptions configures an in-process limiter.
type LocalOptions struct {
	// Clock supplies the time; nil means time.Now.
	Clock func() time.Time
	// MaxKeys bounds memory: at most this many keys hold state after any
	// call. When a call leaves more, keys whose state equals "unused" are
	// evicted first, then the least recently used ones (see Local). Zero
	// means 100000.
	MaxKeys int
	// ConcurrencyRetry caps the RetryAfter of a blocked Concurrency limit,
	// as Options.ConcurrencyRetry. Zero means 100ms.
	ConcurrencyRetry time.Duration
}

const (
	defaultMaxKeys = 100000
	// sweepBatch is how many expired keys a call drops before deciding, at
	// most, so a wave of expiries is spread over calls.
	sweepBatch = 64
	// listCount is List's page size when count <= 0, as SCAN's.
	listCount = 10
	// maxDepthNs bounds a GCRA bucket's depth (Burst × Period / Limit) that
	// the rate.Limiter can represent: time.Duration spans 292 years.
	maxDepthNs = 100 * 365 * 24 * int64(time.Hour)
	noTTL      = math.MaxInt64
)

// Local is the in-process Limiter: the decisions of Redis, value for value,
// for the goroutines of one process and without a network round trip. It
// runs the algorithms of lua/*.lua in Go, in integer microseconds, with the
// Lua's float expressions in the Lua's order where the Lua computes in
// floats (GCRA's emission interval, the sliding window counter's weight), so
// every allowed, remaining, reset, retryAfter, wait and taken matches.
//
// # Atomicity
//
// Every call is decided under one mutex: all requests of a call are all or
// nothing and isolated from every other call, whatever their scopes. (Redis
// decides a call that spans scopes scope by scope and refunds; for such a
// blocked call its per-limit reports can differ from Local's, which are
// those Redis gives for a call within one scope.)
//
// # State
//
// Keys are Request.Key, without a prefix, and hold what the Redis key
// holds, in the same three shapes, so a key whose algorithm changes is
// handled as Redis handles it:
//
//   - a string: a lone GCRA limit's bucket (a golang.org/x/time/rate
//     Limiter, see below), or MinInterval's last operation (µs);
//   - a hash: FixedWindow's {w, c, bw, b} and SlidingWindowCounter's
//     {w, c, p} (window start µs and unit counts), and the buckets of GCRA
//     limits that share the key, by limit name;
//   - a sorted set: SlidingWindowLog's admission times (µs) as runs of
//     units admitted in one microsecond; Concurrency's leases, id → expiry
//     (µs); Distinct's members, member → last admission (µs); or, once
//     several of these algorithms wrote the key, all their members in one
//     list by time.
//
// Each key expires when its Redis key would (the TTL the Lua sets, counted
// on Local's clock): expired state is dropped when it is next touched, and
// each call also drops up to 64 expired keys, soonest first. No goroutine
// runs in the background.
//
// # Bounded memory
//
// At most MaxKeys keys hold state after any call. When a call leaves more,
// Local evicts, one at a time, the key that expires soonest if its state
// already equals "unused" (GCRA bucket full, window over, no live entries,
// members or leases), which changes no decision; otherwise the least
// recently used key (used: read or written by any call). Evicting a key in
// use forgets what it counted, so that key can then over-admit, up to one
// full capacity; size MaxKeys above the number of keys live at once. Memory
// per key is a few hundred bytes plus its entries: one run per distinct
// microsecond for SlidingWindowLog, one element per lease or member.
//
// # GCRA on golang.org/x/time/rate
//
// A GCRA bucket is a *rate.Limiter of Rate.Limit/Rate.Period tokens per
// second and burst max(Burst, 1), one per key (and per limit name when GCRA
// limits share a key). Decisions inspect it with TokensAt(now): the Lua's
// theoretical arrival time (TAT) is now + (burst − tokens) × interval,
// rounded to the microsecond, which cancels float noise, and remaining,
// reset and retryAfter follow from it with the Lua's formulas (remaining is
// floor(tokens after) with the Lua's 1e-9 tolerance). Units are admitted
// with AllowN(now, cost). The Lua stores the TAT rounded up to a whole
// microsecond; when the limiter's own state then differs from the stored TAT
// by more than float noise (1ns plus 4e-16 of the bucket depth), the
// limiter is re-anchored on it (a fresh limiter, emptied at TAT − depth). That happens on every admission when the
// emission interval Period/Limit is not a whole number of microseconds
// (1s/3), when the clock moved backwards past the last admission, and if
// AllowN ever disagrees with the Lua at a boundary; with whole-microsecond
// intervals and a clock that does not go back it does not happen. The
// limiter's float error grows with the bucket depth Burst × Period / Limit
// (about 3e-16 of it): decisions are exact up to a depth of 30 years, may be
// a microsecond off beyond, and depths over 100 years are not supported.
//
// # Known differences from Redis
//
// Local counts expiry on its own clock, Redis on the server's: with a test
// clock (Options.Clock) Redis keeps state that Local has already dropped,
// which shows in Reset's count and in List, and in decisions only if the
// clock moves back over an expiry. Release on a key that holds another
// algorithm's state does nothing (Redis answers WRONGTYPE). Calls spanning
// scopes: see Atomicity. Runtime overrides (SetOverride) and the events
// stream are Redis features; Local decides the limits it is given.
type Local struct {
	clock            func() time.Time
	maxKeys          int
	concurrencyRetry time.Duration

	mu     sync.Mutex
	keys   map[string]*entry
	lru    list.List  // of *entry, most recently used first
	expiry expiryHeap // entries by expires, soonest first
	// fixups counts GCRA admissions after which the rate.Limiter was
	// re-anchored on the Lua's stored TAT (see Local).
	fixups int64
}

var _ Limiter = (*Local)(nil)

// NewLocal returns an in-process Limiter.
func NewLocal(opts LocalOptions) *Local {
	l := &Local{clock: opts.Clock, maxKeys: opts.MaxKeys, concurrencyRetry: opts.ConcurrencyRetry, keys: map[string]*entry{}}
	if l.clock == nil {
		l.clock = time.Now
	}
	if l.maxKeys <= 0 {
		l.maxKeys = defaultMaxKeys
	}
	if l.concurrencyRetry <= 0 {
		l.concurrencyRetry = 100 * time.Millisecond
	}
	return l
}

// Consume implements Limiter.
func (l *Local) Consume(ctx context.Context, reqs ...Request) (Decision, error) {
	return l.run(ctx, modeConsume, reqs)
}

// Check implements Limiter.
func (l *Local) Check(ctx context.Context, reqs ...Request) (Decision, error) {
	return l.run(ctx, modeCheck, reqs)
}

// Status implements Limiter.
func (l *Local) Status(ctx context.Context, reqs ...Request) (Decision, error) {
	return l.run(ctx, modeCheck, statusRequests(reqs))
}

// Release implements Limiter.
func (l *Local) Release(ctx context.Context, leases []Lease) error {
	if len(leases) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("throttle: release: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock().UnixMicro()
	for _, ls := range leases {
		e := l.lookup(ls.Key, now)
		if e == nil || e.typ != typeZset || !e.z.remove(ls.ID) {
			continue
		}
		if e.z.len() == 0 { // Redis deletes an emptied set
			l.remove(e)
			continue
		}
		if s, ok := e.z.(*leaseSet); ok {
			e.idleAt = s.newest()
		}
	}
	return nil
}

// Reset implements Limiter.
func (l *Local) Reset(ctx context.Context, keys ...string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("throttle: reset: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock().UnixMicro()
	var n int64
	for _, k := range keys {
		if e := l.lookup(k, now); e != nil {
			l.remove(e)
			n++
		}
	}
	return n, nil
}

// ResetPrefix implements Limiter.
func (l *Local) ResetPrefix(ctx context.Context, prefix string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("throttle: reset %q: %w", prefix, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(l.clock().UnixMicro(), math.MaxInt)
	var n int64
	for k, e := range l.keys {
		if strings.HasPrefix(k, prefix) {
			l.remove(e)
			n++
		}
	}
	return n, nil
}

// List implements Limiter. The cursor is an offset into the sorted keys
// that start with prefix; count (10 when <= 0) is the page size. Keys
// created or dropped between pages may shift a page, as with SCAN.
func (l *Local) List(ctx context.Context, prefix string, cursor uint64, count int64) ([]string, uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, fmt.Errorf("throttle: list %q: %w", prefix, err)
	}
	l.mu.Lock()
	l.sweep(l.clock().UnixMicro(), math.MaxInt)
	var keys []string
	for k := range l.keys {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	l.mu.Unlock()
	slices.Sort(keys)
	if count <= 0 {
		count = listCount
	}
	if cursor >= uint64(len(keys)) {
		return nil, 0, nil
	}
	end := cursor + uint64(count)
	if end >= uint64(len(keys)) {
		return keys[cursor:], 0, nil
	}
	return keys[cursor:end], end, nil
}

// Len returns how many keys hold state now (never more than MaxKeys after a
// call).
func (l *Local) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(l.clock().UnixMicro(), math.MaxInt)
	return len(l.keys)
}

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

// ---- GCRA (gcra.lua) ----

// gcraParams is a GCRA limit as gcra.lua gets it: limit units per period
// (µs), a bucket of burst units.
type gcraParams struct{ limit, period, burst int64 }

// interval is the emission interval in µs, as the Lua computes it.
func (p gcraParams) interval() float64 { return float64(p.period) / float64(p.limit) }

// rate is the refill rate in tokens per second.
func (p gcraParams) rate() rate.Limit { return rate.Limit(float64(p.limit) * 1e6 / float64(p.period)) }

// depthNs is the bucket depth burst × period / limit in ns, rounded to the
// nearest, at most maxDepthNs.
func (p gcraParams) depthNs() int64 {
	hi, lo := bits.Mul64(uint64(p.period)*1000, uint64(p.burst))
	if hi >= uint64(p.limit) {
		return maxDepthNs
	}
	q, r := bits.Div64(hi, lo, uint64(p.limit))
	if r >= uint64(p.limit)-r {
		q++
	}
	if q > uint64(maxDepthNs) {
		return maxDepthNs
	}
	return int64(q)
}

// gcraBucket is one GCRA limit's state on one key: a rate.Limiter whose
// tokens encode the TAT gcra.lua would store.
type gcraBucket struct {
	p      gcraParams
	lim    *rate.Limiter
	lastNs int64 // when lim's tokens were last set (AllowN), Unix ns
}

// newGCRABucket returns a bucket for p whose Lua TAT is tat (full when
// tat <= now).
func newGCRABucket(p gcraParams, tat, now int64) *gcraBucket {
	b := &gcraBucket{p: p}
	if tat > now {
		b.anchor(tat)
	} else {
		b.lim = rate.NewLimiter(p.rate(), int(p.burst))
		b.lastNs = math.MinInt64
	}
	return b
}

// anchor makes the limiter hold exactly the TAT tat: empty at tat − depth,
// so full at tat.
func (b *gcraBucket) anchor(tat int64) {
	at := tat*1000 - b.p.depthNs()
	b.lim = rate.NewLimiter(b.p.rate(), int(b.p.burst))
	b.lim.AllowN(time.Unix(0, at), int(b.p.burst))
	b.lastNs = at
}

// tatAt returns gcra.lua's tat at now, max(stored TAT, now), from the
// tokens available at now.
func (b *gcraBucket) tatAt(now int64) int64 {
	if now*1000 < b.lastNs { // the clock went back: the limiter would report its last tokens
		return max(b.stored(), now)
	}
	tok := b.lim.TokensAt(time.UnixMicro(now))
	return now + int64(math.Round((float64(b.p.burst)-tok)*b.p.interval()))
}

// stored returns the TAT gcra.lua would have stored (possibly before now),
// from the tokens at the limiter's last update.
func (b *gcraBucket) stored() int64 {
	tok := b.lim.TokensAt(time.Unix(0, b.lastNs))
	us := b.lastNs / 1000
	if b.lastNs%1000 < 0 {
		us--
	}
	frac := float64(b.lastNs-us*1000) / 1000
	return us + int64(math.Round(frac+float64((float64(b.p.burst)-tok)*b.p.interval())))
}

// value returns the TAT as a GCRA limit with params p reads it: a bucket
// of other params (the limit was reconfigured) is read as its stored TAT,
// which the Lua reinterprets with the new params.
func (b *gcraBucket) value(now int64, p gcraParams) int64 {
	if b.p == p {
		return b.tatAt(now)
	}
	return b.stored()
}

// admit takes cost units at now with AllowN, then checks that the limiter
// encodes want, the TAT gcra.lua stores; if not (see Local), it re-anchors
// the limiter on want and reports true.
func (b *gcraBucket) admit(now, cost, want int64) (fixed bool) {
	t := time.UnixMicro(now)
	if b.lim.AllowN(t, int(cost)) {
		b.lastNs = now * 1000
		got := float64((float64(b.p.burst) - b.lim.TokensAt(t)) * b.p.interval())
		// Float noise grows with the bucket depth (about 3e-16 of it).
		if math.Abs(got-float64(want-now)) <= 1e-3+float64(b.p.depthNs())*4e-19 {
			return false
		}
	}
	b.anchor(want)
	return true
}

func gcraDecide(d *localDecision, e *entry, field string, now int64, p gcraParams) {
	d.field, d.gcra = field, p
	var stored int64
	has := false
	if e != nil {
		switch {
		case field == "" && e.typ == typeString:
			if e.gcra != nil {
				stored = e.gcra.value(now, p)
			} else {
				stored = e.last // a MinInterval time, read as a TAT like the Lua does
			}
			has = true
		case field != "" && e.typ == typeHash:
			if b := e.hash.gcra[field]; b != nil {
				stored, has = b.value(now, p), true
			}
		default:
			d.replace = true
		}
	}
	// As the Lua, relative to now: TAT − now is a small exact integer.
	interval := p.interval()
	tolerance := float64(interval * float64(p.burst))
	var ahead int64
	if has {
		ahead = max(stored-now, 0)
	}
	newAhead := float64(ahead) + float64(interval*float64(d.cost))
	d.tat = now + ahead
	d.stored = now + int64(math.Ceil(newAhead))
	d.remNow = max(0, floorUnits(tolerance-float64(ahead), interval))
	d.reset = now + ahead
	if newAhead <= tolerance {
		d.ok = true
		d.remAfter = max(0, floorUnits(tolerance-newAhead, interval))
		d.resetAfter = d.stored
	} else {
		d.retry = int64(math.Ceil(newAhead - tolerance))
		d.remAfter = d.remNow
		d.resetAfter = d.reset
	}
	d.wait = d.retry
}

func (l *Local) gcraCommit(d *localDecision, now int64) {
	if d.replace {
		l.delete(d.key)
	}
	expires := now + ttlUs(d.stored-now)
	if d.field == "" {
		e := l.put(d.key, typeString)
		e.gcra, e.last = l.admit(e.gcra, d, now), 0
		l.setExpires(e, expires)
		e.idleAt = d.stored
		return
	}
	e := l.put(d.key, typeHash)
	if e.hash.gcra == nil {
		e.hash.gcra = map[string]*gcraBucket{}
	}
	e.hash.gcra[d.field] = l.admit(e.hash.gcra[d.field], d, now)
	if e.expires == noTTL || e.expires < expires { // prelude.lua's extend
		l.setExpires(e, expires)
	}
	e.idleAt = max(e.idleAt, d.stored)
}

func (l *Local) admit(b *gcraBucket, d *localDecision, now int64) *gcraBucket {
	if b == nil || b.p != d.gcra {
		b = newGCRABucket(d.gcra, d.tat, now)
	}
	if b.admit(now, d.cost, d.stored) {
		l.fixups++
	}
	return b
}

// ---- FixedWindow (fixed_window.lua) ----

func fixedWindowDecide(d *localDecision, e *entry, now int64) {
	limit, period := d.limit, d.period
	d.start = now - now%period
	stop := d.start + period
	h := hashOf(d, e)
	used := int64(0)
	if h != nil && h.has&hasW != 0 && h.w == d.start {
		d.current = true
		used = h.get(hasC, h.c)
	}
	d.remNow = max(0, limit-used)
	d.reset = stop
	if used+d.cost <= limit {
		d.ok = true
		d.remAfter = limit - used - d.cost
	} else {
		d.retry = stop - now
		d.remAfter = d.remNow
	}
	if h != nil && h.has&hasBW != 0 && h.bw == d.start {
		d.waiting = h.get(hasB, h.b)
	}
	d.wait = d.retry
	if !d.ok {
		d.wait = d.retry + d.waiting/limit*period
	}
}

func (l *Local) fixedWindowCommit(d *localDecision, now int64) {
	if d.replace {
		l.delete(d.key)
	}
	e := l.put(d.key, typeHash)
	h := e.hash
	stop := d.start + d.period
	if d.current && !d.replace {
		h.c = h.get(hasC, h.c) + d.cost
		h.has |= hasC
	} else {
		h.w, h.c = d.start, d.cost
		h.has |= hasW | hasC
		l.setExpires(e, now+ttlUs(stop-now))
	}
	e.idleAt = max(e.idleAt, stop)
}

// fixedWindowRecord counts a blocked caller among the window's waiters.
func (l *Local) fixedWindowRecord(d *localDecision, now int64) {
	if d.replace {
		l.delete(d.key)
	}
	e := l.put(d.key, typeHash)
	stop := d.start + d.period
	e.hash.bw, e.hash.b = d.start, d.waiting+d.cost
	e.hash.has |= hasBW | hasB
	if !d.current || d.replace {
		l.setExpires(e, now+ttlUs(stop-now))
	}
	e.idleAt = max(e.idleAt, stop)
}

// ---- SlidingWindowLog (sliding_window_log.lua) ----

func slidingLogDecide(d *localDecision, e *entry, now int64) {
	limit, period := d.limit, d.period
	lo := now - period
	z := zsetOf(d, e)
	used := int64(0)
	if z != nil {
		used = z.countAbove(lo)
	}
	d.remNow = max(0, limit-used)
	newest := now
	if used > 0 {
		newest = z.newest()
	}
	if used+d.cost <= limit {
		d.ok = true
		d.remAfter = limit - used - d.cost
		d.reset = now + period
	} else {
		d.remAfter = d.remNow
		at, _ := z.kthAbove(lo, used+d.cost-limit)
		d.retry = max(0, at+period-now)
		d.reset = newest + period
	}
	d.wait = d.retry
}

func (l *Local) slidingLogCommit(d *localDecision, now int64) {
	if d.replace {
		l.delete(d.key)
	}
	e := l.put(d.key, typeZset)
	s := shape(e, newLogSet)
	s.trim(now - d.period)
	s.add("", now, d.cost) // members "<call id>:<i>", never read by name
	l.setExpires(e, now+ttlUs(d.period))
	e.idleAt = s.newest() + d.period
}

// ---- SlidingWindowCounter (sliding_window_counter.lua) ----

func slidingCounterDecide(d *localDecision, e *entry, now int64) {
	limit, period := d.limit, d.period
	start := now - now%period
	d.start = start
	h := hashOf(d, e)
	cur, prev := int64(0), int64(0)
	if h != nil && h.has&hasW != 0 {
		switch h.w {
		case start:
			d.current = true
			cur, prev = h.get(hasC, h.c), h.get(hasP, h.p)
		case start - period:
			prev = h.get(hasC, h.c)
		}
	}
	d.prev = prev
	// The Lua's float expressions, in its order; float64(x*y) keeps the
	// product rounded on its own (no fused multiply-add).
	L, P, C, V, cost := float64(limit), float64(period), float64(cur), float64(prev), float64(d.cost)
	weighted := float64(V*float64(period-(now-start))) / P
	d.remNow = max(0, int64(math.Floor(L-weighted-C+1e-9)))
	if weighted+C+cost <= L+1e-9 {
		d.ok = true
		d.remAfter = max(0, int64(math.Floor(L-weighted-C-cost+1e-9)))
		d.reset = start + 2*period
	} else {
		d.remAfter = d.remNow
		at, found := int64(0), false
		room := limit - cur - d.cost
		if room >= 0 && prev > 0 {
			// prev × (period − e) / period <= room ⇔ e >= period − room × period / prev
			if x := math.Ceil(P - float64(float64(room)*P)/V - 1e-9); x < P {
				at, found = start+int64(x), true
			}
		}
		if !found {
			x := 0.0
			if cur > 0 {
				x = math.Max(0, math.Ceil(P-float64(float64(limit-d.cost)*P)/C-1e-9))
			}
			at = start + period + int64(x)
		}
		d.retry = max(0, at-now)
		switch {
		case cur > 0:
			d.reset = start + 2*period
		case prev > 0:
			d.reset = start + period
		default:
			d.reset = now
		}
	}
	d.wait = d.retry
}

func (l *Local) slidingCounterCommit(d *localDecision, now int64) {
	if d.replace {
		l.delete(d.key)
	}
	e := l.put(d.key, typeHash)
	h := e.hash
	end := d.start + 2*d.period
	if d.current && !d.replace {
		h.c = h.get(hasC, h.c) + d.cost
		h.has |= hasC
	} else {
		h.w, h.c, h.p = d.start, d.cost, d.prev
		h.has |= hasW | hasC | hasP
		l.setExpires(e, now+ttlUs(end-now))
	}
	e.idleAt = max(e.idleAt, end)
}

// ---- MinInterval (min_interval.lua) ----

func minIntervalDecide(d *localDecision, e *entry, now int64) {
	interval := d.period
	var last int64
	has := false
	if e != nil {
		if e.typ == typeString {
			last, has = e.last, true
			if e.gcra != nil {
				last = e.gcra.stored() // a GCRA TAT, read as a time like the Lua does
			}
		} else {
			d.replace = true
		}
	}
	d.taken = 1
	if has && now < last+interval {
		d.retry = last + interval - now
		d.reset = last + interval
	} else {
		d.ok = true
		d.remNow = 1
		d.reset = now + interval
	}
	d.wait = d.retry
}

func (l *Local) minIntervalCommit(d *localDecision, now int64) {
	e := l.put(d.key, typeString) // SET: replaces any type
	e.gcra, e.last = nil, now
	l.setExpires(e, now+ttlUs(d.period))
	e.idleAt = now + d.period
}

// ---- Concurrency (concurrency.lua) ----

func concurrencyDecide(d *localDecision, e *entry, now int64) {
	limit := d.limit
	z := zsetOf(d, e)
	held := int64(0)
	if z != nil {
		held = z.countAbove(now)
	}
	d.remNow = max(0, limit-held)
	// Full capacity again when the last held lease expires.
	latest := now
	if held > 0 {
		if at, ok := z.kthAbove(now, held); ok {
			latest = at
		}
	}
	d.reset, d.resetAfter = latest, latest
	if held+d.cost <= limit {
		d.ok = true
		d.remAfter = limit - held - d.cost
		d.resetAfter = max(latest, now+d.period)
	} else {
		d.remAfter = d.remNow
		expiry := now
		if at, ok := z.kthAbove(now, 1); ok {
			expiry = at
		}
		d.retry = max(0, expiry-now)
	}
	d.wait = d.retry
}

func (l *Local) concurrencyCommit(d *localDecision, now int64, callID string) {
	if d.replace {
		l.delete(d.key)
	}
	e := l.put(d.key, typeZset)
	s := shape(e, newLeaseSet)
	s.trim(now)
	for i := int64(1); i <= d.cost; i++ {
		s.add(leaseID(callID, i), now+d.period, 1)
	}
	last := s.newest()
	l.setExpires(e, now+ttlUs(last-now))
	e.idleAt = last
}

// ---- Distinct (distinct.lua) ----

func distinctDecide(d *localDecision, e *entry, now int64) {
	limit, period := d.limit, d.period
	lo := now - period
	z := zsetOf(d, e)
	var score, used int64
	has := false
	if z != nil {
		score, has = z.score(d.member)
		used = z.countAbove(lo)
	}
	d.remNow = max(0, limit-used)
	switch {
	case has && score > lo:
		d.ok, d.taken = true, 0
		d.remAfter = d.remNow
		d.reset = now + period
	case used+1 <= limit:
		d.ok, d.taken = true, 1
		d.remAfter = limit - used - 1
		d.reset = now + period
	default:
		d.taken = 0
		d.remAfter = d.remNow
		at, _ := z.kthAbove(lo, used+1-limit)
		d.retry = max(0, at+period-now)
		d.reset = z.newest() + period
	}
	d.wait = d.retry
}

func (l *Local) distinctCommit(d *localDecision, now int64) {
	if d.replace {
		l.delete(d.key)
	}
	e := l.put(d.key, typeZset)
	s := shape(e, newDistinctSet)
	s.trim(now - d.period)
	s.add(d.member, now, 1)
	l.setExpires(e, now+ttlUs(d.period))
	e.idleAt = s.newest() + d.period
}

// ---- keys ----

// valueType is the Redis type a key's state has.
type valueType uint8

const (
	typeString valueType = iota + 1
	typeHash
	typeZset
)

// entry is one key's state.
type entry struct {
	key string
	typ valueType
	// typeString: a lone GCRA limit's bucket, else MinInterval's last
	// operation (µs).
	gcra *gcraBucket
	last int64
	hash *hashState // typeHash
	z    zset       // typeZset; nil until the first commit shapes it

	expires int64 // µs: when the Redis key's TTL would end (noTTL: none)
	idleAt  int64 // µs: from then on the state equals "unused"
	elem    *list.Element
	index   int // in Local.expiry
}

// hashState is a Redis hash of limiter state: window fields (present when
// their bit is set in has) and GCRA buckets by limit name.
type hashState struct {
	w, c, bw, b, p int64
	has            uint8
	gcra           map[string]*gcraBucket
}

const (
	hasW = 1 << iota
	hasC
	hasBW
	hasB
	hasP
)

// get returns v when the field is present, else 0 (the Lua's `or 0`).
func (h *hashState) get(bit uint8, v int64) int64 {
	if h.has&bit == 0 {
		return 0
	}
	return v
}

// hashOf returns e's hash, or nil; a key of another type sets d.replace, as
// a read that fails with WRONGTYPE in the Lua.
func hashOf(d *localDecision, e *entry) *hashState {
	if e == nil {
		return nil
	}
	if e.typ != typeHash {
		d.replace = true
		return nil
	}
	return e.hash
}

// zsetOf is hashOf for sorted sets.
func zsetOf(d *localDecision, e *entry) zset {
	if e == nil {
		return nil
	}
	if e.typ != typeZset {
		d.replace = true
		return nil
	}
	return e.z
}

// lookup returns key's entry, dropping it if it has expired, and marks it
// used.
func (l *Local) lookup(key string, now int64) *entry {
	e := l.keys[key]
	if e == nil {
		return nil
	}
	if e.expires <= now {
		l.remove(e)
		return nil
	}
	l.lru.MoveToFront(e.elem)
	return e
}

// put returns key's entry of type typ, creating it; a key of another type
// starts over (Redis DEL, or SET over any type).
func (l *Local) put(key string, typ valueType) *entry {
	e := l.keys[key]
	if e != nil && e.typ == typ {
		return e
	}
	if e != nil {
		l.remove(e)
	}
	e = &entry{key: key, typ: typ, expires: noTTL}
	if typ == typeHash {
		e.hash = &hashState{}
	}
	e.elem = l.lru.PushFront(e)
	heap.Push(&l.expiry, e)
	l.keys[key] = e
	return e
}

func (l *Local) delete(key string) {
	if e := l.keys[key]; e != nil {
		l.remove(e)
	}
}

func (l *Local) remove(e *entry) {
	delete(l.keys, e.key)
	l.lru.Remove(e.elem)
	heap.Remove(&l.expiry, e.index)
}

func (l *Local) setExpires(e *entry, at int64) {
	e.expires = at
	heap.Fix(&l.expiry, e.index)
}

// sweep drops up to n expired keys, soonest expired first.
func (l *Local) sweep(now int64, n int) {
	for ; n > 0 && len(l.expiry) > 0 && l.expiry[0].expires <= now; n-- {
		l.remove(l.expiry[0])
	}
}

// bound evicts keys until at most maxKeys remain: the key expiring soonest
// while its state equals "unused", else the least recently used key.
func (l *Local) bound(now int64) {
	for len(l.keys) > l.maxKeys {
		if e := l.expiry[0]; e.idleAt <= now {
			l.remove(e)
			continue
		}
		l.remove(l.lru.Back().Value.(*entry))
	}
}

// expiryHeap orders entries by expires (container/heap).
type expiryHeap []*entry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires < h[j].expires }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *expiryHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}

// ---- sorted sets ----

// zset is a Redis sorted set of limiter state, scores in µs, in the shape
// of the algorithm that writes it (logSet, leaseSet, distinctSet), or a
// mixedSet when several algorithms wrote it.
type zset interface {
	// countAbove is ZCOUNT key (lo +inf.
	countAbove(lo int64) int64
	// kthAbove is the k-th lowest score (k from 1) above lo.
	kthAbove(lo, k int64) (int64, bool)
	// newest is the highest score; the set is not empty.
	newest() int64
	score(member string) (int64, bool)
	remove(member string) bool
	len() int
	// members lists every member (SlidingWindowLog entries under made-up
	// names), to convert to a mixedSet.
	members() []zmember
	// trim is ZREMRANGEBYSCORE key -inf upTo.
	trim(upTo int64)
	// add is ZADD: member name at score at; name "" adds n
	// SlidingWindowLog entries.
	add(name string, at, n int64)
}

type zmember struct {
	name  string
	score int64
}

// logSet is SlidingWindowLog's set: one entry per admitted unit, kept as
// runs of units admitted in the same microsecond, oldest first.
type logSet struct {
	runs  []logRun
	total int64
}

type logRun struct{ at, n int64 }

func (s *logSet) firstAbove(lo int64) int {
	return sort.Search(len(s.runs), func(i int) bool { return s.runs[i].at > lo })
}

func (s *logSet) countAbove(lo int64) int64 {
	i := s.firstAbove(lo)
	var n int64
	if i <= len(s.runs)/2 {
		n = s.total
		for _, r := range s.runs[:i] {
			n -= r.n
		}
		return n
	}
	for _, r := range s.runs[i:] {
		n += r.n
	}
	return n
}

func (s *logSet) kthAbove(lo, k int64) (int64, bool) {
	for _, r := range s.runs[s.firstAbove(lo):] {
		if k <= r.n {
			return r.at, true
		}
		k -= r.n
	}
	return 0, false
}

func (s *logSet) newest() int64              { return s.runs[len(s.runs)-1].at }
func (s *logSet) score(string) (int64, bool) { return 0, false } // members are "<call id>:<i>"
func (s *logSet) remove(string) bool         { return false }
func (s *logSet) len() int                   { return len(s.runs) }
func (s *logSet) trim(upTo int64)            { s.dropFirst(s.firstAbove(upTo)) }
func (s *logSet) dropFirst(i int)            { s.total -= sumRuns(s.runs[:i]); s.runs = s.runs[i:] }
func sumRuns(rs []logRun) (n int64) {
	for _, r := range rs {
		n += r.n
	}
	return n
}
func (s *logSet) members() (out []zmember) {
	for _, r := range s.runs {
		for range r.n {
			out = append(out, zmember{name: "\x00log:" + strconv.Itoa(len(out)), score: r.at})
		}
	}
	return out
}

// add records n units at at.
func (s *logSet) add(_ string, at, n int64) {
	i := s.firstAbove(at)
	if i > 0 && s.runs[i-1].at == at {
		s.runs[i-1].n += n
	} else {
		s.runs = slices.Insert(s.runs, i, logRun{at, n})
	}
	s.total += n
}

// leaseSet is Concurrency's set: lease id → expiry. It holds at most a
// few times Max leases, so it is a plain slice.
type leaseSet struct{ leases []zmember }

func (s *leaseSet) countAbove(lo int64) (n int64) {
	for _, m := range s.leases {
		if m.score > lo {
			n++
		}
	}
	return n
}

func (s *leaseSet) kthAbove(lo, k int64) (int64, bool) {
	var above []int64
	for _, m := range s.leases {
		if m.score > lo {
			above = append(above, m.score)
		}
	}
	if k < 1 || k > int64(len(above)) {
		return 0, false
	}
	slices.Sort(above)
	return above[k-1], true
}

func (s *leaseSet) newest() int64 {
	n := s.leases[0].score
	for _, m := range s.leases[1:] {
		n = max(n, m.score)
	}
	return n
}

func (s *leaseSet) score(id string) (int64, bool) {
	for _, m := range s.leases {
		if m.name == id {
			return m.score, true
		}
	}
	return 0, false
}

func (s *leaseSet) remove(id string) bool {
	for i, m := range s.leases {
		if m.name == id {
			s.leases = slices.Delete(s.leases, i, i+1)
			return true
		}
	}
	return false
}

func (s *leaseSet) len() int           { return len(s.leases) }
func (s *leaseSet) members() []zmember { return slices.Clone(s.leases) }
func (s *leaseSet) trim(upTo int64) {
	s.leases = slices.DeleteFunc(s.leases, func(m zmember) bool { return m.score <= upTo })
}
func (s *leaseSet) add(id string, at, _ int64) {
	for i := range s.leases {
		if s.leases[i].name == id {
			s.leases[i].score = at
			return
		}
	}
	s.leases = append(s.leases, zmember{id, at})
}

// distinctSet is Distinct's set: member → last admission, in a list by
// time (oldest first) with an index by member.
type distinctSet struct {
	order  list.List // of *zmember
	byName map[string]*list.Element
}

func newDistinctSet() *distinctSet { return &distinctSet{byName: map[string]*list.Element{}} }
func newLogSet() *logSet           { return &logSet{} }
func newLeaseSet() *leaseSet       { return &leaseSet{} }

func zscore(el *list.Element) int64 { return el.Value.(*zmember).score }

func (s *distinctSet) countAbove(lo int64) int64 {
	n := int64(len(s.byName))
	for el := s.order.Front(); el != nil && zscore(el) <= lo; el = el.Next() {
		n--
	}
	return n
}

func (s *distinctSet) kthAbove(lo, k int64) (int64, bool) {
	el := s.order.Front()
	for el != nil && zscore(el) <= lo {
		el = el.Next()
	}
	for ; el != nil; el = el.Next() {
		if k--; k == 0 {
			return zscore(el), true
		}
	}
	return 0, false
}

func (s *distinctSet) newest() int64 { return zscore(s.order.Back()) }

func (s *distinctSet) score(member string) (int64, bool) {
	if el := s.byName[member]; el != nil {
		return zscore(el), true
	}
	return 0, false
}

func (s *distinctSet) remove(member string) bool {
	el := s.byName[member]
	if el == nil {
		return false
	}
	s.order.Remove(el)
	delete(s.byName, member)
	return true
}

func (s *distinctSet) len() int { return len(s.byName) }

func (s *distinctSet) members() []zmember {
	out := make([]zmember, 0, len(s.byName))
	for el := s.order.Front(); el != nil; el = el.Next() {
		out = append(out, *el.Value.(*zmember))
	}
	return out
}

func (s *distinctSet) trim(upTo int64) {
	for el := s.order.Front(); el != nil && zscore(el) <= upTo; el = s.order.Front() {
		s.remove(el.Value.(*zmember).name)
	}
}

// add sets member's time to t, keeping the list in time order.
func (s *distinctSet) add(member string, t, _ int64) {
	el := s.byName[member]
	if el == nil {
		el = s.order.PushBack(&zmember{name: member, score: t})
		s.byName[member] = el
	} else {
		el.Value.(*zmember).score = t
		s.order.MoveToBack(el)
	}
	// Usually t is the newest time; a clock that went back needs a walk.
	for prev := el.Prev(); prev != nil && zscore(prev) > t; prev = el.Prev() {
		s.order.MoveBefore(el, prev)
	}
}

// shape returns e's set for a commit of one algorithm: in that
// algorithm's shape T (new when the key has none), or, when the key holds
// another algorithm's members (its limit was reconfigured), every member in
// a mixedSet, as Redis keeps them all in one sorted set.
func shape[T zset](e *entry, fresh func() T) zset {
	if e.z == nil {
		e.z = fresh()
		return e.z
	}
	if _, ok := e.z.(T); ok {
		return e.z
	}
	if _, ok := e.z.(*mixedSet); !ok {
		e.z = newMixedSet(e.z.members())
	}
	return e.z
}

// mixedSet is a sorted set that holds members of several algorithms, by
// name, lowest score first. Only keys whose limit changed algorithm use it.
type mixedSet struct {
	ms    []zmember
	units int // anonymous SlidingWindowLog entries named so far
}

func newMixedSet(ms []zmember) *mixedSet {
	slices.SortStableFunc(ms, func(a, b zmember) int { return cmp.Compare(a.score, b.score) })
	return &mixedSet{ms: ms}
}

func (s *mixedSet) firstAbove(lo int64) int {
	return sort.Search(len(s.ms), func(i int) bool { return s.ms[i].score > lo })
}

func (s *mixedSet) countAbove(lo int64) int64 { return int64(len(s.ms) - s.firstAbove(lo)) }

func (s *mixedSet) kthAbove(lo, k int64) (int64, bool) {
	i := int64(s.firstAbove(lo)) + k - 1
	if k < 1 || i >= int64(len(s.ms)) {
		return 0, false
	}
	return s.ms[i].score, true
}

func (s *mixedSet) newest() int64 { return s.ms[len(s.ms)-1].score }

func (s *mixedSet) score(name string) (int64, bool) {
	if i := slices.IndexFunc(s.ms, func(m zmember) bool { return m.name == name }); i >= 0 {
		return s.ms[i].score, true
	}
	return 0, false
}

func (s *mixedSet) remove(name string) bool {
	n := len(s.ms)
	s.ms = slices.DeleteFunc(s.ms, func(m zmember) bool { return m.name == name })
	return len(s.ms) < n
}

func (s *mixedSet) len() int           { return len(s.ms) }
func (s *mixedSet) members() []zmember { return slices.Clone(s.ms) }
func (s *mixedSet) trim(upTo int64)    { s.ms = s.ms[s.firstAbove(upTo):] }

func (s *mixedSet) add(name string, at, n int64) {
	if name != "" {
		s.remove(name)
		s.ms = slices.Insert(s.ms, s.firstAbove(at), zmember{name, at})
		return
	}
	for range n {
		s.units++
		s.ms = slices.Insert(s.ms, s.firstAbove(at), zmember{"\x00unit:" + strconv.Itoa(s.units), at})
	}
}
