package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/control"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
)

// RetryBudget is how much failing a channel's task may do before it is
// archived with the reason (a *BudgetSpentError). A failed attempt is a
// provider throttle (channels.Throttled) or a transient failure
// (channels.Transient, a network error, a timeout, a limiter error): each
// spends one attempt. Sluice's own limit blocks and the pauses a task meets
// without having caused them are not attempts: they spend nothing and never
// archive a task. Permanent errors archive at once, as before.
//
// Attempts are counted by asynq's retry count (Retried), which only failures
// move (IsFailure), so the count lives in the task itself and every worker
// sees the same one. The age is measured from the task's first failed
// attempt, kept in Redis by task ID (see firstFailures).
//
// A task is archived when the attempt that just failed is its last: it is the
// MaxAttempts-th (with a Schedule, by default its len(Schedule)+1-th), or
// MaxAge has passed since its first failed attempt, or it reaches the task's
// own asynq MaxRetry (see Channel.Retry). At least one of Schedule,
// MaxAttempts and MaxAge must be set: a budget that never ends would retry
// forever.
type RetryBudget struct {
	// Schedule is the wait before each retry: Schedule[0] after the first
	// failed attempt, Schedule[1] after the second, and so on; the last wait
	// repeats when MaxAttempts allows more. Each wait gets up to 10% jitter,
	// as the Standard Webhooks spec recommends, and a provider throttle
	// waits max(its pause or Retry-After, the step). Empty: a transient
	// failure backs off as asynq does (asynq.DefaultRetryDelayFunc over the
	// failed attempts so far) and a provider throttle waits its pause.
	Schedule []time.Duration
	// MaxAttempts is the most failed attempts, the first one included.
	// Zero means len(Schedule)+1 with a schedule, else no cap but MaxAge and
	// the task's MaxRetry.
	MaxAttempts int
	// MaxAge is how long after its first failed attempt a task may still be
	// retried: a failure at or past it archives the task, and a retry is
	// never scheduled past it (the last one comes at MaxAge) unless a
	// provider pause lasts longer. Zero means no limit by age.
	MaxAge time.Duration
}

// Bounds of a RetryBudget (Check).
const (
	MaxRetrySchedule = 100                 // waits in a Schedule
	MaxRetryWait     = 7 * 24 * time.Hour  // one Schedule wait
	MaxRetryAge      = 30 * 24 * time.Hour // MaxAge
	MaxRetryAttempts = 10000               // MaxAttempts
)

// Default retry budgets of the bundled channels (config.Default reads them).
var (
	// DefaultProviderRetry is WhatsApp's and SMS's, and the budget of a
	// Channel whose Retry is zero: a failing message may keep trying for a
	// day after its first failed attempt (the providers' daily limits reset
	// within a day, and a message a day late has usually lost its point; a
	// WhatsApp free-form message must go within the 24 h customer service
	// window anyway, error 131047).
	DefaultProviderRetry = RetryBudget{MaxAge: 24 * time.Hour}
	// DefaultWebhookRetry is the webhook and HTTP call budget: attempts
	// immediately, then after 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 10 h, 8
	// attempts over about 27.5 h. This is Svix's schedule
	// (https://docs.svix.com/retries), the first steps of the example in the
	// Standard Webhooks spec ("Deliverability and reliability",
	// https://www.standardwebhooks.com/), which goes on to 75 h.
	DefaultWebhookRetry = RetryBudget{Schedule: []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute,
		2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour}}
)

// IsZero reports whether b is the zero budget (Channel.Retry's "default").
func (b RetryBudget) IsZero() bool {
	return len(b.Schedule) == 0 && b.MaxAttempts == 0 && b.MaxAge == 0
}

// Check returns an error naming the field (schedule[2], max_attempts,
// max_age) that is out of bounds, or the budget that never ends.
func (b RetryBudget) Check() error {
	if len(b.Schedule) > MaxRetrySchedule {
		return fmt.Errorf("schedule: %d waits, want at most %d", len(b.Schedule), MaxRetrySchedule)
	}
	for i, w := range b.Schedule {
		if w <= 0 || w > MaxRetryWait {
			return fmt.Errorf("schedule[%d]: %v, want more than 0 and at most %v", i, w, MaxRetryWait)
		}
	}
	if b.MaxAttempts < 0 || b.MaxAttempts > MaxRetryAttempts {
		return fmt.Errorf("max_attempts: %d, want 1 to %d (0: the schedule's length + 1)", b.MaxAttempts, MaxRetryAttempts)
	}
	if b.MaxAge < 0 || b.MaxAge > MaxRetryAge {
		return fmt.Errorf("max_age: %v, want more than 0 and at most %v", b.MaxAge, MaxRetryAge)
	}
	if b.IsZero() {
		return errors.New("want a schedule, max_attempts or max_age: a budget that never ends would retry a failing task forever")
	}
	return nil
}

// attempts is the most failed attempts, 0 for no cap.
func (b RetryBudget) attempts() int {
	if b.MaxAttempts > 0 {
		return b.MaxAttempts
	}
	if len(b.Schedule) > 0 {
		return len(b.Schedule) + 1
	}
	return 0
}

// spent says why the attempt-th failed attempt (1 for the first), age after
// the first, is the task's last; "" if it is not. maxRetry is the task's
// asynq MaxRetry, < 0 when unknown.
func (b RetryBudget) spent(attempt int, age time.Duration, maxRetry int) string {
	switch n := b.attempts(); {
	case n > 0 && attempt >= n && b.MaxAttempts == 0:
		return "the schedule's end"
	case n > 0 && attempt >= n:
		return "max_attempts " + strconv.Itoa(n)
	case b.MaxAge > 0 && age >= b.MaxAge:
		return "max_age " + formatAge(b.MaxAge)
	case maxRetry >= 0 && attempt >= maxRetry:
		// asynq archives a task whose Retried reached its MaxRetry on any
		// error, a Sluice block included: stop here, with the reason.
		return fmt.Sprintf("the task's MaxRetry(%d)", maxRetry)
	}
	return ""
}

// step is the schedule's wait after the attempt-th failed attempt, with up
// to 10% jitter (jitter(n) returns [0, n)); 0 without a schedule.
func (b RetryBudget) step(attempt int, jitter func(int64) int64) time.Duration {
	if len(b.Schedule) == 0 || attempt < 1 {
		return 0
	}
	w := b.Schedule[min(attempt, len(b.Schedule))-1]
	return w + time.Duration(jitter(int64(w)/10+1))
}

// BudgetSpentError archives a task whose failed attempts spent its
// channel's RetryBudget. Its text is the archive reason: "budget spent: 8
// attempts over 1d3h35m5s, the schedule's end; last: webhook: throttled:
// HTTP 503". It wraps asynq.SkipRetry and the last attempt's error.
type BudgetSpentError struct {
	Channel  string
	Attempts int           // failed attempts, the last included
	Age      time.Duration // from the first failed attempt to the last
	Why      string        // what ended it: "the schedule's end", "max_age 1d", "max_attempts 5", "the task's MaxRetry(3)"
	Endpoint string        // the endpoint key (Channel.Endpoint) or ""
	Err      error         // the last attempt's error
}

func (e *BudgetSpentError) Error() string {
	return fmt.Sprintf("budget spent: %d attempts over %s, %s; last: %v", e.Attempts, formatAge(e.Age), e.Why, e.Err)
}

func (e *BudgetSpentError) Unwrap() []error { return []error{asynq.SkipRetry, e.Err} }

// RetryError is a failed attempt that the task's budget retries after Wait
// (RetryDelay hands Wait to asynq). It is a failure: it spends an attempt.
type RetryError struct {
	Attempt int           // failed attempts so far, this one included
	Wait    time.Duration // until the next attempt
	Err     error
}

func (e *RetryError) Error() string {
	return fmt.Sprintf("%v (attempt %d, next in %v)", e.Err, e.Attempt, e.Wait)
}

func (e *RetryError) Unwrap() error { return e.Err }

// formatAge renders d to the second with days: "1d3h35m5s", "45m0s", "0s".
func formatAge(d time.Duration) string {
	d = d.Round(time.Second)
	if d < 24*time.Hour {
		return d.String()
	}
	days, rest := d/(24*time.Hour), d%(24*time.Hour)
	if rest == 0 {
		return strconv.FormatInt(int64(days), 10) + "d"
	}
	return strconv.FormatInt(int64(days), 10) + "d" + rest.String()
}

// taskMeta is what asynq tells a handler about its task.
type taskMeta struct {
	id, queue string
	retried   int  // failed attempts before this one
	maxRetry  int  // -1 when unknown
	rerun     bool // a batch's send whose batch ran before (batch.go)
}

func asynqMeta(ctx context.Context) taskMeta {
	if m, ok := ctx.Value(memberKey{}).(taskMeta); ok {
		return m // a batch's send (batch.go)
	}
	m := taskMeta{maxRetry: -1}
	m.id, _ = asynq.GetTaskID(ctx)
	m.queue, _ = asynq.GetQueueName(ctx)
	m.retried, _ = asynq.GetRetryCount(ctx)
	if n, ok := asynq.GetMaxRetry(ctx); ok {
		m.maxRetry = n
	}
	return m
}

// serve runs one attempt (process) and applies the channel's retry budget
// to its outcome: a failure spends an attempt and is retried after the
// schedule's wait, or archived with a *BudgetSpentError when it was the
// last; Sluice's own blocks pass through untouched.
//
// A send the provider accepted and a task archived are then reported to
// Options.Delivery, when set. A task whose send was accepted in an earlier
// attempt (alreadySent) completes without one.
func (h *handler) serve(ctx context.Context, t *asynq.Task) error {
	meta := h.meta(ctx)
	meta.retried += tasks.Retried(t.Headers()) // a batch's send with its own task
	if done, err := h.alreadySent(ctx, meta); done || err != nil {
		return h.settle(ctx, t, meta, err)
	}
	var a attempt
	err := h.process(ctx, t, &a)
	err = h.settle(ctx, t, meta, err)
	h.record(ctx, meta, &a, err)
	return err
}

// settle applies the retry budget to an attempt's error; see serve.
func (h *handler) settle(ctx context.Context, t *asynq.Task, meta taskMeta, err error) error {
	switch {
	case err == nil || errors.Is(err, asynq.SkipRetry) || errors.Is(err, asynq.RevokeTask):
		if meta.retried > 0 {
			h.failures.forget(ctx, meta)
		}
		return err
	case !IsFailure(err):
		if meta.maxRetry >= 0 && meta.retried >= meta.maxRetry {
			// A task a plain asynq client enqueued with MaxRetry(0) (Sluice's
			// enqueuers keep it >= 1, and spend stops failures before it), or
			// one whose handler timed out: asynq archives it on this block
			// whatever we return, so say why.
			return permanent(fmt.Errorf("enqueued with MaxRetry(%d), retried %d: asynq archives a task whose retries are spent on any error, "+
				"Sluice's own limits included (enqueue with producer.Client or the tasks helpers, which keep MaxRetry >= 1): %w", meta.maxRetry, meta.retried, err))
		}
		return err
	}
	return h.spend(ctx, t, meta, err)
}

// spend counts a failed attempt against the budget: it returns the error
// that retries the task after its wait, or archives it.
func (h *handler) spend(ctx context.Context, t *asynq.Task, meta taskMeta, err error) error {
	b, now := h.ch.Retry, h.now()
	attempt := meta.retried + 1
	first := h.failures.first(ctx, meta, now, attempt == 1, b.ttl())
	age := max(now.Sub(first), 0)
	if why := b.spent(attempt, age, meta.maxRetry); why != "" {
		last := err
		var te *ThrottledError
		if errors.As(err, &te) && te.Err != nil {
			last = te.Err // the provider's answer, not "retry in ..."
		}
		h.w.opts.Metrics.outcome(h.ch.Name, OutcomeBudgetSpent)
		h.failures.forget(ctx, meta)
		e := &BudgetSpentError{Channel: h.ch.Name, Attempts: attempt, Age: age, Why: why, Err: last}
		h.endpointFailing(ctx, t, meta, e)
		return e
	}
	wait := b.step(attempt, h.jitter)
	var te *ThrottledError
	if errors.As(err, &te) {
		te.Wait = max(te.Wait, b.capAge(wait, first, now))
		return err
	}
	if len(b.Schedule) == 0 {
		wait = asynq.DefaultRetryDelayFunc(meta.retried, err, t)
	}
	return &RetryError{Attempt: attempt, Wait: b.capAge(wait, first, now), Err: err}
}

// capAge shortens wait so that the retry comes no later than MaxAge after
// the first failed attempt.
func (b RetryBudget) capAge(wait time.Duration, first, now time.Time) time.Duration {
	if b.MaxAge > 0 {
		wait = max(min(wait, first.Add(b.MaxAge).Sub(now)), 0)
	}
	return wait
}

// ttl is how long the first failure time is kept after a failure: past the
// budget's span, so it outlives every retry the budget allows (a key that
// expired anyway only restarts the age: never an early archive).
func (b RetryBudget) ttl() time.Duration {
	span := b.MaxAge
	for _, w := range b.Schedule {
		span += w
	}
	return max(7*24*time.Hour, 2*span)
}

// endpointFailing raises endpoint.failing for a task of a channel with an
// Endpoint, once a minute per endpoint. Events need the Redis limiter
// (a Pauser): with throttle.Local there is no events stream, and the WARN
// line of the archive is all there is.
func (h *handler) endpointFailing(ctx context.Context, t *asynq.Task, meta taskMeta, e *BudgetSpentError) {
	if h.endpoint == nil || h.pauser == nil {
		return
	}
	p, err := h.ch.Prepare(t.Payload())
	if err != nil {
		return
	}
	key, ok := h.endpoint.Render(p.Fields)
	if !ok {
		return
	}
	e.Endpoint = key
	code := 0
	var ce *channels.Error
	if errors.As(e.Err, &ce) {
		code = ce.Code
		if code == 0 {
			code = ce.HTTPStatus
		}
	}
	h.pauser.Emit(ctx, throttle.EventEndpointFailing, key, time.Minute,
		"code", code, "reason", truncate(e.Error(), 500), "task_id", meta.id, "attempts", e.Attempts, "age_ms", e.Age.Milliseconds())
}

// truncate cuts s to at most n bytes, dropping a rune cut in two.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// firstFailures keeps each failing task's first failed attempt time (Unix
// ms on the worker's clock) in Redis, under "<prefix>:_failed:<queue>:<task
// id>", so that every worker measures the same age. It is written at a
// task's first failed attempt (replacing any stale value a deleted task of
// the same ID left), read at the later ones, deleted when the task ends, and
// expires budget.ttl after the last failure. asynq gives a handler no
// enqueue time, and the first failure is the right start anyway: time a task
// spent planned or blocked by Sluice's own limits before it ever failed is
// not the provider's doing. If Redis fails, the age counts from now.
type firstFailures struct {
	rdb    redis.UniversalClient
	prefix string
	warn   func(msg string, args ...any)
}

func (f firstFailures) key(m taskMeta) string {
	return control.FirstFailureKey(f.prefix, m.queue, m.id)
}

// first records now as the first failure when fresh (or when none is
// kept) and returns the one kept.
func (f firstFailures) first(ctx context.Context, m taskMeta, now time.Time, fresh bool, ttl time.Duration) time.Time {
	if f.rdb == nil || m.id == "" {
		return now
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	k, ms := f.key(m), now.UnixMilli()
	if fresh {
		if err := f.rdb.Set(ctx, k, ms, ttl).Err(); err != nil {
			f.warn("retry budget: record the first failure", "key", k, "err", err)
		}
		return now
	}
	var got *redis.StringCmd
	_, err := f.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SetNX(ctx, k, ms, ttl)
		got = p.Get(ctx, k)
		p.PExpire(ctx, k, ttl)
		return nil
	})
	if err != nil {
		f.warn("retry budget: read the first failure", "key", k, "err", err)
		return now
	}
	v, err := got.Int64()
	if err != nil || v > ms {
		return now
	}
	return time.UnixMilli(v)
}

// forget deletes a finished task's first failure time.
func (f firstFailures) forget(ctx context.Context, m taskMeta) {
	if f.rdb == nil || m.id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := f.rdb.Del(ctx, f.key(m)).Err(); err != nil {
		f.warn("retry budget: forget the first failure (it expires on its own)", "key", f.key(m), "err", err)
	}
}

// defaultJitter is rand.Int64N for the schedule's jitter.
func defaultJitter(n int64) int64 { return rand.Int64N(n) }

// prefixer is implemented by limiters with a key prefix (*throttle.Redis).
type prefixer interface{ Prefix() string }

// initBudget defaults and checks the channel's Retry, compiles its
// Endpoint and sets up the first failure times.
func (h *handler) initBudget(fields []string) error {
	if h.ch.Retry.IsZero() {
		h.ch.Retry = DefaultProviderRetry
	}
	if err := h.ch.Retry.Check(); err != nil {
		return fmt.Errorf("channel %s: retry: %w", h.ch.Name, err)
	}
	if h.ch.Endpoint != "" {
		t, err := rules.ParseKey(h.ch.Name, h.ch.Endpoint, fields)
		if err != nil {
			return fmt.Errorf("channel %s: endpoint: %w", h.ch.Name, err)
		}
		h.endpoint = &t
	}
	logger := h.w.logger
	if logger == nil {
		logger = slog.Default()
	}
	h.failures = firstFailures{rdb: h.w.opts.Redis, prefix: h.w.prefix(), warn: logger.Warn}
	h.jitter, h.meta = defaultJitter, asynqMeta
	return nil
}
