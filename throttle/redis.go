package throttle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is the first segment of every limiter key.
const DefaultPrefix = "sluice"

// Defaults of Options (and LocalOptions), exported so that configuration
// layers read them rather than repeat them.
const (
	// DefaultConcurrencyRetry is Options.ConcurrencyRetry's default.
	DefaultConcurrencyRetry = 100 * time.Millisecond
	// DefaultOverrideRefresh is Options.OverrideRefresh's default: a change
	// is honoured within 1s.
	DefaultOverrideRefresh = 500 * time.Millisecond
	// DefaultScanBatch is Options.ScanBatch's default.
	DefaultScanBatch = 500
)

// Options configures a Redis limiter. The zero value is ready to use.
type Options struct {
	// Prefix is prepended to every key as "<prefix>:". Zero means DefaultPrefix.
	Prefix string
	// Clock, when set, supplies the time instead of Redis TIME. Only tests
	// should set it: all workers must share one clock, and Redis is that clock.
	Clock func() time.Time
	// ConcurrencyRetry caps the RetryAfter of a blocked Concurrency limit.
	// Leases are normally released within a send's round trip, far sooner than
	// they expire, so waiting for the expiry would idle the slot. Zero means
	// DefaultConcurrencyRetry (100ms).
	ConcurrencyRetry time.Duration
	// ScanBatch is the number of keys asked for per SCAN page by the key
	// walks (Each, Cleanup, Stats). Zero means DefaultScanBatch (500).
	ScanBatch int64
	// Events configures the limits.exceeded and limits.warning stream.
	Events EventOptions
	// OverrideRefresh is how often runtime overrides (SetOverride) are
	// re-read; zero means DefaultOverrideRefresh (500ms), so a change is
	// honoured within 1s. Adaptive limits (AdaptDown) are re-read as
	// often.
	// Negative disables overrides and adaptive limits.
	OverrideRefresh time.Duration
	// PrefetchSpan: a bulk Reserve that is firm now on limits so fast that
	// this span holds at least two more of its sends takes up to
	// MaxPrefetch more slots in the same call and hands them to the next
	// sends with the same limits from memory (see DefaultPrefetchSpan's
	// file, prefetch.go). At most this span of a limit's rate is ever
	// prefetched. Zero means DefaultPrefetchSpan (1ms); negative disables.
	PrefetchSpan time.Duration
	// Logger receives the errors the limiter absorbs instead of returning
	// (event writes, override refreshes, ignored overrides, failed refunds),
	// at WARN with the limiter key under "key" and the error under "err";
	// each kind at most once per 10s. Nil means slog.Default().
	Logger *slog.Logger
}

// Redis is the Limiter over Redis: any number of goroutines and processes
// sharing the server see one state, and every decision is made by one Lua
// script using Redis TIME as the single clock.
//
// # Atomicity across scopes
//
// Requests whose keys share a scope are decided by one script: all or
// nothing, isolated from every other call. A call spanning several scopes
// (whose keys may live in different Redis Cluster slots) is decided scope by
// scope in a fixed order (scopes sorted by name, so two calls never take
// each other's scopes in opposite orders); if a later scope blocks, what the
// earlier scopes took is refunded before Consume returns. A blocked call
// therefore never keeps a unit. It is not isolated: between the take and the
// refund (one round trip) other callers may see those units as used and be
// told to wait.
type Redis struct {
	rdb              redis.UniversalClient
	slots            bool // a Redis Cluster: a script's keys share a hash slot, a scope
	prefix           string
	db               int // the database rdb selects (PausesChannel)
	clock            func() time.Time
	concurrencyRetry time.Duration
	scanBatch        int64
	events           *eventSink
	overrides        *overrideCache
	adaptive         *adaptiveCache
	log              *slog.Logger
	warn             redisWarnings
	batchOnce        sync.Once
	batch            *reserveBatcher
	prefetchSpan     time.Duration
	prefetch         prefetchCache
}

var _ Limiter = (*Redis)(nil)

// NewRedis returns a Limiter over rdb.
func NewRedis(rdb redis.UniversalClient, opts Options) *Redis {
	_, slots := rdb.(*redis.ClusterClient)
	l := &Redis{rdb: rdb, slots: slots, prefix: opts.Prefix, db: databaseOf(rdb), clock: opts.Clock, concurrencyRetry: opts.ConcurrencyRetry,
		log: opts.Logger, warn: newRedisWarnings()}
	if l.prefix == "" {
		l.prefix = DefaultPrefix
	}
	l.scanBatch = opts.ScanBatch
	if l.scanBatch <= 0 {
		l.scanBatch = DefaultScanBatch
	}
	if l.concurrencyRetry <= 0 {
		l.concurrencyRetry = DefaultConcurrencyRetry
	}
	l.prefetchSpan = opts.PrefetchSpan
	if l.prefetchSpan == 0 {
		l.prefetchSpan = DefaultPrefetchSpan
	}
	l.events = newEventSink(l, opts.Events)
	if opts.OverrideRefresh >= 0 {
		l.overrides = newOverrideCache(l, opts.OverrideRefresh)
		l.adaptive = newAdaptiveCache(l, opts.OverrideRefresh)
	}
	return l
}

// Prefix returns the key prefix, without the trailing ':'.
func (l *Redis) Prefix() string { return l.prefix }

// Client returns the Redis client the limiter uses.
func (l *Redis) Client() redis.UniversalClient { return l.rdb }

// ScanBatch is the keys asked for per SCAN page by the key walks
// (Options.ScanBatch; DefaultScanBatch when it was zero).
func (l *Redis) ScanBatch() int64 { return l.scanBatch }

// Logger is where the limiter logs the errors it absorbs: Options.Logger,
// else slog.Default() as it is at the time of the call.
func (l *Redis) Logger() *slog.Logger { return l.logger() }

// Consume implements Limiter.
func (l *Redis) Consume(ctx context.Context, reqs ...Request) (Decision, error) {
	return l.run(ctx, modeConsume, reqs)
}

// Check implements Limiter.
func (l *Redis) Check(ctx context.Context, reqs ...Request) (Decision, error) {
	return l.run(ctx, modeCheck, reqs)
}

// Status implements Limiter.
func (l *Redis) Status(ctx context.Context, reqs ...Request) (Decision, error) {
	return l.run(ctx, modeCheck, statusRequests(reqs))
}

// statusRequests asks for one unit of each limit.
func statusRequests(reqs []Request) []Request {
	out := make([]Request, len(reqs))
	for i, r := range reqs {
		r.Cost = 1
		out[i] = r
	}
	return out
}

// Release implements Limiter.
func (l *Redis) Release(ctx context.Context, leases []Lease) error {
	if len(leases) == 0 {
		return nil
	}
	if len(leases) == 1 {
		return l.rdb.ZRem(ctx, l.Key(leases[0].Key), leases[0].ID).Err()
	}
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, ls := range leases {
			p.ZRem(ctx, l.Key(ls.Key), ls.ID)
		}
		return nil
	})
	return err
}

type mode string

const (
	modeConsume mode = "consume"
	modeCheck   mode = "check"
	modeRefund  mode = "refund"
)

// Script arguments boxed once: a string converted to an interface on
// every call would allocate.
var (
	argConsume any = string(modeConsume)
	argCheck   any = string(modeCheck)
	argRefund  any = string(modeRefund)
)

func (m mode) arg() any {
	switch m {
	case modeConsume:
		return argConsume
	case modeCheck:
		return argCheck
	}
	return argRefund
}

const (
	argsPerLimit  = 6
	replyPerLimit = 6
)

// run decides reqs, scope by scope when they span several.
func (l *Redis) run(ctx context.Context, m mode, reqs []Request) (Decision, error) {
	fields, err := validate(reqs)
	if err != nil {
		return Decision{}, err
	}
	if l.overrides != nil {
		reqs = l.adaptive.apply(ctx, l.overrides.apply(ctx, reqs))
	}
	callID := ""
	if m == modeConsume && needsCallID(reqs) {
		callID = newCallID()
	}
	first := scope(reqs[0].Key)
	single := true
	for _, r := range reqs[1:] {
		if scope(r.Key) != first {
			single = false
			break
		}
	}
	var d Decision
	if len(reqs) == 1 && reqs[0].Limit.Algorithm == GCRA && m != modeRefund {
		d, err = l.gcraOne(ctx, m, reqs[0])
	} else if single {
		d, err = l.script(ctx, m, callID, reqs, fields, time.Time{})
	} else {
		d, err = l.crossScope(ctx, m, callID, reqs, fields)
	}
	if err != nil {
		return d, err
	}
	if m == modeConsume {
		l.events.observe(ctx, reqs, d)
	}
	return d, nil
}

// crossScope consumes scope groups in scope order, refunding the groups
// already taken when a later one blocks (see Redis).
func (l *Redis) crossScope(ctx context.Context, m mode, callID string, reqs []Request, fields []string) (Decision, error) {
	groups := map[string][]int{}
	var order []string
	for i, r := range reqs {
		s := scope(r.Key)
		if _, ok := groups[s]; !ok {
			order = append(order, s)
		}
		groups[s] = append(groups[s], i)
	}
	slices.Sort(order)
	out := Decision{Limits: make([]LimitDecision, len(reqs))}
	var taken []Decision // consumed groups, to refund
	var takenIdx [][]int
	blocked := false
	for _, s := range order {
		idx := groups[s]
		sub, subFields := pick(reqs, idx), pickStrings(fields, idx)
		gm := m
		if blocked {
			gm = modeCheck // report the rest without taking
		}
		d, err := l.script(ctx, gm, callID, sub, subFields, time.Time{})
		if err != nil {
			if rerr := l.refund(ctx, callID, reqs, fields, taken, takenIdx); rerr != nil {
				l.warn.refund.warn(ctx, l.logger(), "throttle: refund failed: units taken stay taken until their state expires",
					"key", reqs[0].Key, "err", rerr)
			}
			return Decision{}, err
		}
		if out.Now.IsZero() || d.Now.After(out.Now) {
			out.Now = d.Now
		}
		for k, i := range idx {
			out.Limits[i] = d.Limits[k]
		}
		if !d.Allowed {
			if !blocked && m == modeConsume {
				if err := l.refund(ctx, callID, reqs, fields, taken, takenIdx); err != nil {
					return Decision{}, err
				}
				// Refunded: report what is available now, as a blocked call
				// of one scope does.
				for _, t := range takenIdx {
					for _, i := range t {
						ld := &out.Limits[i]
						ld.Remaining = min(ld.Remaining+ld.Taken, ld.Limit)
						ld.Taken = 0
					}
				}
			}
			blocked = true
			continue
		}
		if gm == modeConsume {
			taken, takenIdx = append(taken, d), append(takenIdx, idx)
			out.Leases = append(out.Leases, d.Leases...)
		}
	}
	if blocked {
		out.Leases = nil
	}
	out.summarize()
	return out, nil
}

// refund gives back what the consumed groups took.
func (l *Redis) refund(ctx context.Context, callID string, reqs []Request, fields []string, taken []Decision, takenIdx [][]int) error {
	for g, d := range taken {
		sub := pick(reqs, takenIdx[g])
		for k := range sub {
			sub[k].Cost = d.Limits[k].Taken
		}
		// A refund must land even if the caller's context is done.
		rctx := context.WithoutCancel(ctx)
		if _, err := l.script(rctx, modeRefund, callID, sub, pickStrings(fields, takenIdx[g]), d.Now); err != nil {
			return err // names the mode and key
		}
	}
	return nil
}

func pick(reqs []Request, idx []int) []Request {
	out := make([]Request, len(idx))
	for k, i := range idx {
		out[k] = reqs[i]
	}
	return out
}

func pickStrings(s []string, idx []int) []string {
	if s == nil {
		return nil
	}
	out := make([]string, len(idx))
	for k, i := range idx {
		out[k] = s[i]
	}
	return out
}

func needsCallID(reqs []Request) bool {
	for _, r := range reqs {
		if r.Limit.Algorithm == Concurrency || r.Limit.Algorithm == SlidingWindowLog {
			return true
		}
	}
	return false
}

// script runs consume.lua once for requests of one scope. at, when set, is
// the time to decide at (a refund passes its consume's time).
func (l *Redis) script(ctx context.Context, m mode, callID string, reqs []Request, fields []string, at time.Time) (Decision, error) {
	keys := make([]string, len(reqs))
	args := make([]any, 3, 3+argsPerLimit*len(reqs))
	switch {
	case !at.IsZero():
		args[0] = at.UnixMicro()
	case l.clock != nil:
		args[0] = l.clock().UnixMicro()
	default:
		args[0] = 0
	}
	args[1], args[2] = m.arg(), callID
	for i, r := range reqs {
		keys[i] = l.Key(r.Key)
		lim := r.Limit
		cost := r.cost()
		if m == modeRefund {
			cost = r.Cost
		}
		switch lim.Algorithm {
		case GCRA:
			args = append(args, "gcra", lim.Rate.Limit, lim.Rate.Period.Microseconds(), max(lim.Burst, 1), cost, fieldOf(fields, i))
		case MinInterval:
			args = append(args, "min_interval", 1, lim.Interval.Microseconds(), 0, cost, "")
		case Concurrency:
			lease := lim.Lease
			if lease <= 0 {
				lease = DefaultLease
			}
			args = append(args, "concurrency", lim.Max, lease.Microseconds(), 0, cost, "")
		case Distinct:
			args = append(args, "distinct", lim.Rate.Limit, lim.Rate.Period.Microseconds(), 0, cost, r.Member)
		default:
			args = append(args, string(lim.Algorithm), lim.Rate.Limit, lim.Rate.Period.Microseconds(), 0, cost, "")
		}
	}
	raw, err := consumeScript.Run(ctx, l.rdb, keys, args...).Int64Slice()
	if err != nil {
		return Decision{}, fmt.Errorf("throttle: %s %q: %w", m, reqs[0].Key, err)
	}
	if m == modeRefund {
		return Decision{}, nil
	}
	return l.decode(raw, reqs, callID)
}

// gcraOne decides one GCRA request with gcra_one.lua.
func (l *Redis) gcraOne(ctx context.Context, m mode, r Request) (Decision, error) {
	var now int64
	if l.clock != nil {
		now = l.clock().UnixMicro()
	}
	lim := r.Limit
	raw, err := gcraOneScript.Run(ctx, l.rdb, []string{l.Key(r.Key)},
		now, m.arg(), lim.Rate.Limit, lim.Rate.Period.Microseconds(), max(lim.Burst, 1), r.cost()).Int64Slice()
	if err != nil {
		return Decision{}, fmt.Errorf("throttle: %s %q: %w", m, r.Key, err)
	}
	if len(raw) != 5 {
		return Decision{}, fmt.Errorf("%w: %d values for one GCRA limit", ErrMalformedReply, len(raw))
	}
	ld := LimitDecision{
		Name:       lim.Name,
		Key:        r.Key,
		Allowed:    raw[1] == 1,
		Limit:      lim.Capacity(),
		Remaining:  raw[2],
		Reset:      time.UnixMicro(raw[3]),
		RetryAfter: time.Duration(raw[4]) * time.Microsecond,
		Window:     lim.Rate.Period,
	}
	ld.Wait = ld.RetryAfter
	if ld.Allowed && m == modeConsume {
		ld.Taken = r.cost()
	}
	d := Decision{Now: time.UnixMicro(raw[0]), Limits: []LimitDecision{ld}}
	d.summarize()
	return d, nil
}

func (l *Redis) decode(raw []int64, reqs []Request, callID string) (Decision, error) {
	if len(raw) != 2+replyPerLimit*len(reqs) {
		return Decision{}, fmt.Errorf("%w: %d values for %d limits", ErrMalformedReply, len(raw), len(reqs))
	}
	d := Decision{Now: time.UnixMicro(raw[0]), Limits: make([]LimitDecision, len(reqs))}
	for i, r := range reqs {
		v := raw[2+replyPerLimit*i : 2+replyPerLimit*(i+1)]
		ld := LimitDecision{
			Name:       r.Limit.Name,
			Key:        r.Key,
			Allowed:    v[0] == 1,
			Limit:      r.Limit.Capacity(),
			Remaining:  v[1],
			Reset:      time.UnixMicro(v[2]),
			RetryAfter: time.Duration(v[3]) * time.Microsecond,
			Wait:       time.Duration(v[4]) * time.Microsecond,
			Taken:      v[5],
			Window:     r.Limit.Window(),
		}
		capConcurrencyRetry(&ld, r.Limit, l.concurrencyRetry)
		d.Limits[i] = ld
		d.Leases = appendLeases(d.Leases, r, callID, ld.Taken)
	}
	d.summarize()
	return d, nil
}

func newCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
