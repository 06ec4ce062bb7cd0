package throttle

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

var pushLateScript = redis.NewScript(joinLua("prelude.lua", "gcra.lua", "push_late.lua"))

// PushAfterLate moves on the later slots of reqs' GCRA limits after a
// send on them left late: slot is the instant it was first given (this
// limiter's clock; before any hold for a push), taken when that slot was
// taken (the reservation's Now; zero: unknown), late how long after slot
// the send left (its request written), headroom the
// ReserveOptions.Headroom its limits were paced at.
//
// A limit paced at that headroom spaces a limit's worth of sends over its
// period plus a margin M = period·headroom/(1−headroom) (15.2ms a second
// at 0.015): a strict provider, counting over any span of a period, sees
// one send too many when a send arrives more than M later than the one a
// limit's worth after it (and the send after it is late too, where M is
// wider than the interval). So a send later than M moves every slot after
// it on by late − M, less what pushes made since taken, for sends before
// it, moved them already (the sends of one stall are late together; each
// pushing its whole lateness would lose a second of the limit to a 200ms
// stall). The firm book's TAT grows by that much, for the slots taken from
// now on, and the push is announced on PushesChannel ("BY_US AT_US SLOT_US
// KEY"; WatchPushes) for the slots workers hold already: a worker holds a
// send whose slot came after the late one's and was taken before the push
// that much longer. The cost is a gap on each limit.
//
// One script call on the paced scope (Reserve; requests of other scopes
// are left out); it returns, per GCRA request in order, how far its slots moved (0 where late is within its margin or
// earlier pushes covered it). Errors: ErrBadRequest (headroom outside
// [0, MaxHeadroom], GCRA limits of several scopes, a bad request), the errors of
// Reserve's validation (ErrNoRequests, ErrCostOverLimit), ErrMalformedReply,
// else Redis'.
func (l *Redis) PushAfterLate(ctx context.Context, slot, taken time.Time, late time.Duration, headroom float64, reqs ...Request) ([]time.Duration, error) {
	if headroom < 0 || headroom > MaxHeadroom {
		return nil, fmt.Errorf("%w: headroom %v, want 0 to %v", ErrBadRequest, headroom, MaxHeadroom)
	}
	if in, out, err := splitPaced(reqs); err != nil {
		return nil, err
	} else if len(out) > 0 {
		reqs = pick(reqs, in) // only GCRA limits move, all in the paced scope
	}
	fields, err := validate(reqs)
	if err != nil {
		return nil, err
	}
	if l.overrides != nil {
		reqs = l.adaptive.apply(ctx, l.overrides.apply(ctx, reqs))
	}
	var now, tk int64
	if l.clock != nil {
		now = l.clock().UnixMicro()
	}
	if !taken.IsZero() {
		tk = taken.UnixMicro()
	}
	args := []any{now, slot.UnixMicro(), late.Microseconds(), strconv.FormatFloat(headroom, 'f', -1, 64), tk, l.PushesChannel()}
	var keys []string
	for i, r := range reqs {
		if r.Limit.Algorithm != GCRA || r.Limit.Rate.Limit <= 0 {
			continue
		}
		k := l.Key(r.Key)
		keys = append(keys, k, pushLedgerKey(k))
		args = append(args, r.Limit.Rate.Limit, r.Limit.Rate.Period.Microseconds(), r.cost(), fieldOf(fields, i), r.Key)
	}
	out := make([]time.Duration, len(keys)/2)
	if len(keys) == 0 {
		return out, nil
	}
	raw, err := runInts(ctx, l.rdb, pushLateScript, keys, args)
	if err != nil {
		return nil, fmt.Errorf("throttle: push after a late send on %q: %w", reqs[0].Key, err)
	}
	if len(raw) != 1+len(out) {
		return nil, fmt.Errorf("%w: %d values from push_late, want %d", ErrMalformedReply, len(raw), 1+len(out))
	}
	for i, v := range raw[1:] {
		out[i] = time.Duration(v) * time.Microsecond
	}
	return out, nil
}

// Push is one PushAfterLate announcement (WatchPushes): the slots of the
// limit on Key (without the prefix) that were taken before At (this
// limiter's clock) and come after Slot (the late send's) go By later.
type Push struct {
	Key      string
	By       time.Duration
	At, Slot time.Time
}

// WatchPushes calls fn for every PushAfterLate of any process, from its
// subscription on until ctx ends. Workers use it to hold the sends whose
// slots a push moved and that they hold already. It returns ctx's error,
// or the subscription's.
func (l *Redis) WatchPushes(ctx context.Context, fn func(Push)) error {
	return l.watch(ctx, l.PushesChannel(), "pushes", func(payload string) {
		if p, ok := parsePush(payload); ok {
			fn(p)
		}
	})
}

// parsePush reads "BY_US AT_US SLOT_US KEY" (the key last: it may hold
// spaces).
func parsePush(s string) (Push, bool) {
	f := strings.SplitN(s, " ", 4)
	if len(f) != 4 || f[3] == "" {
		return Push{}, false
	}
	var v [3]int64
	for i := range v {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil || n < 0 {
			return Push{}, false
		}
		v[i] = n
	}
	return Push{Key: f[3], By: time.Duration(v[0]) * time.Microsecond, At: time.UnixMicro(v[1]), Slot: time.UnixMicro(v[2])}, v[0] > 0
}
