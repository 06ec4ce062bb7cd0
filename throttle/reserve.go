package throttle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// reserveScripts are prelude.lua, gcra.lua (its commit), the algorithm
// files a call needs, dispatch.lua and reserve.lua: paced reservations, batch planning and release in one EVALSHA
// each. Redis runs a script's whole chunk on every call, so each set of
// algorithms other than GCRA (which reserve.lua paces itself) gets a script
// with only their files; index = bit set of nonGCRA's positions.
var reserveScripts [1 << 7]*redis.Script

// nonGCRA lists the algorithms reserve.lua decides with their own files.
var nonGCRA = []struct {
	algo Algorithm
	file string
}{
	{FixedWindow, "fixed_window.lua"}, {SlidingWindowLog, "sliding_window_log.lua"},
	{SlidingWindowCounter, "sliding_window_counter.lua"}, {MinInterval, "min_interval.lua"},
	{Concurrency, "concurrency.lua"}, {Distinct, "distinct.lua"}, {Pause, "pause.lua"},
}

func init() { buildReserveScripts(func(src string) string { return src }) }

// buildReserveScripts makes reserveScripts, each script's source passed
// through edit (the package's tests turn pace.lua's PLAN_CHECK on).
func buildReserveScripts(edit func(string) string) {
	for set := range reserveScripts {
		reserveScripts[set] = redis.NewScript(edit(reserveSource(set)))
	}
}

// reserveSource is the source of reserveScripts[set].
func reserveSource(set int) string {
	files := []string{"prelude.lua", "gcra.lua"}
	for i, a := range nonGCRA {
		if set&(1<<i) != 0 {
			files = append(files, a.file)
		}
	}
	return joinLua(append(files, "dispatch.lua", "reserve.lua")...)
}

// reserveScriptFor returns the script with the algorithm files reqs need.
func reserveScriptFor(reqs []Request) *redis.Script {
	return reserveScripts[reserveSet(reqs)]
}

// reserveSet is the index in reserveScripts of the script for reqs.
func reserveSet(reqs []Request) int {
	set := 0
	for _, r := range reqs {
		for i, a := range nonGCRA {
			if r.Limit.Algorithm == a.algo {
				set |= 1 << i
			}
		}
	}
	return set
}

// Priority orders sends that share a limit.
type Priority string

const (
	// Bulk sends queue in the order they were planned: a bulk send never
	// overtakes one planned before it.
	Bulk Priority = ""
	// High sends take the first free slot of the firm book, ahead of every
	// planned bulk send; bulk holds firm slots at most ReserveOptions.Hold
	// ahead, so a high-priority send waits at most about that long.
	High Priority = "high"
)

// Defaults of ReserveOptions.
const (
	// DefaultHold is ReserveOptions.Hold's default. asynq schedules in whole
	// seconds, so a send planned for 12.34s is dequeued at about 12.0s and
	// held until 12.34s: holds stay under a second while the firm book keeps
	// pace with the plan. The second second absorbs what pushes the firm
	// book ahead of the plan (high-priority sends, sends that came back
	// late), so that those planned sends are not planned again.
	DefaultHold = 2 * time.Second
	// MaxPlannedPause is the longest pause Plan and Reserve plan sends
	// past (plan_book.lua's PLAN_PAUSE_MAX): an early end of a longer one
	// (a probe that succeeds, `channels resume`) would leave its sends
	// scheduled for their planned seconds. A send a longer pause blocks
	// comes back when it ends, without a place, as other blocks do.
	MaxPlannedPause = 5 * time.Minute
	// DefaultHeadroom is the fraction by which paced sends are spaced wider
	// than their limit (80/s is paced at 78.8/s): the margin that absorbs
	// jitter between Sluice and the provider, so that no span a provider
	// counts, wherever it starts, holds more than the limit. 1.5% of a
	// second is 15ms: a send may reach the provider up to 15ms later than
	// the one a limit's worth after it, relative to their slots.
	DefaultHeadroom = 0.015
	// MaxHeadroom bounds ReserveOptions.Headroom.
	MaxHeadroom = 0.5
)

// ReserveOptions configures Reserve and Plan.
type ReserveOptions struct {
	// TaskID names the send across calls (an asynq task ID): a send planned
	// by Plan or by a Reserve that could not take a firm slot keeps its
	// place in each limit's backlog under this ID. With "" no place is
	// kept: each call that is planned counts one more send in the plan, so
	// a caller that asks again without an ID queues behind the plan anew.
	TaskID string
	// Priority: Bulk (the zero value) or High.
	Priority Priority
	// Hold is how far ahead a firm reservation may be: the most a caller
	// holds a send before its instant. Zero means DefaultHold.
	Hold time.Duration
	// Headroom widens the paced spacing of GCRA limits by this fraction
	// (0.01: 1%). Plan and Reserve of one limit must use the same value.
	// Zero means none; at most MaxHeadroom.
	Headroom float64
	// Tenant names who the send is for (a customer, a campaign); "" is a
	// tenant too. Tenants backlogged on one limit paced faster than one
	// send a second share each second by Weight instead of first come,
	// first served (see Plan). At most MaxTenantBytes bytes.
	Tenant string
	// Weight is the tenant's share weight: two backlogged tenants of
	// weights 3 and 1 get 3/4 and 1/4 of the limit. Zero means 1; at most
	// MaxTenantWeight.
	Weight float64
	// Retake marks a send that woke up too late for the firm slot it took:
	// on its limits paced faster than one a second it takes the first free
	// slot (as High), not counted in the plan a second time; on slower ones
	// (a pair, a 1/s sender), whose slot it keeps, the next send is spaced
	// at least one interval from now, so its lateness cannot bring the two
	// closer than the limit.
	Retake bool
}

// retakesSlot reports whether a Retake reservation takes r a new slot:
// reserve.lua's fast limits, a GCRA limit whose interval at headroom,
// period / limit / (1 - headroom), is under a second, computed as the
// script computes it (µs, in float64).
func retakesSlot(r Request, headroom float64) bool {
	if r.Limit.Algorithm != GCRA || r.Limit.Rate.Limit <= 0 {
		return false
	}
	return float64(r.Limit.Rate.Period.Microseconds())/float64(r.Limit.Rate.Limit)/(1-headroom) < float64(time.Second.Microseconds())
}

// Bounds of ReserveOptions.Tenant and Weight.
const (
	MaxTenantBytes  = 128
	MaxTenantWeight = 1000
)

// Reservation is the outcome of Reserve.
type Reservation struct {
	// Decision holds one LimitDecision per request, as Consume's. Allowed
	// is Firm.
	Decision
	// Firm reports that every limit was taken for the instant At: send then.
	Firm bool
	// At is, when Firm, the instant to send (Redis clock; never before Now,
	// at most Hold after it). Otherwise it is when to come back: the send's
	// planned slot, or the wait of a limit that cannot be reserved.
	At time.Time
	// Planned reports that the send holds a place in the backlogs and At is
	// that place: it comes back for it (a firm Reserve with its TaskID
	// takes its slot; ReleasePlanned or the cleanup sweep give it up). A
	// bulk send that only a pause blocks is planned too, from the first
	// whole second at or after the pause's end: BlockedBy is then the
	// pause (PauseName), and At its place. False when another limit that
	// cannot be reserved blocked it: At is then that limit's wait (a place
	// it held before is kept).
	Planned bool
	// Local reports a Firm reservation served from slots an earlier call
	// prefetched (Options.PrefetchSpan), without asking Redis: Now and At
	// are then this host's clock, and the limits' Remaining is what the
	// prefetching call left, plus the slots still in memory.
	Local bool

	prefetched int64 // slots the call prefetched for its set of limits
}

// Delay is how long from the decision until At.
func (r Reservation) Delay() time.Duration { return max(0, r.At.Sub(r.Now)) }

// Reserve paces one send: in one atomic step it finds the earliest instant
// at which every GCRA limit of the send admits it, spaced at the limit's
// interval widened by Headroom, and, when that instant is at most Hold
// ahead and the send's other limits allow it now, takes every limit for
// that instant (Firm). Otherwise it takes nothing and plans the send: it
// gets the next place behind the sends already planned on its limits and
// is told to come back for it (Reservation.At), so a backlog comes back
// about once per send instead of being re-polled.
//
// Which algorithms reserve: GCRA limits are paced and planned (their TAT
// is the reservation book). FixedWindow, SlidingWindowLog,
// SlidingWindowCounter, MinInterval, Concurrency and Distinct limits are
// decided at the call's time as Consume does; a send they block comes back
// after their Wait, without a place. A Pause (PauseRequest) is decided at
// the call's time too, but a bulk send that only a pause blocks is planned
// from the first whole second at or after the pause's end, like a send
// behind a backlog (Reservation.Planned): a paused scope's sends come back
// once each, at their limits' pace. A high-priority send comes back when
// the pause ends, without a place.
//
// Scopes: a send's GCRA limits must share one scope, the paced scope
// (ErrBadRequest otherwise). On one Redis (a single server or a
// Sentinel's master) every request of the send is decided in one atomic
// script, whatever its scope. On a Redis Cluster a script's keys must
// share a hash slot, so the paced scope's requests are decided in one
// script, and those of another scope (a recipient's daily window beside a
// number's pace, a channel's pause: another master) in a call before it,
// coalesced with other sends' on that scope: if one of them blocks, the
// send is not sent (Firm false, Planned false, At that limit's wait,
// BlockedBy its name) and takes no slot; if the paced scope's slot is not
// firm, what they took is given back. Errors are those of Consume.
func (l *Redis) Reserve(ctx context.Context, opts ReserveOptions, reqs ...Request) (Reservation, error) {
	fields, err := validate(reqs)
	if err != nil {
		return Reservation{}, err
	}
	if in, out, err := splitPaced(reqs); err != nil {
		return Reservation{}, err
	} else if len(out) > 0 && l.slots {
		return l.reserveAcross(ctx, opts, reqs, in, out)
	}
	hold, headroom, err := reserveParams(opts)
	if err != nil {
		return Reservation{}, err
	}
	if l.overrides != nil {
		reqs = l.adaptive.apply(ctx, l.overrides.apply(ctx, reqs))
	}
	callID := ""
	if needsCallID(reqs) {
		callID = newCallID()
	}
	var pk string
	if l.prefetchSpan > 0 && opts.Priority == Bulk && !opts.Retake {
		if pk = l.prefetchKey(reqs, fields); pk != "" {
			now := l.localNow()
			if d, ok := l.prefetch.take(pk, now); ok {
				return Reservation{Decision: d, Firm: true, At: now, Local: true}, nil
			}
		}
	}
	c := &reserveCall{opts: opts, hold: hold, headroom: headroom, reqs: reqs, fields: fields, callID: callID, done: make(chan reserveResult, 1),
		due: reserveDue(opts, reqs, time.Now())}
	res, err := l.batcher().do(ctx, c)
	if err != nil {
		return Reservation{}, err
	}
	r := res.r
	if opts.Retake && opts.Priority == High && r.Firm && len(r.Limits) == len(reqs) {
		for i := range r.Limits {
			r.Limits[i].Retook = retakesSlot(reqs[i], headroom)
		}
	}
	if !r.Firm && pk != "" {
		l.prefetch.drop(pk) // the set is blocked or planned now: ask Redis
	}
	if r.prefetched > 0 && pk != "" {
		now := l.localNow()
		l.prefetch.put(pk, r.prefetched, prefetchUntil(r.Decision, reqs, now), r.Decision, now)
	}
	if r.Firm {
		l.events.observe(ctx, reqs, r.Decision)
	} else {
		l.events.observeBlocked(ctx, reqs, r, hold)
	}
	return r, nil
}

// Send is one send for Plan and ReleasePlanned: its task ID, tenant and
// requests.
type Send struct {
	TaskID string
	// Tenant and Weight as ReserveOptions': the tenant's weighted share of
	// the limits (Weight zero means 1).
	Tenant   string
	Weight   float64
	Requests []Request
}

// Planned is Plan's outcome for one send.
type Planned struct {
	// At is the planned instant (Redis clock): the send takes its firm slot
	// with Reserve at about this time. Now for a send with nothing to pace.
	At time.Time
	// New is false when the send's TaskID already held a place (it was
	// planned before and not yet sent): it keeps that place and At is it.
	// A caller whose enqueue then fails releases only new places.
	New bool
}

// Plan gives each send, in order, its place behind the sends already
// planned on its GCRA limits, and returns the planned instants (Redis
// clock), one per send.
//
// Tenants: on a limit paced faster than one send a second, a send of a
// tenant under its weighted share of a future second that is full takes a
// place there from the tenant most over its share; that tenant's first
// send to come back in the second is planned again (Reserve returns it
// planned, not firm). So backlogged tenants split each second by weight
// whoever planned first, and the limit is never exceeded. Limits slower
// than one a second (a pair, a 1/s sender) plan first come, first served. A send whose TaskID already holds a place keeps
// it (Planned.New false). It takes nothing from the limits: each send takes
// its firm slot with Reserve (same TaskID, Priority Bulk, same Headroom)
// when it comes back, at about its planned instant. Pauses (PauseRequest)
// are decided: a send whose scope is paused for at most MaxPlannedPause
// is planned from the first whole second at or after the pause's end, as
// Reserve plans it; a longer pause (credentials refused, an operator's
// pause until resumed) may end early, so its sends are planned as if it
// were not there and wait for it when they come back, where a resume
// finds them. Other
// limits are ignored here and decided by Reserve. Sends are planned in batches of
// one script call per scope and up to 256 sends, so planning a campaign
// costs far less than one call per send. A scope whose sends go more
// than opts.Hold ahead writes limits.exceeded for the key they share, as
// Reserve does for a backlog. opts.TaskID and Priority are ignored: each
// Send has its own TaskID, and planning is for bulk sends.
//
// An error from Redis may come after some batches were planned: then the
// returned slice is not nil and holds their places (Planned.New for a
// place this call took; the zero Planned for a send not planned), which
// the caller gives back with ReleasePlanned. A place a failed call may
// have taken without answering is swept with its task (the cleanup job).
func (l *Redis) Plan(ctx context.Context, opts ReserveOptions, sends []Send) ([]Planned, error) {
	hold, headroom, err := reserveParams(opts)
	if err != nil {
		return nil, err
	}
	for i, s := range sends {
		if err := checkTenant(s.Tenant, s.Weight); err != nil {
			return nil, fmt.Errorf("throttle: plan sends[%d]: %w", i, err)
		}
	}
	out := make([]Planned, len(sends))
	type item struct {
		idx    int
		reqs   []Request
		fields []string
	}
	groups := map[string][]item{}
	var order []string
	for i, s := range sends {
		paced, fields, err := l.pacedRequests(ctx, s.Requests, true)
		if err != nil {
			return nil, fmt.Errorf("throttle: plan sends[%d]: %w", i, err)
		}
		if len(paced) == 0 {
			continue // nothing to pace: due now
		}
		sc := scope(paced[0].Key)
		if _, ok := groups[sc]; !ok {
			order = append(order, sc)
		}
		groups[sc] = append(groups[sc], item{i, paced, fields})
	}
	slices.Sort(order)
	const batch = 256
	var now time.Time
	for _, sc := range order {
		items := groups[sc]
		var first []Request // the scope's first batch, for its event
		var last time.Time  // the scope's last planned instant
		for lo := 0; lo < len(items); lo += batch {
			part := items[lo:min(lo+batch, len(items))]
			ra := l.newReserveArgs("plan", hold, headroom, len(part))
			var all []Request
			for _, it := range part {
				s := sends[it.idx]
				ra.send(s.TaskID, Bulk, false, "", s.Tenant, s.Weight, it.reqs, it.fields)
				all = append(all, it.reqs...)
			}
			raw, err := reserveScriptFor(all).Run(ctx, l.rdb, ra.keys, ra.argv()...).Int64Slice() // GCRA and pauses
			// On a failed call, the places earlier calls took are in out
			// (New), for the caller to give back.
			if err != nil {
				return out, fmt.Errorf("throttle: plan %q: %w", part[0].reqs[0].Key, err)
			}
			if len(raw) != 1+2*len(part) {
				return out, fmt.Errorf("%w: %d values for %d planned sends", ErrMalformedReply, len(raw), len(part))
			}
			now = time.UnixMicro(raw[0])
			if first == nil {
				first = all
			}
			for k, it := range part {
				out[it.idx] = Planned{At: time.UnixMicro(raw[1+2*k]), New: raw[2+2*k] == 1}
				if out[it.idx].At.After(last) {
					last = out[it.idx].At
				}
			}
		}
		l.events.observePlanned(ctx, first, now, last, hold)
	}
	for i := range out {
		if out[i].At.IsZero() {
			if now.IsZero() {
				now = l.now(ctx)
			}
			out[i].At = now
		}
	}
	return out, nil
}

// ReleasePlanned gives up a planned send's place (its task was archived or
// deleted and will never come back): it leaves every backlog, gives its
// room in its second back to the plan (or pays the yield its tenant owes
// there), and a send planned last on a slow limit gives its slot back. It
// reports whether the send held a place. Firm reservations are not
// released: they are at most Hold ahead and lapse by themselves.
func (l *Redis) ReleasePlanned(ctx context.Context, s Send) (bool, error) {
	if s.TaskID == "" {
		return false, nil
	}
	if err := checkTenant(s.Tenant, s.Weight); err != nil {
		return false, err
	}
	gcra, fields, err := l.pacedRequests(ctx, s.Requests, false)
	if err != nil || len(gcra) == 0 {
		return false, err
	}
	ra := l.newReserveArgs("release", DefaultHold, 0, 1) // (the hold decides which limits keep a backlog: reserve.lua, parse)
	ra.send(s.TaskID, Bulk, false, "", s.Tenant, s.Weight, gcra, fields)
	raw, err := reserveScripts[0].Run(ctx, l.rdb, ra.keys, ra.argv()...).Int64Slice() // GCRA only
	if err != nil {
		return false, fmt.Errorf("throttle: release %q: %w", gcra[0].Key, err)
	}
	return len(raw) == 2 && raw[1] == 1, nil
}

// Backlog is the planned sends of one GCRA limit key.
type Backlog struct {
	// Planned is the number of sends holding a place.
	Planned int64
	// Drains is when the last planned send is due (zero when none).
	Drains time.Time
	// Next is when the first planned send is due (zero when none).
	Next time.Time
}

// Backlog reads the planned sends of a limiter key (without prefix).
func (l *Redis) Backlog(ctx context.Context, key string) (Backlog, error) {
	k := backlogKey(l.Key(key))
	pipe := l.rdb.Pipeline()
	n := pipe.ZCard(ctx, k)
	first := pipe.ZRangeWithScores(ctx, k, 0, 0)
	last := pipe.ZRangeWithScores(ctx, k, -1, -1)
	if _, err := pipe.Exec(ctx); err != nil {
		return Backlog{}, fmt.Errorf("throttle: backlog %q: %w", key, err)
	}
	b := Backlog{Planned: n.Val()}
	if v := first.Val(); len(v) == 1 {
		b.Next = time.UnixMicro(int64(v[0].Score))
	}
	if v := last.Val(); len(v) == 1 {
		b.Drains = time.UnixMicro(int64(v[0].Score))
	}
	return b, nil
}

// PlanTail is the plan tail of a GCRA limit paced slower than a send a
// second (a pair, a 1/s sender), key without prefix: the earliest instant
// its next send may be planned at. Planning a send sets it one interval
// after the send's place, or after the end of the send's second where the
// send also has a faster limit (a pair beside its number); a send that
// gives its place up and was planned last sets it back to that place. Zero
// when the plan holds none (it expires an interval after the last place).
// A limit paced slower than the hold keeps no backlog beside a faster one
// (Backlog lists none for a pair): a tail more than an interval ahead says
// a send is planned there, not how many (a place given back can leave one
// with none). It reads the tail of the key's unnamed limit: a limit that
// shares its key with others keeps its tail under its field name ('t' and
// the name), which this does not read. The error is Redis's, or wraps
// ErrMalformedReply.
func (l *Redis) PlanTail(ctx context.Context, key string) (time.Time, error) {
	v, err := l.rdb.HGet(ctx, planKey(l.Key(key)), "t").Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("throttle: plan tail %q: %w", key, err)
	}
	us, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: plan tail %q: %.40q is not a time", ErrMalformedReply, key, v)
	}
	return time.UnixMicro(us), nil
}

func reserveParams(opts ReserveOptions) (hold time.Duration, headroom float64, err error) {
	hold = opts.Hold
	if hold == 0 {
		hold = DefaultHold
	}
	if hold < 0 {
		return 0, 0, fmt.Errorf("%w: hold %v is negative", ErrBadRequest, hold)
	}
	if opts.Headroom < 0 || opts.Headroom > MaxHeadroom || opts.Headroom != opts.Headroom {
		return 0, 0, fmt.Errorf("%w: headroom %v: want 0 to %v", ErrBadRequest, opts.Headroom, MaxHeadroom)
	}
	if opts.Priority != Bulk && opts.Priority != High {
		return 0, 0, fmt.Errorf("%w: priority %q: want high or bulk", ErrBadRequest, opts.Priority)
	}
	if err := checkTenant(opts.Tenant, opts.Weight); err != nil {
		return 0, 0, err
	}
	return hold, opts.Headroom, nil
}

func checkTenant(tenant string, weight float64) error {
	if len(tenant) > MaxTenantBytes {
		return fmt.Errorf("%w: tenant %.32q...: %d bytes, want at most %d", ErrBadRequest, tenant, len(tenant), MaxTenantBytes)
	}
	if weight < 0 || weight > MaxTenantWeight || weight != weight {
		return fmt.Errorf("%w: tenant weight %v: want 0 (meaning 1) to %d", ErrBadRequest, weight, MaxTenantWeight)
	}
	return nil
}

// pacedRequests returns the GCRA requests of a send (the ones Plan and
// ReleasePlanned work on), and with pauses its Pause requests too (Plan
// plans a paused send from the pause's end), validated, in one scope, with
// runtime overrides applied, and their shared-key fields; none when the
// send has no GCRA limit.
func (l *Redis) pacedRequests(ctx context.Context, reqs []Request, pauses bool) ([]Request, []string, error) {
	var gcra []Request
	paced := false
	for _, r := range reqs {
		if r.Limit.Algorithm == GCRA || (pauses && r.Limit.Algorithm == Pause) {
			gcra = append(gcra, r)
			paced = paced || r.Limit.Algorithm == GCRA
		}
	}
	if !paced {
		return nil, nil, nil
	}
	if in, _, err := splitPaced(gcra); err != nil {
		return nil, nil, err
	} else if len(in) < len(gcra) {
		gcra = pick(gcra, in) // pauses of other scopes: Reserve decides them
	}
	fields, err := validate(gcra)
	if err != nil {
		return nil, nil, err
	}
	if l.overrides != nil {
		gcra = l.adaptive.apply(ctx, l.overrides.apply(ctx, gcra))
	}
	return gcra, fields, nil
}

// Reservable reports whether Reserve paces a send with these requests: it
// has a GCRA limit and its GCRA limits share one scope (its other requests
// may be of any scope). Callers decide other sends with Consume.
func Reservable(reqs []Request) bool {
	in, _, err := splitPaced(reqs)
	return err == nil && in != nil
}

// splitPaced splits a send's requests by the paced scope, the scope of its
// GCRA limits: in lists the indexes of the requests in it, out the others'
// (nil when there are none). in is nil when no request is GCRA.
// ErrBadRequest when the GCRA limits span scopes: their books are decided
// in one script, in one hash slot.
func splitPaced(reqs []Request) (in, out []int, err error) {
	paced, first := "", -1
	for i, r := range reqs {
		if r.Limit.Algorithm != GCRA {
			continue
		}
		if s := scope(r.Key); first < 0 {
			paced, first = s, i
		} else if s != paced {
			return nil, nil, fmt.Errorf("%w: requests[%d] key %q is outside scope %q of requests[%d]: a send's GCRA limits share one scope", ErrBadRequest, i, r.Key, paced, first)
		}
	}
	if first < 0 {
		return nil, nil, nil
	}
	in = make([]int, 0, len(reqs))
	for i, r := range reqs {
		if scope(r.Key) == paced {
			in = append(in, i)
		} else {
			out = append(out, i)
		}
	}
	return in, out, nil
}

// checkOneScope reports ErrBadRequest when reqs span scopes.
func checkOneScope(reqs []Request) error {
	first := scope(reqs[0].Key)
	for i, r := range reqs[1:] {
		if scope(r.Key) != first {
			return fmt.Errorf("%w: requests[%d] key %q is outside scope %q: a reservation spans one scope", ErrBadRequest, i+1, r.Key, first)
		}
	}
	return nil
}

// reserveAcross is Reserve on a Redis Cluster for a send whose requests
// span scopes: the paced scope's (indexes in) and the others' (out). Those
// of one other scope, which have no GCRA limit, are taken first, in a
// reserve call coalesced with other sends' on that scope (decided at once,
// as Consume does): a send they block comes back after their wait and
// takes no slot. Then the paced scope is reserved, so that its slot's reply
// is the last thing before the send's hold (a call after it would make the
// send leave late); when that slot is not firm, what the others took is
// refunded. Requests of several other scopes are consumed after a firm
// slot, scope by scope (Consume's refunds undo a partial take), and a
// send they block lets its slot lapse. The decision holds one
// LimitDecision per request of reqs, in order; limits not decided are
// reported so (Allowed, nothing taken).
func (l *Redis) reserveAcross(ctx context.Context, opts ReserveOptions, reqs []Request, in, out []int) (Reservation, error) {
	hold, _, err := reserveParams(opts)
	if err != nil {
		return Reservation{}, err
	}
	rest := pick(reqs, out)
	limits := make([]LimitDecision, len(reqs))
	undecided := func(idx []int) {
		for _, i := range idx {
			limits[i] = LimitDecision{Name: reqs[i].Limit.Name, Key: reqs[i].Key, Allowed: true, Limit: reqs[i].Limit.Capacity(), Window: reqs[i].Limit.Window()}
		}
	}
	oneScope := checkOneScope(rest) == nil
	var rt restTake
	if oneScope {
		rt = l.takeRest(ctx, hold, rest)
		if rt.err == nil && ctx.Err() != nil {
			l.refundRest(ctx, rt) // taken for a caller gone meanwhile
			rt.err = ctx.Err()
		}
		if rt.err != nil {
			return Reservation{}, rt.err
		}
		if !rt.d.Allowed {
			// Blocked outside the paced scope: no slot is taken.
			undecided(in)
			for k, i := range out {
				limits[i] = rt.d.Limits[k]
			}
			d := Decision{Limits: limits, Now: rt.d.Now}
			d.summarize()
			return Reservation{Decision: d, At: rt.d.Now.Add(rt.d.Wait)}, nil
		}
	}
	r, err := l.Reserve(ctx, opts, pick(reqs, in)...)
	if err != nil {
		l.refundRest(ctx, rt)
		return Reservation{}, err
	}
	for k, i := range in {
		limits[i] = r.Limits[k]
	}
	if !r.Firm {
		l.refundRest(ctx, rt)
		undecided(out)
		r.Limits = limits
		return r, nil
	}
	d := rt.d
	if !oneScope {
		if d, err = l.run(ctx, modeConsume, rest); err != nil {
			l.releaseLeases(ctx, r.Leases) // the send will not go: its slot lapses
			return Reservation{}, err
		}
	}
	for k, i := range out {
		limits[i] = d.Limits[k]
	}
	r.Limits = limits
	if d.Allowed {
		r.Leases = append(r.Leases, d.Leases...)
		r.summarize()
		return r, nil
	}
	l.releaseLeases(ctx, r.Leases)
	r.Leases = nil
	r.summarize()
	r.Firm, r.Planned, r.Local = false, false, false
	r.Now = d.Now
	r.At = d.Now.Add(d.Wait)
	return r, nil
}

// restTake is what reserveAcross took from a send's requests outside its
// paced scope: the requests as decided (overrides applied), their call's
// ID, and the decision (Allowed: every limit took its cost).
type restTake struct {
	reqs   []Request
	fields []string
	callID string
	d      Decision
	err    error
}

// takeRest decides rest (one scope, no GCRA limit) in a reserve call
// coalesced with other sends' on its scope; a blocked decision's Wait is
// when it may come back. The call is made as a high-priority send's, which
// prefetches nothing: units taken beyond the send's would be lost (only
// Reserve keeps prefetched slots). It is not cut short by ctx, so that
// what it took is known and can be refunded (it takes at most
// reserveTimeout).
func (l *Redis) takeRest(ctx context.Context, hold time.Duration, rest []Request) restTake {
	fields, err := validate(rest)
	if err != nil {
		return restTake{err: err}
	}
	if l.overrides != nil {
		rest = l.adaptive.apply(ctx, l.overrides.apply(ctx, rest))
	}
	rt := restTake{reqs: rest, fields: fields}
	if needsCallID(rest) {
		rt.callID = newCallID()
	}
	opts := ReserveOptions{Hold: hold, Priority: High}
	c := &reserveCall{opts: opts, hold: hold, reqs: rest, fields: fields, callID: rt.callID, done: make(chan reserveResult, 1)}
	res, err := l.batcher().do(context.WithoutCancel(ctx), c)
	if err != nil {
		rt.err = err
		return rt
	}
	rt.d = res.r.Decision
	if res.r.Firm {
		l.events.observe(ctx, rest, rt.d)
	} else {
		rt.d.Allowed = false
		rt.d.Wait = max(rt.d.Wait, res.r.At.Sub(res.r.Now))
		l.events.observeBlocked(ctx, rest, res.r, hold)
	}
	return rt
}

// refundRest gives back what takeRest took for a send that will not go
// now; nothing when it took nothing. A failed refund is logged: the units
// stay taken until their state expires (a window's day at most), never
// more than the limit.
func (l *Redis) refundRest(ctx context.Context, rt restTake) {
	if rt.err != nil || !rt.d.Allowed || !slices.ContainsFunc(rt.d.Limits, func(ld LimitDecision) bool { return ld.Taken > 0 }) {
		return
	}
	all := make([]int, len(rt.reqs))
	for i := range all {
		all[i] = i
	}
	if err := l.refund(ctx, rt.callID, rt.reqs, rt.fields, []Decision{rt.d}, [][]int{all}); err != nil {
		l.warn.refund.warn(ctx, l.logger(), "throttle: refund failed: units taken stay taken until their state expires", "key", rt.reqs[0].Key, "err", err)
	}
}

// releaseLeases gives back, within 2 s, leases of a send that will not go,
// whether or not ctx is done; a failure is logged and leaves them to
// expire by their lease time.
func (l *Redis) releaseLeases(ctx context.Context, leases []Lease) {
	if len(leases) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := l.Release(rctx, leases); err != nil {
		l.warn.refund.warn(ctx, l.logger(), "throttle: release failed: the leases expire by themselves", "key", leases[0].Key, "err", err)
	}
}

// reserveArgs builds reserve.lua's KEYS and ARGV: each distinct limiter key
// once (a GCRA limit's as its state, plan and backlog keys; any other's,
// which has no books, as its state key alone), and each send's fields. A
// key that one send of a batch uses for a GCRA limit and another for
// another algorithm is listed once for each (its state key twice), so that
// a GCRA limit's plan and backlog always follow its state key.
type reserveArgs struct {
	l     *Redis
	keys  []string
	head  []any              // ARGV[1..7]
	specs []any              // 6 values a spec
	args  []any              // the sends
	index map[reserveKey]int // → the position of its first key in KEYS (1-based)
	spec  map[limitSpec]int  // → its number among the specs (1-based)
}

// limitSpec is what reserve.lua reads of a limit beside its key: its
// algorithm, limit, period us, burst, cost and extra (as consume.lua).
// The sends of a call share a few: each is sent once, and a send's limit
// names its key and its spec.
type limitSpec struct {
	algo                       string
	limit, period, burst, cost int64
	extra                      string
}

// argv is the script's ARGV: the head, the number of specs and the specs,
// then the sends.
func (ra *reserveArgs) argv() []any {
	out := make([]any, 0, len(ra.head)+1+len(ra.specs)+len(ra.args))
	out = append(out, ra.head...)
	out = append(out, len(ra.spec))
	out = append(out, ra.specs...)
	return append(out, ra.args...)
}

// reserveKey names an entry of reserveArgs.keys: a full key, and whether a
// GCRA limit uses it (then with its books).
type reserveKey struct {
	key  string
	gcra bool
}

func (l *Redis) newReserveArgs(mode string, hold time.Duration, headroom float64, nsends int) *reserveArgs {
	var now int64
	if l.clock != nil {
		now = l.clock().UnixMicro()
	}
	prefetch, span := 0, int64(0)
	if mode == "reserve" && l.prefetchSpan > 0 {
		prefetch, span = MaxPrefetch, l.prefetchSpan.Microseconds()
	}
	return &reserveArgs{l: l, index: map[reserveKey]int{}, spec: map[limitSpec]int{},
		head: []any{now, mode, prefetch, hold.Microseconds(), strconv.FormatFloat(headroom, 'f', -1, 64), span, nsends}}
}

// send appends one send: its task ID, priority (and whether it is a
// retake), call id, tenant and its
// weight (zero: 1), and limits.
func (ra *reserveArgs) send(taskID string, p Priority, retake bool, callID, tenant string, weight float64, reqs []Request, fields []string) {
	pr := "bulk"
	switch {
	case p == High && retake:
		pr = "retake"
	case p == High:
		pr = "high"
	}
	if weight == 0 {
		weight = 1
	}
	// (14 significant digits, as the tenant records' JSON keeps a weight:
	// a send decided with its tenant's record from this call or from an
	// earlier one sees the same weight)
	ra.args = append(ra.args, taskID, pr, callID, tenant, strconv.FormatFloat(weight, 'g', 14, 64), len(reqs))
	for i, r := range reqs {
		k := reserveKey{ra.l.Key(r.Key), r.Limit.Algorithm == GCRA}
		ki, ok := ra.index[k]
		if !ok {
			ki = len(ra.keys) + 1
			if k.gcra {
				ra.keys = append(ra.keys, k.key, planKey(k.key), backlogKey(k.key))
			} else {
				ra.keys = append(ra.keys, k.key)
			}
			ra.index[k] = ki
		}
		sp := specOf(r, fieldOf(fields, i))
		si, ok := ra.spec[sp]
		if !ok {
			si = len(ra.spec) + 1
			ra.spec[sp] = si
			ra.specs = append(ra.specs, sp.algo, sp.limit, sp.period, sp.burst, sp.cost, sp.extra)
		}
		// (both as decimal integers: reserve.lua looks specs and pause
		// limits up by this text)
		ra.args = append(ra.args, ki, si)
	}
}

// specOf is r's limitSpec; field is its GCRA state's hash field.
func specOf(r Request, field string) limitSpec {
	lim := r.Limit
	cost := r.cost()
	switch lim.Algorithm {
	case GCRA:
		return limitSpec{"gcra", lim.Rate.Limit, lim.Rate.Period.Microseconds(), max(lim.Burst, 1), cost, field}
	case MinInterval:
		return limitSpec{"min_interval", 1, lim.Interval.Microseconds(), 0, cost, ""}
	case Concurrency:
		lease := lim.Lease
		if lease <= 0 {
			lease = DefaultLease
		}
		return limitSpec{"concurrency", lim.Max, lease.Microseconds(), 0, cost, ""}
	case Distinct:
		return limitSpec{"distinct", lim.Rate.Limit, lim.Rate.Period.Microseconds(), 0, cost, r.Member}
	case Pause:
		return limitSpec{algo: "pause", cost: 1} // a pause has nothing but its key
	}
	return limitSpec{string(lim.Algorithm), lim.Rate.Limit, lim.Rate.Period.Microseconds(), 0, cost, ""}
}

// localNow is Options.Clock, else this host's clock.
func (l *Redis) localNow() time.Time {
	if l.clock != nil {
		return l.clock()
	}
	return time.Now()
}

// now is the limiter's clock: Options.Clock, else Redis TIME.
func (l *Redis) now(ctx context.Context) time.Time {
	if l.clock != nil {
		return l.clock()
	}
	if t, err := l.rdb.Time(ctx).Result(); err == nil {
		return t
	}
	return time.Now()
}

// SweepBacklogs removes from the backlogs the planned sends whose task will
// never come back: for every backlog entry due more than grace ago, it asks
// gone (scope, the key's first segment, and the task ID) and removes the
// entry when gone says so (the task was deleted or archived by an
// operator, or its queue was deleted). Entries of tasks that are late but
// still exist (workers were down) stay. It returns how many entries it
// removed (one per GCRA limit of each send). The seconds those sends were
// planned in have passed, so no capacity is returned: the sweep keeps the
// backlogs (and `limits show`) true. On a Cluster client it walks every
// master. Its Redis work is proportional to the overdue entries, not to
// the backlog.
func (l *Redis) SweepBacklogs(ctx context.Context, grace time.Duration, gone func(scope, taskID string) (bool, error)) (int, error) {
	match := l.backlogMatch()
	cutoff := strconv.FormatInt(l.now(ctx).Add(-grace).UnixMicro(), 10)
	removed := 0
	sweepKey := func(c redis.Cmdable, k string) error {
		state, _ := stateOfBacklog(k)
		sc := scope(l.strip(state))
		// Page through the overdue entries: those kept (late but alive)
		// are skipped by the offset, removed ones make room.
		var offset int64
		for {
			ids, err := c.ZRangeByScore(ctx, k, &redis.ZRangeBy{Min: "-inf", Max: cutoff, Offset: offset, Count: 500}).Result()
			if err != nil {
				return fmt.Errorf("throttle: sweep %s: %w", k, err)
			}
			for _, id := range ids {
				g, err := gone(sc, id)
				if err != nil {
					return err
				}
				if !g {
					offset++
					continue
				}
				if err := c.ZRem(ctx, k, id).Err(); err != nil {
					return fmt.Errorf("throttle: sweep %s: %w", k, err)
				}
				removed++
			}
			if len(ids) < 500 {
				return nil
			}
		}
	}
	scan := func(c *redis.Client) error {
		it := c.Scan(ctx, 0, match, l.scanBatch).Iterator()
		for it.Next(ctx) {
			if err := sweepKey(c, it.Val()); err != nil {
				return err
			}
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("throttle: sweep backlogs: %w", err)
		}
		return nil
	}
	var err error
	switch c := l.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return scan(m) })
	case *redis.Client:
		err = scan(c)
	default:
		it := l.rdb.Scan(ctx, 0, match, l.scanBatch).Iterator()
		for it.Next(ctx) && err == nil {
			err = sweepKey(l.rdb, it.Val())
		}
		if err == nil {
			err = it.Err()
		}
	}
	return removed, err
}

// deferPlanScript is prelude.lua and defer_plan.lua.
var deferPlanScript = redis.NewScript(joinLua("prelude.lua", "defer_plan.lua"))

// MaxDeferredSends bounds the planned sends DeferPlanned moves in one
// call: a backlog larger than that is left as it is (its sends come back,
// find the pause and are planned again past it, one dequeue more each),
// so that no single call holds Redis for long. 20,000 sends take Redis
// about 30 ms.
const MaxDeferredSends = 20000

// Deferred is what DeferPlanned moved.
type Deferred struct {
	// Probe is the first planned send, now due in the pause's first whole
	// second (alone when probing); "" when nothing was planned before the
	// pause's end.
	Probe string
	// ProbeShift is how much later the probe now is: whole seconds.
	ProbeShift time.Duration
	// TaskIDs are the other planned sends moved, each Shift later
	// (ProbeShift, + 1s when probing). The caller moves the queued tasks by
	// the same.
	TaskIDs []string
	Shift   time.Duration
	// TooMany reports a backlog over MaxDeferredSends: nothing was moved.
	TooMany bool
}

// DeferPlanned moves the plan of a paused scope past the pause's end
// (until, on the limiter's clock: Paused.Until): reqs are a send's GCRA
// limits keyed by exactly the scope's fields (a sender's rate limit for a
// pause of the sender), whose backlogs hold the scope's planned sends.
// A limit that keeps no backlog (a pair beside its number: PlanTail) has
// nothing to move: its sends come back, find the pause and are planned
// past it. The first planned send still to come moves to the pause's first whole
// second and every other one later by the same whole number of seconds;
// with probe (a run of pauses, a storm), the first goes alone and the
// others one second more (a storm that goes on throttles one send, not a
// second's worth): the sends keep their order and their pace, and none
// comes back inside the pause to be planned again. The caller moves the
// queued tasks (Deferred.Probe by ProbeShift, TaskIDs by Shift); a task
// not moved comes back at its old second and is told to wait for its new
// place: one dequeue more.
// Other limits' books of the moved sends (a pair) are left as they are:
// their places only come earlier than the sends, and firm slots are still
// taken at the send's instant, so no limit is ever exceeded.
// Non-GCRA requests are ignored. Errors: ErrBadRequest for invalid
// requests, or Redis's.
func (l *Redis) DeferPlanned(ctx context.Context, until time.Time, probe bool, reqs ...Request) (Deferred, error) {
	gcra, fields, err := l.pacedRequests(ctx, reqs, false)
	if err != nil || len(gcra) == 0 {
		return Deferred{}, err
	}
	var now int64
	if l.clock != nil {
		now = l.clock().UnixMicro()
	}
	keys := make([]string, 0, 2*len(gcra))
	p := 0
	if probe {
		p = 1
	}
	args := []any{now, until.UnixMicro(), MaxDeferredSends, p}
	for i, r := range gcra {
		k := l.Key(r.Key)
		keys = append(keys, planKey(k), backlogKey(k))
		args = append(args, fieldOf(fields, i))
	}
	raw, err := deferPlanScript.Run(ctx, l.rdb, keys, args...).Slice()
	if err != nil {
		return Deferred{}, fmt.Errorf("throttle: defer plan %q: %w", gcra[0].Key, err)
	}
	if len(raw) < 2 {
		return Deferred{}, fmt.Errorf("throttle: defer plan %q: reply of %d values", gcra[0].Key, len(raw))
	}
	shift, _ := raw[1].(int64)
	if shift < 0 {
		return Deferred{TooMany: true}, nil
	}
	if shift == 0 || len(raw) < 3 {
		return Deferred{}, nil
	}
	d := Deferred{ProbeShift: time.Duration(shift) * time.Second, Shift: time.Duration(shift) * time.Second}
	if probe {
		d.Shift += time.Second
	}
	d.Probe, _ = raw[2].(string)
	for _, v := range raw[3:] {
		if id, ok := v.(string); ok {
			d.TaskIDs = append(d.TaskIDs, id)
		}
	}
	return d, nil
}
