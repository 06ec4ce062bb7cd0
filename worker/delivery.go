package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluice-dev/sluice/channels"
)

// DeliveryRecorder keeps what became of each task, for delivery callbacks
// and progress (internal/delivery.Store implements it): the worker calls
// RecordSent after the provider accepted a send and RecordFailed when it
// gives a task up. An error never fails, retries or delays the task; it is
// logged at WARN. A RecordSent that fails is kept in the worker's memory
// and called again with the same Sent, with backoff, until it succeeds
// (Redis is back), returns an error wrapping ErrInvalidRecord, or the
// worker shuts down (docs/redis-outages.md), so RecordSent must be
// idempotent. Implementations must be safe for concurrent use; each call
// gets a context bounded to 2s that a shutdown does not cancel.
type DeliveryRecorder interface {
	RecordSent(ctx context.Context, s Sent) error
	RecordFailed(ctx context.Context, f Failed) error
}

// keptKey is the context key KeptRecord reads.
type keptKey struct{}

// KeptRecord reports whether a RecordSent call writes a send the worker
// kept while the recorder could not take it (a Redis outage): the kept
// sends are written one at a time, and a recorder that holds calls for
// company (internal/delivery's busy store) writes these at once, so that
// a worker's memory of them empties within seconds of Redis' return.
func KeptRecord(ctx context.Context) bool {
	kept, _ := ctx.Value(keptKey{}).(bool)
	return kept
}

// WithKeptRecord returns ctx marked as KeptRecord's: the worker's own
// writes of its kept sends carry it, and a recorder's tests can.
func WithKeptRecord(ctx context.Context) context.Context {
	return context.WithValue(ctx, keptKey{}, true)
}

// SentLookup is implemented by DeliveryRecorders that can say whether a
// task's send was recorded (internal/delivery.Store). With one, a task that
// runs again after the provider accepted its send, because asynq could not
// record its completion during a Redis outage (docs/redis-outages.md),
// completes without sending again. The worker asks only on a task's reruns
// (asynq retry count above 0), never on a first attempt.
type SentLookup interface {
	// SentAt returns when the provider accepted the task's send (Sent.At
	// of the RecordSent call), or the zero time when no send of the task
	// is recorded. The error is the backend's; the worker then retries the
	// task later rather than send it blind.
	SentAt(ctx context.Context, taskID, queue string) (time.Time, error)
}

// ErrInvalidRecord is wrapped by a DeliveryRecorder's error when it refuses
// a record for its content (a field too long, a status it does not know):
// writing it again cannot succeed, so the worker does not keep it.
var ErrInvalidRecord = errors.New("invalid delivery record")

// Sent is a send the provider accepted.
type Sent struct {
	TaskID  string // asynq task ID
	Queue   string // asynq queue
	Channel string // Channel.Name, "sms"
	// Tenant is Prepared.Tenant, "" for none.
	Tenant string
	// Campaign is Prepared.Campaign (`sluice send` sets the campaign's
	// name), "" for none: the group whose outcomes are counted.
	Campaign string
	// ProviderID is the provider's message ID ("SM…", "wamid.…"); "" for
	// webhooks, HTTP calls and unconfirmed sends without one.
	ProviderID string
	// Status is OutcomeSent ("sent") or OutcomeUnconfirmed
	// ("sent_unconfirmed": accepted, but the reply was cut off or had no
	// message ID).
	Status string
	At     time.Time // when the provider answered, this host's clock
}

// Failed is a task the worker gave up on: asynq archives it and never
// runs it again on its own (a malformed payload, a permanent provider
// answer, a spent retry budget).
type Failed struct {
	TaskID, Queue, Channel, Tenant string // as in Sent; Tenant "" when the payload could not be decoded
	Campaign                       string // as in Sent
	// Code is the provider's error code of the last answer (Twilio 21211,
	// WhatsApp 131026), 0 when there is none.
	Code int
	// Reason is why, the archive reason asynq keeps: "whatsapp: permanent:
	// code 131026 (undeliverable): ...", "budget spent: 8 attempts over
	// 1d3h35m5s, ...". At most 500 bytes; never holds credentials (the
	// channels package redacts them).
	Reason string
	At     time.Time // this host's clock
}

// maxReason bounds Failed.Reason.
const maxReason = 500

// attempt is what serve learns of one process call besides its error: the
// task's decoded payload and the provider's answer, for the recorder.
type attempt struct {
	prepared bool
	p        Prepared
	sent     bool
	resp     channels.Response
	// slot is the instant the send was paced for (this host's clock; zero
	// when it was not paced), from which its departure's lateness is measured.
	slot time.Time
	// base is slot before the send was held for pushes after late sends
	// (heldForPushes), taken when its limits' slots were taken and
	// headroom the reservation's: what a push after this send left late
	// counts from (departure.pushIfLate).
	base     time.Time
	taken    takenAt
	headroom float64
}

// record reports the attempt's end to the DeliveryRecorder: a send the
// provider accepted, or a task archived (err wraps asynq.SkipRetry).
func (h *handler) record(ctx context.Context, meta taskMeta, a *attempt, err error) {
	rec := h.w.opts.Delivery
	if rec == nil {
		return
	}
	archived := err != nil && errors.Is(err, asynq.SkipRetry)
	if !(err == nil && a.sent) && !archived {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	var tenant, campaign string
	if a.prepared {
		tenant, campaign = a.p.Tenant, a.p.Campaign
	}
	if !archived {
		status := OutcomeSent
		if a.resp.Incomplete {
			status = OutcomeUnconfirmed
		}
		s := Sent{TaskID: meta.id, Queue: meta.queue, Channel: h.ch.Name, Tenant: tenant, Campaign: campaign, ProviderID: a.resp.ProviderID, Status: status, At: h.now()}
		if err := rec.RecordSent(ctx, s); err != nil {
			if errors.Is(err, ErrInvalidRecord) || meta.id == "" {
				h.w.logger.Warn("delivery record: could not record a send; the send stands", "task_id", meta.id, "channel", h.ch.Name, "err", err)
				return
			}
			// Redis is likely down, and asynq will not record the task's
			// completion either: keep the send and write it when Redis
			// is back, before asynq runs the task again.
			h.w.logger.Warn("delivery record: could not record a send; the send stands, and is kept to record when Redis answers",
				"task_id", meta.id, "channel", h.ch.Name, "err", err)
			h.w.unrecorded.add(s)
		}
		return
	}
	f := Failed{TaskID: meta.id, Queue: meta.queue, Channel: h.ch.Name, Tenant: tenant, Campaign: campaign, Reason: archiveReason(err), At: h.now()}
	var ce *channels.Error
	if errors.As(err, &ce) {
		f.Code = ce.Code
	}
	if err := rec.RecordFailed(ctx, f); err != nil {
		h.w.logger.Warn("delivery record: could not record an archived task", "task_id", meta.id, "channel", h.ch.Name, "err", err)
	}
}

// alreadySent reports whether the provider accepted the task's send in an
// earlier attempt: the worker keeps its record, unwritten (unrecorded), or,
// on a rerun (asynq retry count above 0) with a recorder that has a
// SentLookup, the recorder has it, from within sentWindow. asynq runs such a
// task again when it could not record the task's completion in a Redis
// outage (docs/redis-outages.md). A first attempt costs no round trip. The
// error is the lookup's: the task is retried as after a limiter error,
// never sent blind.
func (h *handler) alreadySent(ctx context.Context, meta taskMeta) (bool, error) {
	m, name := h.w.opts.Metrics, h.ch.Name
	sent := func(where string, at time.Time) (bool, error) {
		m.outcome(name, OutcomeAlreadySent)
		args := []any{"task_id", meta.id, "channel", name, "retried", meta.retried, "record", where}
		if !at.IsZero() {
			args = append(args, "sent_at", at.UTC())
		}
		h.w.logger.Warn("task came back after its send: completed without sending again (asynq had not recorded its completion)", args...)
		return true, nil
	}
	if meta.id == "" {
		return false, nil
	}
	if h.w.unrecorded.has(meta.queue, meta.id) {
		return sent("in memory, waiting for Redis", time.Time{})
	}
	look, ok := h.w.opts.Delivery.(SentLookup)
	if (meta.retried == 0 && !meta.rerun) || !ok {
		return false, nil
	}
	lctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	at, err := look.SentAt(lctx, meta.id, meta.queue)
	if err != nil {
		m.outcome(name, OutcomeLimiterError)
		return false, fmt.Errorf("%s: delivery record of a rerun: %w", name, err)
	}
	if at.IsZero() || h.now().Sub(at) > sentWindow {
		return false, nil
	}
	return sent("in Redis", at)
}

// archiveReason is err's text without asynq's "skip retry for the task: "
// prefix, cut to maxReason bytes on a rune boundary.
func archiveReason(err error) string {
	s := strings.TrimPrefix(err.Error(), asynq.SkipRetry.Error()+": ")
	if len(s) > maxReason {
		s = strings.ToValidUTF8(s[:maxReason], "")
	}
	return s
}

// Feedback applies a provider throttle reported after the send, in a
// delivery callback (Twilio ErrorCode 30022 in a status callback, WhatsApp
// 130429 in a webhook's statuses), exactly as the handler applies one the
// provider answered a send with: it pauses the scope ce.Scope names
// (Channel.PauseScopes rendered from fields, the send's key fields such as
// "sender", "to", "account_sid" or "phone_number_id") in every worker for
// ce.RetryAfter or the channel's backoff, capped by MaxRetryAfter; it
// raises provider.throttled and provider.paused, counts
// sluice_provider_throttles_total, and lowers the adaptive limits the
// scope concerns. sent is when the provider accepted the send (this host's
// clock; zero when unknown): a throttle of a send made before the last
// decrease, at the old rate, does not lower the rate again
// (throttle.AdaptSignal.Sent). No task is requeued: the message has
// already gone.
//
// It returns the pause key ("sms:paused:sender:+12025550100"), "" when the
// channel pauses no such scope, a field is empty, or the limiter cannot
// pause (throttle.Local). The error names an unknown channel or a ce that
// is not a throttle (nil, or Class other than channels.Throttled).
func (w *Worker) Feedback(ctx context.Context, channel string, fields map[string]string, ce *channels.Error, sent time.Time) (pauseKey string, err error) {
	h, ok := w.handlers[channel]
	if !ok {
		return "", fmt.Errorf("worker: feedback: unknown channel %.40q", channel)
	}
	if ce == nil || ce.Class != channels.Throttled {
		return "", fmt.Errorf("worker: feedback for channel %s: want a throttle (channels.Throttled)", channel)
	}
	key, _ := h.providerThrottled(ctx, ce, fields, h.rules.Requests(fields), sent, sent)
	return key, nil
}
