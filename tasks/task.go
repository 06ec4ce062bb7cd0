package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
)

// Defaults the task constructors apply; caller options override them.
const (
	// DefaultMaxRetry is the asynq MaxRetry the constructors give a task: a
	// ceiling, not the retry policy. Under Sluice a task's MaxRetry(n) allows
	// n failed attempts (provider throttles, transient failures; Sluice's own
	// limits never count), and each channel's retry budget
	// (worker.RetryBudget, channels.<name>.retry) normally archives a failing
	// task well before: webhooks after 8 attempts, WhatsApp and SMS after a
	// day.
	DefaultMaxRetry = 100
	// DefaultRetention is how long a completed task stays in Redis. While it
	// does, its ID (the idempotency key) stays reserved, so enqueuing the same
	// key again fails with ErrDuplicate instead of sending twice.
	DefaultRetention = 24 * time.Hour
)

// ErrDuplicate is wrapped by the Enqueue… helpers when asynq rejects the task
// because a task with the same ID (the payload's IdempotencyKey) already
// exists in the queue: pending, scheduled, running, retrying, archived, or
// completed within the retention period. The message was not enqueued again;
// for a retried producer this usually means success.
var ErrDuplicate = errors.New("duplicate task")

// ErrKeyInUse is returned (wrapped) by producer.Client when a task's ID is
// already claimed by a task of another type: asynq keeps task IDs unique
// only within a queue, so without the claim one idempotency key could be a
// WhatsApp send and a webhook at once. Nothing was enqueued; use a new key
// for a new send.
var ErrKeyInUse = errors.New("idempotency key already used for a task of another type")

// NewWhatsAppSendTask normalizes p (sets V, rewrites To as E.164), validates
// it and returns a whatsapp:send task. Options, in order: Queue("whatsapp"),
// MaxRetry(DefaultMaxRetry), Retention(DefaultRetention), TaskID(key) when
// p.IdempotencyKey is set, then opts, which override any of them, except
// that a MaxRetry below 1 is raised to 1 (see MinMaxRetry).
//
// The error is Validate's (it names the field), or a payload over
// MaxPayloadBytes; p is not modified.
func NewWhatsAppSendTask(p WhatsAppSend, opts ...asynq.Option) (*asynq.Task, error) {
	p.normalize()
	return newTask(TypeWhatsAppSend, p, p.IdempotencyKey, opts)
}

// NewSMSSendTask is NewWhatsAppSendTask for sms:send tasks: it normalizes
// From and To to E.164 and uses the "sms" queue.
func NewSMSSendTask(p SMSSend, opts ...asynq.Option) (*asynq.Task, error) {
	p.normalize()
	return newTask(TypeSMSSend, p, p.IdempotencyKey, opts)
}

// NewWebhookDeliverTask is NewWhatsAppSendTask for webhook:deliver tasks: it
// trims the URL and uses the "webhook" queue.
func NewWebhookDeliverTask(p WebhookDeliver, opts ...asynq.Option) (*asynq.Task, error) {
	p.normalize()
	return newTask(TypeWebhookDeliver, p, p.IdempotencyKey, opts)
}

// NewHTTPCallTask is NewWhatsAppSendTask for http:call tasks: it upper-cases
// Method, trims the URL and uses the "http" queue.
func NewHTTPCallTask(p HTTPCall, opts ...asynq.Option) (*asynq.Task, error) {
	p.normalize()
	return newTask(TypeHTTPCall, p, p.IdempotencyKey, opts)
}

func newTask(typ string, p interface{ Validate() error }, key string, opts []asynq.Option) (*asynq.Task, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("%s: encode payload: %w", typ, err)
	}
	if err := checkSize(typ, len(b)); err != nil {
		return nil, err
	}
	all := []asynq.Option{
		asynq.Queue(DefaultQueue(typ)),
		asynq.MaxRetry(DefaultMaxRetry),
		asynq.Retention(DefaultRetention),
	}
	if key != "" {
		all = append(all, asynq.TaskID(key))
	}
	return asynq.NewTask(typ, b, FloorMaxRetry(append(all, opts...))...), nil
}

// MinMaxRetry is the lowest asynq MaxRetry Sluice's enqueuers give a task.
// asynq archives a task whose retry count has reached its MaxRetry on any
// error, and a block by Sluice's own limits is an error to asynq (one that
// does not move the count): with MaxRetry(0) the first such block would
// archive the task. With MaxRetry(1) the worker archives the task at its
// first failed attempt, which is what MaxRetry(0) asks for, and Sluice's
// blocks stay free.
const MinMaxRetry = 1

// NoSuchTask reports whether err, from asynq's Inspector.GetTaskInfo, says
// the queue holds no task of that ID: asynq.ErrTaskNotFound, or
// asynq.ErrQueueNotFound (a queue that never held a task).
func NoSuchTask(err error) bool {
	return errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound)
}

// FloorMaxRetry returns opts with asynq.MaxRetry(MinMaxRetry) appended when
// the last MaxRetry among them is below MinMaxRetry (producer.Client and the
// New…Task constructors apply it). The result's capacity is its length, so
// appending to it copies.
func FloorMaxRetry(opts []asynq.Option) []asynq.Option {
	n := MinMaxRetry
	for _, o := range opts {
		if o.Type() == asynq.MaxRetryOpt {
			n, _ = o.Value().(int)
		}
	}
	opts = opts[:len(opts):len(opts)] // appending never writes into the caller's array
	if n < MinMaxRetry {
		return append(opts, asynq.MaxRetry(MinMaxRetry))
	}
	return opts
}

// EnqueueWhatsAppSend builds the task with NewWhatsAppSendTask(p, opts...) and
// enqueues it with c: the plain asynq path, for a program that has an
// asynq client and nothing of Sluice's configuration. If the idempotency
// key is already taken in the task's queue it returns an error wrapping
// both ErrDuplicate and asynq.ErrTaskIDConflict.
//
// It is not producer.Client.Send, and does less: the task runs now and
// takes its slot when a worker first dequeues it (Send plans the slot at
// enqueue, so that a backlog is dequeued once per send); it takes no claim
// on its key (Send refuses a key another channel's task holds, and this
// task's key is not seen by Send); it leaves a tenant's key without the
// tenant's namespace (Send's task ID for the same send differs); and it
// checks nothing a configuration sets (a disabled channel, its payload cap,
// the egress policy). The tasks package cannot call the producer (the
// producer builds on it); use producer.Client where those matter.
func EnqueueWhatsAppSend(ctx context.Context, c *asynq.Client, p WhatsAppSend, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	t, err := NewWhatsAppSendTask(p, opts...)
	if err != nil {
		return nil, err
	}
	return enqueue(ctx, c, t, p.IdempotencyKey)
}

// EnqueueSMSSend is EnqueueWhatsAppSend for sms:send tasks.
func EnqueueSMSSend(ctx context.Context, c *asynq.Client, p SMSSend, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	t, err := NewSMSSendTask(p, opts...)
	if err != nil {
		return nil, err
	}
	return enqueue(ctx, c, t, p.IdempotencyKey)
}

// EnqueueWebhookDeliver is EnqueueWhatsAppSend for webhook:deliver tasks.
func EnqueueWebhookDeliver(ctx context.Context, c *asynq.Client, p WebhookDeliver, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	t, err := NewWebhookDeliverTask(p, opts...)
	if err != nil {
		return nil, err
	}
	return enqueue(ctx, c, t, p.IdempotencyKey)
}

// EnqueueHTTPCall is EnqueueWhatsAppSend for http:call tasks.
func EnqueueHTTPCall(ctx context.Context, c *asynq.Client, p HTTPCall, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	t, err := NewHTTPCallTask(p, opts...)
	if err != nil {
		return nil, err
	}
	return enqueue(ctx, c, t, p.IdempotencyKey)
}

func enqueue(ctx context.Context, c *asynq.Client, t *asynq.Task, key string) (*asynq.TaskInfo, error) {
	info, err := c.EnqueueContext(ctx, t)
	switch {
	case errors.Is(err, asynq.ErrTaskIDConflict) || errors.Is(err, asynq.ErrDuplicateTask):
		return nil, fmt.Errorf("enqueue %s (idempotency_key %q): %w: %w", t.Type(), key, ErrDuplicate, err)
	case err != nil:
		return nil, fmt.Errorf("enqueue %s: %w", t.Type(), err)
	}
	return info, nil
}
