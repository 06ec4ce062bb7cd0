package throttle

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Re-pacing a plan after an adaptive limit climbs back. A send planned while
// a provider's throttles held a limit down keeps its place when the rate is
// raised again: a sender adapted down to 0.31/s has its sends planned 3.2 s
// apart, and at 0.96/s later they would still go 3.2 s apart, the limit
// idle in between. NextTooLate names the send planned next on such a limit
// when its place is more than a second later than the limit's pace of now
// allows after the send just taken; the caller runs that task now (asynq's
// RunTask), and, coming back before its place, it takes the limit's next
// slot (Reserve, held within the hold) and, once sent, names the next one:
// the planned sends close up at the rate of now, each dequeued once.

// NextTooLate returns the task ID of the send planned next on a slow paced
// limit of reqs (a GCRA limit whose interval, at its adapted rate, is at
// least a second and at most hold), when the limit is adapted below its
// configured rate and that send's place is more than its interval plus a
// second after at (the instant the send on reqs just took, this limiter's
// clock; a host's own clock is near enough for the one-second margin); ""
// otherwise. It costs a Redis call (ZRANGEBYSCORE of the limit's backlog,
// from after at, one entry) only
// for an adapted slow limit; the adapted rates are the cached ones
// (Options.OverrideRefresh). The error is Redis'.
func (l *Redis) NextTooLate(ctx context.Context, reqs []Request, at time.Time, hold time.Duration) (string, error) {
	if l.overrides == nil || l.adaptive == nil {
		return "", nil
	}
	if s := l.adaptive.current(ctx); s == nil || len(s.entries) == 0 {
		return "", nil // nothing adapted: every send's path, no work
	}
	var gcra []Request
	for _, r := range reqs {
		if r.Limit.Algorithm == GCRA && r.Limit.Rate.Limit > 0 {
			gcra = append(gcra, r)
		}
	}
	if len(gcra) == 0 {
		return "", nil
	}
	configured := l.overrides.apply(ctx, gcra)
	adapted := l.adaptive.apply(ctx, configured)
	for i, r := range adapted {
		if r.Limit == configured[i].Limit || r.Limit.Rate.Limit <= 0 {
			continue // not adapted: its plan was made at the rate of now
		}
		interval := time.Duration(r.cost()) * r.Limit.Rate.Interval()
		if interval < time.Second || interval > hold {
			continue // a fast limit's plan counts seconds; a slower one's sends would not be held
		}
		// The first place after at: those at or before it are due, or
		// being sent.
		z, err := l.rdb.ZRangeByScoreWithScores(ctx, backlogKey(l.Key(r.Key)), &redis.ZRangeBy{
			Min: "(" + strconv.FormatInt(at.UnixMicro(), 10), Max: "+inf", Count: 1}).Result()
		if err != nil {
			return "", fmt.Errorf("throttle: next planned on %q: %w", r.Key, err)
		}
		if len(z) == 0 {
			continue
		}
		id, ok := z[0].Member.(string)
		if ok && time.UnixMicro(int64(z[0].Score)).After(at.Add(interval+time.Second)) {
			return id, nil
		}
	}
	return "", nil
}
