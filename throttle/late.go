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

// PushAfterLate moves on the firm books of reqs' GCRA limits after a send
// on them left late: slot is the instant it had (this limiter's clock),
// late how long after it the send left (its request written), headroom the
// ReserveOptions.Headroom its limits were paced at (the smallest in use,
// to be safe).
//
// A limit paced at that headroom spaces a limit's worth of sends over its
// period plus a margin M = period·headroom/(1−headroom) (15.2ms a second
// at 0.015): a strict provider, counting over any span of a period, sees
// one send too many when a send arrives more than M later than the one a
// limit's worth after it (and the send after it is late too, when M is
// wider than the interval). So a send later than M moves every slot taken
// after it on by late − M: the TAT grows by that much. Slots already
// taken, and held by workers, move with it: the push is announced on
// PushesChannel, and WatchPushes tells every worker, which holds a send
// whose slot came after the late one's and was taken before the push that
// much longer. The cost is a gap of late − M on each limit.
//
// One Redis call (keys of one scope, ErrBadRequest otherwise) and one
// PUBLISH when a slot moved; it returns, per GCRA request in order, how
// far its slots moved (0 where late is within its margin). Errors are
// Redis'.
func (l *Redis) PushAfterLate(ctx context.Context, slot time.Time, late time.Duration, headroom float64, reqs ...Request) ([]time.Duration, error) {
	if headroom < 0 || headroom >= 1 {
		return nil, fmt.Errorf("%w: headroom %v, want [0, 1)", ErrBadRequest, headroom)
	}
	fields, err := validate(reqs)
	if err != nil {
		return nil, err
	}
	if err := checkOneScope(reqs); err != nil {
		return nil, err
	}
	if l.overrides != nil {
		reqs = l.adaptive.apply(ctx, l.overrides.apply(ctx, reqs))
	}
	var now int64
	if l.clock != nil {
		now = l.clock().UnixMicro()
	}
	args := []any{now, slot.UnixMicro(), late.Microseconds(), strconv.FormatFloat(headroom, 'f', -1, 64)}
	var keys, names []string
	for i, r := range reqs {
		if r.Limit.Algorithm != GCRA || r.Limit.Rate.Limit <= 0 {
			continue
		}
		keys = append(keys, l.Key(r.Key))
		names = append(names, r.Key)
		args = append(args, r.Limit.Rate.Limit, r.Limit.Rate.Period.Microseconds(), r.cost(), fieldOf(fields, i))
	}
	out := make([]time.Duration, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	raw, err := runInts(ctx, l.rdb, pushLateScript, keys, args)
	if err != nil {
		return nil, fmt.Errorf("throttle: push after a late send on %q: %w", names[0], err)
	}
	if len(raw) != 1+len(keys) {
		return nil, fmt.Errorf("%w: %d values from push_late, want %d", ErrMalformedReply, len(raw), 1+len(keys))
	}
	pipe := l.rdb.Pipeline()
	for i, v := range raw[1:] {
		out[i] = time.Duration(v) * time.Microsecond
		if v > 0 {
			pipe.Publish(ctx, l.PushesChannel(), fmt.Sprintf("%s %d %d %d", names[i], v, raw[0], slot.UnixMicro()))
		}
	}
	if pipe.Len() > 0 {
		if _, err := pipe.Exec(context.WithoutCancel(ctx)); err != nil {
			l.warn.eventWrite.warn(ctx, l.logger(), "throttle: push announcement dropped", "key", names[0], "err", err)
		}
	}
	return out, nil
}

// Push is one PushAfterLate announcement (WatchPushes): Key's slots taken
// before At (this limiter's clock) and later than Slot (the late send's)
// go By later.
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
	sub := l.rdb.Subscribe(ctx, l.PushesChannel())
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		return fmt.Errorf("throttle: watch pushes: %w", err)
	}
	ch := sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m, ok := <-ch:
			if !ok {
				return nil
			}
			if p, ok := parsePush(m.Payload); ok {
				fn(p)
			}
		}
	}
}

// parsePush reads "KEY BY_US AT_US SLOT_US".
func parsePush(s string) (Push, bool) {
	f := strings.Fields(s)
	if len(f) != 4 {
		return Push{}, false
	}
	var v [3]int64
	for i := range v {
		n, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil || n < 0 {
			return Push{}, false
		}
		v[i] = n
	}
	return Push{Key: f[0], By: time.Duration(v[0]) * time.Microsecond, At: time.UnixMicro(v[1]), Slot: time.UnixMicro(v[2])}, v[0] > 0
}
