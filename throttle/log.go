package throttle

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// warnEvery is how often, at most, one of the Redis limiter's warnings that
// can fire on every call is logged. The warnings it holds back meanwhile are
// counted in the next one's "suppressed" key.
const warnEvery = 10 * time.Second

// logger returns the limiter's logger: Options.Logger, else slog.Default()
// as it is at the time of the call.
func (l *Redis) logger() *slog.Logger {
	if l.log != nil {
		return l.log
	}
	return slog.Default()
}

// occasional logs one kind of warning at most once per warnEvery. Its zero
// value is not ready: use newOccasional.
type occasional struct {
	every      rate.Sometimes
	suppressed atomic.Int64
}

func newOccasional() *occasional {
	return &occasional{every: rate.Sometimes{Interval: warnEvery}}
}

// warn logs msg at WARN with args, unless it logged within warnEvery.
func (o *occasional) warn(ctx context.Context, log *slog.Logger, msg string, args ...any) {
	logged := false
	o.every.Do(func() {
		logged = true
		if n := o.suppressed.Swap(0); n > 0 {
			args = append(args, "suppressed", n)
		}
		log.WarnContext(ctx, msg, args...)
	})
	if !logged {
		o.suppressed.Add(1)
	}
}

// redisWarnings are the Redis limiter's rate-limited warnings, one per
// place that drops an error so that one flood does not hide another.
type redisWarnings struct {
	eventWrite      *occasional // an event could not be written
	overrideRefresh *occasional // the overrides could not be re-read
	overrideIgnored *occasional // an override would make its limit invalid
	refund          *occasional // a cross-scope refund failed after an error
	adaptRefresh    *occasional // the adaptive state could not be re-read
}

func newRedisWarnings() redisWarnings {
	return redisWarnings{eventWrite: newOccasional(), overrideRefresh: newOccasional(),
		overrideIgnored: newOccasional(), refund: newOccasional(), adaptRefresh: newOccasional()}
}
