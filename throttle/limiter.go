package throttle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Limiter decides whether work may proceed under a set of limits. Two
// backends implement it with the same decisions: Redis (NewRedis), shared by
// any number of processes, and Local (NewLocal), in-process.
//
// Being over a limit is a Decision with Allowed false, never an error; errors
// mean bad requests (ErrNoRequests, ErrCostOverLimit, ErrBadRequest) or a
// failed backend.
type Limiter interface {
	// Consume takes each request's cost from its limit if, and only if, every
	// limit has room. Requests whose keys share a scope are decided in one
	// atomic step; see Redis for calls that span scopes.
	Consume(ctx context.Context, reqs ...Request) (Decision, error)
	// Check reports what Consume would decide now, taking nothing.
	Check(ctx context.Context, reqs ...Request) (Decision, error)
	// Status reports each limit's current state (remaining, reset, and the
	// RetryAfter for one unit), taking nothing; the requests' costs are
	// ignored.
	Status(ctx context.Context, reqs ...Request) (Decision, error)
	// Release frees Concurrency leases of a Decision. Releasing an expired
	// or already released lease is not an error.
	Release(ctx context.Context, leases []Lease) error
	// Reset deletes the state of the given keys: their limits start over at
	// full capacity. It returns how many existed.
	Reset(ctx context.Context, keys ...string) (int64, error)
	// ResetPrefix deletes every key that starts with prefix.
	ResetPrefix(ctx context.Context, prefix string) (int64, error)
	// List returns keys that start with prefix, a page at a time: pass cursor
	// 0 first, then the returned cursor until it is 0. count is a hint of
	// keys per page.
	List(ctx context.Context, prefix string, cursor uint64, count int64) (keys []string, next uint64, err error)
}

// Request asks for Cost units of Limit on Key.
type Request struct {
	// Key names the limited thing, "{scope}:{resource}:{identifier}" as in
	// "whatsapp:pair:106540352242922:+12025550123". The scope (first segment)
	// is the Redis Cluster hash tag: keys of one scope are decided in one
	// atomic step. Scopes starting with '_' are reserved.
	Key   string
	Limit Limit
	// Cost is the units to take; zero means 1. A Distinct limit takes 1 unit
	// for a new member and 0 for one already counted; a MinInterval limit
	// takes 1.
	Cost int64
	// Member is the subject a Distinct limit counts (a recipient); required
	// there, unused by the other algorithms.
	Member string
}

// LimitDecision is the outcome for one limit of a call.
type LimitDecision struct {
	Name string // Limit.Name
	Key  string // Request.Key
	// Allowed reports whether this limit alone had room for the cost.
	Allowed bool
	// Limit is the limit's capacity (see Limit.Capacity).
	Limit int64
	// Remaining is the units left: after the call when the call consumed,
	// otherwise what is available now.
	Remaining int64
	// Reset is when the limit is back to full capacity (GCRA, sliding
	// windows, Distinct), its window ends (FixedWindow), the interval ends
	// (MinInterval), or its last held lease expires (Concurrency).
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
	// Taken is the units the call took from this limit (0 unless it
	// consumed; 0 for a Distinct member already counted).
	Taken int64
	// Window is the limit's window (Limit.Window), for headers and events.
	Window time.Duration
	// Retook reports, for a firm Reserve with ReserveOptions.Retake (and
	// Priority High: a Bulk send's Retake is not one), that
	// the call gave this limit a new slot: a GCRA limit paced faster than
	// one send a second at the call's headroom (its rate as decided, an
	// override or adaptation applied). False on the slower ones, whose slot
	// the retake kept, and for every other call.
	Retook bool
}

// Decision is the outcome of a Consume, Check or Status call.
type Decision struct {
	// Allowed is true when every limit had room; for Consume, the cost was
	// then taken from all of them. When false nothing was taken.
	Allowed bool
	// Limit, Remaining and Reset are those of the limit with the fewest
	// units remaining (of the blocking limit when blocked): what a client
	// shown one limit needs to know.
	Limit     int64
	Remaining int64
	Reset     time.Time
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
	// Now is the time the decision was made at (Redis TIME for Redis unless
	// a Clock is set).
	Now time.Time
	// Leases must be passed to Release when the work ends, if any request used
	// a Concurrency limit and the call consumed.
	Leases []Lease
}

// Blocking returns the decision of the limit that sets Wait, if any.
func (d Decision) Blocking() (LimitDecision, bool) {
	for _, ld := range d.Limits {
		if !ld.Allowed && ld.Name == d.BlockedBy {
			return ld, true
		}
	}
	return LimitDecision{}, false
}

// Binding returns the limit a client should be shown: the blocking one when
// blocked, else the one with the fewest units remaining (ties: the later
// reset).
func (d Decision) Binding() (LimitDecision, bool) {
	if b, ok := d.Blocking(); ok {
		return b, true
	}
	best := -1
	for i, ld := range d.Limits {
		if best < 0 || ld.Remaining < d.Limits[best].Remaining ||
			(ld.Remaining == d.Limits[best].Remaining && ld.Reset.After(d.Limits[best].Reset)) {
			best = i
		}
	}
	if best < 0 {
		return LimitDecision{}, false
	}
	return d.Limits[best], true
}

// decisionJSON is the wire form of a decision: reset is Unix milliseconds,
// retryAfter milliseconds (rounded up).
type decisionJSON struct {
	Allowed    bool  `json:"allowed"`
	Remaining  int64 `json:"remaining"`
	Reset      int64 `json:"reset"`
	RetryAfter int64 `json:"retryAfter"`
}

// MarshalJSON renders {"allowed":false,"remaining":0,"reset":1704307200000,
// "retryAfter":23000}: reset in Unix ms, retryAfter in ms rounded up.
func (d Decision) MarshalJSON() ([]byte, error) {
	return json.Marshal(decisionJSON{Allowed: d.Allowed, Remaining: d.Remaining, Reset: unixMilli(d.Reset), RetryAfter: ceilMillis(d.RetryAfter)})
}

// MarshalJSON renders one limit's decision in the same form as Decision's,
// with its name and capacity: {"name","limit","allowed","remaining","reset",
// "retryAfter"}.
func (ld LimitDecision) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Name  string `json:"name"`
		Limit int64  `json:"limit"`
		decisionJSON
	}{ld.Name, ld.Limit, decisionJSON{ld.Allowed, ld.Remaining, unixMilli(ld.Reset), ceilMillis(ld.RetryAfter)}})
}

func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func ceilMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// summarize fills the decision-wide fields from d.Limits.
func (d *Decision) summarize() {
	d.Allowed = true
	d.RetryAfter, d.Wait, d.BlockedBy = 0, 0, ""
	for _, ld := range d.Limits {
		if ld.Allowed {
			continue
		}
		d.Allowed = false
		d.RetryAfter = max(d.RetryAfter, ld.RetryAfter)
		if ld.Wait > d.Wait || d.BlockedBy == "" {
			d.BlockedBy = ld.Name
			d.Wait = max(d.Wait, ld.Wait)
		}
	}
	if b, ok := d.Binding(); ok {
		d.Limit, d.Remaining, d.Reset = b.Limit, b.Remaining, b.Reset
	}
}

// Lease is a held Concurrency slot.
type Lease struct {
	Key string // Request.Key of the Concurrency limit
	ID  string // unique per lease
}

// capConcurrencyRetry caps a blocked Concurrency limit's RetryAfter and Wait
// (Options.ConcurrencyRetry, LocalOptions.ConcurrencyRetry): leases are
// usually released long before the oldest one expires.
func capConcurrencyRetry(ld *LimitDecision, lim Limit, retryCap time.Duration) {
	if lim.Algorithm == Concurrency && !ld.Allowed && ld.RetryAfter > retryCap {
		ld.RetryAfter, ld.Wait = retryCap, retryCap
	}
}

// appendLeases adds the leases a consume took on a Concurrency limit: ids
// callID, callID#2, callID#3 … (concurrency.lua's lease_member).
func appendLeases(leases []Lease, r Request, callID string, taken int64) []Lease {
	if r.Limit.Algorithm != Concurrency || callID == "" {
		return leases
	}
	for j := int64(1); j <= taken; j++ {
		leases = append(leases, Lease{Key: r.Key, ID: leaseID(callID, j)})
	}
	return leases
}

func leaseID(callID string, i int64) string {
	if i == 1 {
		return callID
	}
	return callID + "#" + strconv.FormatInt(i, 10)
}

// Errors returned before any backend is asked.
var (
	ErrNoRequests     = errors.New("throttle: no requests")
	ErrCostOverLimit  = errors.New("throttle: cost exceeds the limit's capacity and could never be allowed")
	ErrBadRequest     = errors.New("throttle: bad request")
	ErrMalformedReply = errors.New("throttle: malformed reply from Redis script")
)

// cost is the units a request asks for: Cost, or 1 when zero.
func (r Request) cost() int64 {
	if r.Cost <= 0 || r.Limit.Algorithm == Distinct {
		return 1
	}
	return r.Cost
}

// fieldOf is fields[i], "" when fields is nil.
func fieldOf(fields []string, i int) string {
	if fields == nil {
		return ""
	}
	return fields[i]
}

// scope is the key's first segment, its Redis Cluster hash tag.
func scope(key string) string {
	s, _, _ := strings.Cut(key, ":")
	return s
}

// validKey reports whether key is a limiter key: a scope (not starting with
// '_', which Sluice keeps for itself) and no braces (the cluster hash tag is
// Sluice's to add). keyShape says so in errors.
func validKey(key string) bool {
	s := scope(key)
	return s != "" && !strings.ContainsAny(key, "{}") && s[0] != '_'
}

const keyShape = "want scope:resource:id, with a scope not starting with '_' and no braces"

// validate checks a call's requests the same way for every backend. It
// returns, per request, the field name under which a GCRA limit shares its
// key with other GCRA limits of the call ("" when the key is its own), or
// nil when no key is shared.
func validate(reqs []Request) (fields []string, err error) {
	if len(reqs) == 0 {
		return nil, ErrNoRequests
	}
	var seen map[string][]int
	if len(reqs) > 1 {
		seen = make(map[string][]int, len(reqs))
	}
	for i, r := range reqs {
		if err := r.Limit.Validate(); err != nil {
			return nil, fmt.Errorf("throttle: requests[%d]: %w", i, err)
		}
		if !validKey(r.Key) {
			return nil, fmt.Errorf("%w: requests[%d] key %q: %s", ErrBadRequest, i, r.Key, keyShape)
		}
		if r.Cost < 0 {
			return nil, fmt.Errorf("%w: requests[%d] %q: cost %d is negative", ErrBadRequest, i, r.Limit.Name, r.Cost)
		}
		if c := r.cost(); c > r.Limit.Capacity() {
			return nil, fmt.Errorf("%w: requests[%d] %q: cost %d, capacity %d", ErrCostOverLimit, i, r.Limit.Name, c, r.Limit.Capacity())
		}
		if r.Limit.Algorithm == Distinct && r.Member == "" {
			return nil, fmt.Errorf("%w: requests[%d] %q: a distinct limit needs a Member", ErrBadRequest, i, r.Limit.Name)
		}
		if seen == nil {
			continue
		}
		for _, j := range seen[r.Key] {
			o := reqs[j]
			if r.Limit.Algorithm != GCRA || o.Limit.Algorithm != GCRA || r.Limit.Name == o.Limit.Name || r.Limit.Name == "" {
				return nil, fmt.Errorf("%w: requests[%d] and [%d] share key %q: only GCRA limits with distinct names may share a key", ErrBadRequest, j, i, r.Key)
			}
			if fields == nil {
				fields = make([]string, len(reqs))
			}
			fields[i], fields[j] = r.Limit.Name, o.Limit.Name
		}
		seen[r.Key] = append(seen[r.Key], i)
	}
	return fields, nil
}
