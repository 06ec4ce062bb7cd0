package worker

import (
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluice-dev/sluice/channels"
)

// ThrottledError means "not now": a limit, Sluice's own or the provider's,
// blocked the send. RetryDelay schedules the task back after Wait; the
// worker is free meanwhile, the task waits in Redis. A block by Sluice's own
// limits or pauses is not a failure: IsFailure returns false, so asynq keeps
// the task's retry count. A provider throttle (Limit ProviderLimit, Err the
// provider's answer) is a failed attempt: it spends one of the channel's
// RetryBudget.
type ThrottledError struct {
	Channel string // "whatsapp"
	// Limit names what blocked: a configured limit ("throughput", "pair") or,
	// for provider throttles, "provider".
	Limit string
	// Key is the limiter key that blocked (without prefix); for a provider
	// throttle the scope it paused, or "" when it paused none.
	Key string
	// RetryAfter is the exact earliest moment the send could be allowed.
	RetryAfter time.Duration
	// Wait is how long the task stays in Redis before it is tried again:
	// RetryAfter, or a later place in line behind other waiters (see
	// throttle.Decision.Wait), or the provider's delay or the channel backoff.
	Wait time.Duration
	// Err is the provider's *channels.Error for provider throttles.
	Err error
	// Planned reports that the send holds a planned slot Wait from now
	// (throttle.Reservation.Planned): it comes back at the whole second of
	// that slot and is held in the worker until the slot itself.
	Planned bool
	// Due, when set, is the local time at which the planned slot's whole
	// second begins (on the limiter's clock, mapped to this host's): the
	// task comes back then. Without it the second is found from Wait.
	Due time.Time
	// spends marks a refused credential (channels.Unauthorized) that
	// counts against the retry budget after all (handler.unauthorized).
	spends bool
}

// Error formats the error; RunWaiting finds the tasks of an ended pause by
// the " on KEY: " every form with a key has (asynq keeps it as the task's
// last error).
func (e *ThrottledError) Error() string {
	var ce *channels.Error
	if errors.As(e.Err, &ce) && ce.Class == channels.Unauthorized {
		if e.Key != "" {
			return fmt.Sprintf("%s: credentials refused, channel paused on %s: retry in %v: %v", e.Channel, e.Key, e.Wait, e.Err)
		}
		return fmt.Sprintf("%s: credentials refused, retry in %v: %v", e.Channel, e.Wait, e.Err)
	}
	if e.Err != nil && e.Key != "" {
		return fmt.Sprintf("%s: throttled by provider, paused on %s: retry in %v: %v", e.Channel, e.Key, e.Wait, e.Err)
	}
	if e.Err != nil {
		return fmt.Sprintf("%s: throttled by provider, retry in %v: %v", e.Channel, e.Wait, e.Err)
	}
	if e.Planned {
		return fmt.Sprintf("%s: limit %q on %s: planned slot in %v", e.Channel, e.Limit, e.Key, e.Wait)
	}
	return fmt.Sprintf("%s: limit %q on %s: retry in %v", e.Channel, e.Limit, e.Key, e.Wait)
}

func (e *ThrottledError) Unwrap() error { return e.Err }

// ProviderLimit is ThrottledError.Limit for a provider's throttle response.
const ProviderLimit = "provider"

// IsFailure is asynq's Config.IsFailure: a block by Sluice's own limits is
// not a failure, so it never moves the task's retry count; a provider
// throttle and every other error are (RetryBudget counts them). A provider
// throttle is told by its Err (the provider's answer), never by its Limit,
// which a configured limit could share. A refused credential
// (channels.Unauthorized) is not a failure either: it pauses the whole
// channel until a probe or an operator resumes it, and the task that met
// it waits with the rest, spending nothing — unless the handler found the
// refusal repeating or could not pause the channel (handler.unauthorized).
func IsFailure(err error) bool {
	var te *ThrottledError
	if errors.As(err, &te) {
		var ce *channels.Error
		if errors.As(te.Err, &ce) && ce.Class == channels.Unauthorized {
			return te.spends
		}
		return te.Err != nil
	}
	return true
}

// RetryDelay is asynq's Config.RetryDelayFunc. A throttled task comes back
// after its Wait, a failure its budget retries (*RetryError) after its
// Wait; anything else uses asynq's default exponential backoff.
func RetryDelay(n int, err error, t *asynq.Task) time.Duration {
	var te *ThrottledError
	var re *RetryError
	if errors.As(err, &re) {
		return scheduleDelay(time.Now(), re.Wait)
	}
	if errors.As(err, &te) {
		if te.Planned && !te.Due.IsZero() {
			return max(0, time.Until(te.Due))
		}
		if te.Planned {
			return plannedDelay(time.Now(), te.Wait)
		}
		return scheduleDelay(time.Now(), te.Wait)
	}
	return asynq.DefaultRetryDelayFunc(n, err, t)
}

// skewAllowance absorbs clock differences between a worker and Redis, whose
// TIME the limiter uses: a wait that ends this close after a whole second is
// treated as ending on it.
const skewAllowance = 20 * time.Millisecond

// scheduleDelay converts a wait into the delay to hand asynq. asynq stores
// retry times in whole Unix seconds and moves a task back to its queue once
// the clock reaches that second, so a task scheduled for 10.3s would be
// released at 10.0s, before its wait ends. scheduleDelay rounds the due time
// up to a whole second (down, within skewAllowance), so a task never returns
// early; the forwarder then releases it within DelayedTaskCheckInterval.
// Fixed windows start on whole seconds, so their waits need no rounding.
func scheduleDelay(now time.Time, wait time.Duration) time.Duration {
	if wait <= 0 {
		return 0
	}
	due := now.Add(wait)
	sec := due.Truncate(time.Second)
	if due.Sub(sec) > skewAllowance {
		sec = sec.Add(time.Second)
	}
	if d := sec.Sub(now); d > 0 {
		return d
	}
	return 0
}

// plannedDelay converts the distance to a planned slot into the delay to
// hand asynq: the task comes back at the start of the slot's whole second
// (asynq's resolution), so that it is dequeued before its slot and held in
// the worker until the slot itself (at most Channel.Hold).
func plannedDelay(now time.Time, wait time.Duration) time.Duration {
	if wait <= 0 {
		return 0
	}
	sec := now.Add(wait).Truncate(time.Second)
	if d := sec.Sub(now); d > 0 {
		return d
	}
	return 0
}

// permanent marks err so asynq archives the task with err's text as the
// reason and never retries it.
func permanent(err error) error {
	return fmt.Errorf("%w: %w", asynq.SkipRetry, err)
}
