package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/throttle"
)

// Credentials refused: a provider's Unauthorized answer (WhatsApp 190,
// Twilio 20003, HTTP 401 or 403) means no send of the channel can succeed
// until the credentials are fixed. Archiving task after task would throw
// the backlog away, and retrying each would make one refused call per task.
// Instead the send that was refused pauses the whole channel in every
// worker (the pause key of ScopeChannel, the one `sluice channels pause`
// sets), without using up a retry, and records a probe: one worker at a
// time asks the provider, with a request that sends nothing
// (Channel.Probe), whether the credentials work again. The first probe that
// succeeds resumes the channel and runs the tasks that waited for it;
// `sluice channels resume` does the same by hand.

// Defaults of Channel's credential fields.
const (
	// DefaultProbeEvery is Channel.ProbeEvery's default: the first probe
	// comes 30 s after the refusal, then the interval doubles.
	DefaultProbeEvery = 30 * time.Second
	// DefaultProbeMax is Channel.ProbeMax's default.
	DefaultProbeMax = 10 * time.Minute
	// probeTimeout bounds one probe request.
	probeTimeout = 30 * time.Second
)

// prober is implemented by limiters that keep probe records beside pauses
// (*throttle.Redis).
type prober interface {
	SetProbe(ctx context.Context, pauseKey string, fields map[string]string, code int, first, ttl time.Duration) error
	ClaimProbe(ctx context.Context, pauseKey string, most time.Duration) (throttle.Probe, bool, error)
	PauseOf(ctx context.Context, key string) (*throttle.Paused, error)
	Resume(ctx context.Context, key string) (bool, error)
}

// credentialTimes returns ch with its probe and pause defaults set.
func (ch Channel) credentialTimes() Channel {
	if ch.ProbeEvery <= 0 {
		ch.ProbeEvery = DefaultProbeEvery
	}
	if ch.ProbeMax <= 0 {
		ch.ProbeMax = DefaultProbeMax
	}
	ch.ProbeMax = max(ch.ProbeMax, ch.ProbeEvery)
	if ch.AuthPause <= 0 {
		ch.AuthPause = ch.MaxRetryAfter
		if ch.AuthPause <= 0 {
			ch.AuthPause = DefaultMaxRetryAfter
		}
	}
	return ch
}

// unauthorized handles a send whose credentials the provider refused:
// it pauses the channel in every worker for Channel.AuthPause (until a
// probe or an operator resumes it), records the probe, and returns the
// *ThrottledError that brings the task back when the pause ends. That
// error spends nothing of the task's retry budget, unless the refusal
// repeats one that a probe had ended within the pause memory (10 min: the
// probe passes but sends are refused, e.g. a token that may read the number
// but not send from it), or the channel could not be paused (no shared
// limiter, or Redis failed): then every task would meet the refusal on its
// own, so each attempt counts and the budget ends the loop.
func (h *handler) unauthorized(ctx context.Context, ce *channels.Error, fields map[string]string) error {
	m, name := h.w.opts.Metrics, h.ch.Name
	m.outcome(name, OutcomeUnauthorized)
	m.providerThrottle(name, ce.Code, channels.ScopeChannel)
	unpaused := func(why string, err error) error {
		h.w.logger.Warn("provider refused the channel's credentials and the channel could not be paused: the task waits, spending an attempt",
			"channel", name, "why", why, "code", ce.Code, "status", ce.HTTPStatus, "reason", ce.Message, "err", err)
		return &ThrottledError{Channel: name, Limit: ProviderLimit, RetryAfter: h.ch.ProbeEvery, Wait: h.ch.ProbeEvery, Err: ce, spends: true}
	}
	if h.pauser == nil {
		return unpaused("the limiter does not pause (no shared Redis limiter)", nil)
	}
	key := throttle.PauseKey(name, ScopeChannel, "")
	reason := "credentials refused"
	if ce.Message != "" {
		reason += ": " + ce.Message
	}
	pz, err := h.pauser.Pause(ctx, key, throttle.PauseOptions{Wait: h.ch.AuthPause, Max: h.ch.AuthPause, Code: ce.Code, Reason: reason})
	if err != nil {
		return unpaused("pause", err)
	}
	if pr, ok := h.pauser.(prober); ok && h.ch.Probe != nil {
		// Refused again soon after a probe ended a pause: probe later.
		first := min(h.ch.ProbeEvery<<min(pz.InARow-1, 20), h.ch.ProbeMax)
		if err := pr.SetProbe(ctx, key, fields, ce.Code, first, pz.Until.Sub(pz.Since)); err != nil {
			h.w.logger.Warn("record the probe of a channel paused for its credentials; it stays paused until resumed", "channel", name, "err", err)
		}
	}
	left := h.recordPause(ctx, key, pz, ce)
	if pz.New {
		until := "until a probe succeeds or `sluice channels resume " + name + "`"
		if h.ch.Probe == nil {
			until = "until `sluice channels resume " + name + "`"
		}
		h.w.logger.Warn("provider refused the channel's credentials: channel paused in every worker "+until+"; no task is archived",
			"channel", name, "key", key, "code", ce.Code, "status", ce.HTTPStatus, "at_most", left.Round(time.Second),
			"in_a_row", pz.InARow, "reason", pz.Reason)
	}
	return &ThrottledError{Channel: name, Limit: ProviderLimit, Key: key, RetryAfter: left, Wait: left, Err: ce, spends: pz.InARow > 1}
}

// probeTick is how often the probe loop looks at the channels it probes.
const probeTick = time.Second

// probeLoop runs until ctx ends: every tick, for each channel with a Probe
// that is paused (this worker's pause book, or every 15 ticks Redis' probe
// record, for pauses set before this worker started), it asks for the turn
// to probe (ClaimProbe, one process at a time across all workers) and
// probes.
func (w *Worker) probeLoop(ctx context.Context, pr prober, chans []Channel, tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for n := 0; ; n++ {
		for _, ch := range chans {
			key := throttle.PauseKey(ch.Name, ScopeChannel, "")
			if n%15 != 0 && !w.pauses.paused(key, time.Now()) {
				continue
			}
			w.probeOnce(ctx, pr, ch, key)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probeOnce probes ch's credentials if it is this process's turn: a probe
// that succeeds resumes the channel and runs the tasks that waited.
func (w *Worker) probeOnce(ctx context.Context, pr prober, ch Channel, key string) {
	p, ok, err := pr.ClaimProbe(ctx, key, ch.ProbeMax)
	if err != nil {
		if ctx.Err() == nil {
			w.logger.Warn("probe turn", "channel", ch.Name, "err", err)
		}
		return
	}
	if !ok {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	err = ch.Probe(pctx, p.Fields)
	cancel()
	var ce *channels.Error
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return
	case errors.As(err, &ce) && ce.Class == channels.Unauthorized:
		w.opts.Metrics.probe(ch.Name, "refused")
		w.logger.Warn("probe: the provider still refuses the channel's credentials; the channel stays paused",
			"channel", ch.Name, "probe", p.N, "code", ce.Code, "status", ce.HTTPStatus, "next_in", p.Next, "reason", ce.Message)
		return
	default:
		w.opts.Metrics.probe(ch.Name, "error")
		w.logger.Warn("probe failed; the channel stays paused", "channel", ch.Name, "probe", p.N, "next_in", p.Next, "err", err)
		return
	}
	w.opts.Metrics.probe(ch.Name, "accepted")
	// An operator may have paused the channel since (`sluice channels
	// pause`, PauseOptions.Operator): that pause is the operator's to end.
	if pz, err := pr.PauseOf(ctx, key); err != nil || (pz != nil && pz.Operator) {
		w.logger.Info("probe succeeded, but an operator paused the channel since; it stays paused until `sluice channels resume`",
			"channel", ch.Name, "key", key, "err", err)
		return
	}
	resumed, err := pr.Resume(ctx, key)
	if err != nil {
		w.logger.Warn("probe succeeded, but resuming the channel failed; it resumes at the next probe", "channel", ch.Name, "err", err)
		return
	}
	w.pauses.set(key, 0, time.Now())
	if pz, ok := w.opts.Limiter.(Pauser); ok && resumed {
		pz.Emit(ctx, throttle.EventProviderResumed, key, time.Millisecond, "code", p.Code, "reason", "probe succeeded: the provider accepts the credentials again")
	}
	ran, err := RunWaiting(asynq.NewInspectorFromRedisClient(w.opts.Redis), slices.Sorted(maps.Keys(w.opts.Queues)), []string{key})
	w.logger.Info("probe succeeded: the provider accepts the channel's credentials again; channel resumed in every worker",
		"channel", ch.Name, "key", key, "probe", p.N, "waiting_tasks_run", ran)
	if err != nil {
		w.logger.Warn("some tasks that waited for the channel may still wait for the pause's planned end; `sluice channels resume "+ch.Name+"` runs them",
			"channel", ch.Name, "err", err)
	}
}

// RunWaiting runs now the retry tasks of queues that were waiting for one
// of the ended pause keys (their last error, a *ThrottledError, names it:
// `… on KEY: …`) and returns how many it ran. A queue that does not exist
// is skipped; a task that ran meanwhile is not an error. Used when a pause
// ends early (`sluice channels resume`, a probe that succeeded), since its
// tasks were scheduled for the pause's planned end. The retry set is read
// in pages while other workers may still add to it, which shifts the
// pages: passes repeat until one finds nothing more (at most 5).
func RunWaiting(insp *asynq.Inspector, queues []string, ended []string) (int, error) {
	have, err := insp.Queues()
	if err != nil {
		return 0, err
	}
	ran := 0
	for _, queue := range queues {
		if !slices.Contains(have, queue) {
			continue
		}
		for range 5 {
			n, err := runWaitingPass(insp, queue, ended)
			ran += n
			if err != nil {
				return ran, err
			}
			if n == 0 {
				break
			}
		}
	}
	return ran, nil
}

// runWaitingPass is one pass of RunWaiting over queue.
func runWaitingPass(insp *asynq.Inspector, queue string, ended []string) (int, error) {
	var ids []string
	for page := 1; ; page++ {
		ts, err := insp.ListRetryTasks(queue, asynq.Page(page), asynq.PageSize(500))
		if err != nil {
			return 0, fmt.Errorf("list waiting tasks of %q: %w", queue, err)
		}
		for _, t := range ts {
			for _, k := range ended {
				if strings.Contains(t.LastErr, " on "+k+": ") {
					ids = append(ids, t.ID)
					break
				}
			}
		}
		if len(ts) < 500 {
			break
		}
	}
	ran := 0
	for _, id := range ids {
		if err := insp.RunTask(queue, id); err == nil {
			ran++
		}
	}
	return ran, nil
}
