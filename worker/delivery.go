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
// gives a task up. Calls are best-effort: an error is logged at WARN and
// never fails, retries or delays the task. Implementations must be safe for
// concurrent use; each call gets a context bounded to 2s that a shutdown
// does not cancel.
type DeliveryRecorder interface {
	RecordSent(ctx context.Context, s Sent) error
	RecordFailed(ctx context.Context, f Failed) error
}

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
	// when it was not paced), late how long after it the send left.
	slot time.Time
	late time.Duration
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
			h.w.logger.Warn("delivery record: could not record a send; the send stands", "task_id", meta.id, "channel", h.ch.Name, "err", err)
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
	key, _ := h.providerThrottled(ctx, ce, fields, h.rules.Requests(fields), sent)
	return key, nil
}
