package throttle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is the first segment of every limiter key.
const DefaultPrefix = "sluice"

// Options configures a Limiter. The zero value is ready to use.
type Options struct {
	// Prefix is prepended to every key as "<prefix>:". Zero means DefaultPrefix.
	Prefix string
	// Clock, when set, supplies the time instead of Redis TIME. Only tests
	// should set it: all workers must share one clock, and Redis is that clock.
	Clock func() time.Time
	// ConcurrencyRetry caps the RetryAfter of a blocked Concurrency limit.
	// Leases are normally released within a send's round trip, far sooner than
	// they expire, so waiting for the expiry would idle the slot. Zero means 100ms.
	ConcurrencyRetry time.Duration
}

// Limiter decides, over Redis, whether work may proceed under a set of limits.
// It is safe for concurrent use by any number of goroutines and processes
// sharing the Redis server.
type Limiter struct {
	rdb              redis.UniversalClient
	prefix           string
	clock            func() time.Time
	concurrencyRetry time.Duration
}

// New returns a Limiter over rdb.
func New(rdb redis.UniversalClient, opts Options) *Limiter {
	l := &Limiter{rdb: rdb, prefix: opts.Prefix, clock: opts.Clock, concurrencyRetry: opts.ConcurrencyRetry}
	if l.prefix == "" {
		l.prefix = DefaultPrefix
	}
	if l.concurrencyRetry <= 0 {
		l.concurrencyRetry = 100 * time.Millisecond
	}
	return l
}

// Prefix returns the key prefix, without the trailing ':'.
func (l *Limiter) Prefix() string { return l.prefix }

// Request asks for Cost units of Limit on Key.
type Request struct {
	// Key is the limiter key without prefix, "{scope}:{resource}:{identifier}"
	// as in "whatsapp:pair:+12025550123". Its first segment (the scope) becomes
	// the Redis Cluster hash tag, so every key of one call must share a scope.
	Key   string
	Limit Limit
	// Cost is the units to take; zero means 1.
	Cost int64
}

// LimitDecision is the outcome for one limit of a call.
type LimitDecision struct {
	Name string // Limit.Name
	Key  string // Request.Key (without prefix)
	// Allowed reports whether this limit alone had room for the cost.
	Allowed bool
	// Limit is the limit's capacity (see Limit.Capacity).
	Limit int64
	// Remaining is the units left: after the call when the call consumed,
	// otherwise what is available now.
	Remaining int64
	// Reset is when the limit is back to full capacity (GCRA), its window
	// ends (FixedWindow), or its oldest lease expires (Concurrency).
	Reset time.Time
	// RetryAfter is how long until the cost fits in this limit; 0 if Allowed.
	// It is exact: the earliest moment the limit could allow the cost.
	RetryAfter time.Duration
	// Wait is when a blocked caller should come back (>= RetryAfter). For a
	// FixedWindow limit it spreads a crowd: one window later for every Limit
	// units already blocked in the current window, so a backlog returns about
	// Limit per window instead of all at once. Other algorithms: RetryAfter.
	// A blocked Consume counts its caller as a waiter only in the limit that
	// sets Decision.Wait. Zero when Allowed.
	Wait time.Duration
}

// Decision is the outcome of a Consume or Check call.
type Decision struct {
	// Allowed is true when every limit had room; for Consume, the cost was
	// then taken from all of them. When false nothing was taken.
	Allowed bool
	// Limits holds one decision per request, in request order.
	Limits []LimitDecision
	// RetryAfter is how long until every blocked limit has room: the largest
	// RetryAfter among them. Zero when Allowed.
	RetryAfter time.Duration
	// BlockedBy is the name of the limit that sets Wait; "" when Allowed.
	BlockedBy string
	// Wait is when to come back: the largest Wait among blocked limits
	// (>= RetryAfter). A queue schedules blocked work with it, so a backlog
	// is retried about once per item instead of once per item per window.
	Wait time.Duration
	// Now is the time the decision was made at (Redis TIME unless a Clock is set).
	Now time.Time
	// Leases must be passed to Release when the work ends, if any request used
	// a Concurrency limit and the call consumed.
	Leases []Lease
}

// Blocking returns the decision of the limit that sets RetryAfter, if any.
func (d Decision) Blocking() (LimitDecision, bool) {
	for _, ld := range d.Limits {
		if !ld.Allowed && ld.Name == d.BlockedBy {
			return ld, true
		}
	}
	return LimitDecision{}, false
}

// Lease is a held Concurrency slot.
type Lease struct {
	Key string // full Redis key
	ID  string // sorted-set member
}

// Errors returned before Redis is asked.
var (
	ErrNoRequests     = errors.New("throttle: no requests")
	ErrCrossSlot      = errors.New("throttle: keys of one call must share a scope")
	ErrCostOverLimit  = errors.New("throttle: cost exceeds the limit's capacity and could never be allowed")
	ErrMalformedReply = errors.New("throttle: malformed reply from Redis script")
)

// Key returns the Redis key for a limiter key: "whatsapp:pair:+1202…" →
// "sluice:{whatsapp}:pair:+1202…". The braces are the Redis Cluster hash tag.
func (l *Limiter) Key(key string) string {
	scope, rest, _ := strings.Cut(key, ":")
	if rest == "" {
		return l.prefix + ":{" + scope + "}"
	}
	return l.prefix + ":{" + scope + "}:" + rest
}

// Consume takes each request's cost from its limit if, and only if, every
// limit has room, in one atomic round trip. Being over a limit is not an
// error: it is a Decision with Allowed false and a RetryAfter.
func (l *Limiter) Consume(ctx context.Context, reqs ...Request) (Decision, error) {
	return l.run(ctx, "consume", reqs)
}

// Check reports what Consume would decide now, taking nothing.
func (l *Limiter) Check(ctx context.Context, reqs ...Request) (Decision, error) {
	return l.run(ctx, "check", reqs)
}

// Release frees Concurrency leases. Releasing an expired or already released
// lease is not an error.
func (l *Limiter) Release(ctx context.Context, leases []Lease) error {
	if len(leases) == 0 {
		return nil
	}
	if len(leases) == 1 {
		return l.rdb.ZRem(ctx, leases[0].Key, leases[0].ID).Err()
	}
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, ls := range leases {
			p.ZRem(ctx, ls.Key, ls.ID)
		}
		return nil
	})
	return err
}

const argsPerLimit = 5

func (l *Limiter) run(ctx context.Context, mode string, reqs []Request) (Decision, error) {
	if len(reqs) == 0 {
		return Decision{}, ErrNoRequests
	}
	keys := make([]string, len(reqs))
	args := make([]any, 3, 3+argsPerLimit*len(reqs))
	args[0] = "0"
	if l.clock != nil {
		args[0] = strconv.FormatInt(l.clock().UnixMicro(), 10)
	}
	args[1] = mode
	args[2] = ""
	scope := ""
	var leaseID string
	for i, r := range reqs {
		if err := r.Limit.Validate(); err != nil {
			return Decision{}, fmt.Errorf("throttle: requests[%d]: %w", i, err)
		}
		cost := r.cost()
		if cost > r.Limit.Capacity() {
			return Decision{}, fmt.Errorf("%w: requests[%d] %q: cost %d, capacity %d", ErrCostOverLimit, i, r.Limit.Name, cost, r.Limit.Capacity())
		}
		s, _, _ := strings.Cut(r.Key, ":")
		if i == 0 {
			scope = s
		} else if s != scope {
			return Decision{}, fmt.Errorf("%w: %q and %q", ErrCrossSlot, reqs[0].Key, r.Key)
		}
		keys[i] = l.Key(r.Key)
		switch r.Limit.Algorithm {
		case GCRA:
			args = append(args, "gcra", r.Limit.Rate.Limit, r.Limit.Rate.Period.Microseconds(), max(r.Limit.Burst, 1), cost)
		case FixedWindow:
			args = append(args, "fixed_window", r.Limit.Rate.Limit, r.Limit.Rate.Period.Microseconds(), 0, cost)
		case Concurrency:
			lease := r.Limit.Lease
			if lease <= 0 {
				lease = DefaultLease
			}
			args = append(args, "concurrency", r.Limit.Max, lease.Microseconds(), 0, cost)
			if leaseID == "" && mode == "consume" {
				leaseID = newLeaseID()
			}
		}
	}
	args[2] = leaseID

	raw, err := consumeScript.Run(ctx, l.rdb, keys, args...).Int64Slice()
	if err != nil {
		return Decision{}, fmt.Errorf("throttle: %s %q: %w", mode, reqs[0].Key, err)
	}
	return l.decode(raw, reqs, keys, leaseID)
}

func (l *Limiter) decode(raw []int64, reqs []Request, keys []string, leaseID string) (Decision, error) {
	const per = 5
	if len(raw) != 2+per*len(reqs) {
		return Decision{}, fmt.Errorf("%w: %d values for %d limits", ErrMalformedReply, len(raw), len(reqs))
	}
	now := time.UnixMicro(raw[0])
	d := Decision{Allowed: raw[1] == 1, Now: now, Limits: make([]LimitDecision, len(reqs))}
	for i, r := range reqs {
		v := raw[2+per*i : 2+per*(i+1)]
		ld := LimitDecision{
			Name:       r.Limit.Name,
			Key:        r.Key,
			Allowed:    v[0] == 1,
			Limit:      r.Limit.Capacity(),
			Remaining:  v[1],
			Reset:      time.UnixMicro(v[2]),
			RetryAfter: time.Duration(v[3]) * time.Microsecond,
			Wait:       time.Duration(v[4]) * time.Microsecond,
		}
		if r.Limit.Algorithm == Concurrency && !ld.Allowed && ld.RetryAfter > l.concurrencyRetry {
			ld.RetryAfter = l.concurrencyRetry
			ld.Wait = l.concurrencyRetry
		}
		if !ld.Allowed {
			d.RetryAfter = max(d.RetryAfter, ld.RetryAfter)
			if ld.Wait > d.Wait || d.BlockedBy == "" {
				d.BlockedBy = ld.Name
				d.Wait = max(d.Wait, ld.Wait)
			}
		}
		d.Limits[i] = ld
		if d.Allowed && r.Limit.Algorithm == Concurrency && leaseID != "" {
			for j := int64(1); j <= r.cost(); j++ {
				id := leaseID
				if j > 1 {
					id += "#" + strconv.FormatInt(j, 10)
				}
				d.Leases = append(d.Leases, Lease{Key: keys[i], ID: id})
			}
		}
	}
	if d.Allowed {
		d.RetryAfter, d.Wait, d.BlockedBy = 0, 0, ""
	}
	return d, nil
}

func (r Request) cost() int64 {
	if r.Cost <= 0 {
		return 1
	}
	return r.Cost
}

func newLeaseID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
