package throttle

import (
	"container/list"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
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
	// as Options.ConcurrencyRetry. Zero means DefaultConcurrencyRetry.
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
		l.concurrencyRetry = DefaultConcurrencyRetry
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
