package producer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluice-dev/sluice/tasks"
)

// Item is one send for Client.Send.
type Item struct {
	// Task is the send: a whatsapp:send, sms:send, webhook:deliver or
	// http:call task (tasks.New…Task), its idempotency key as the caller
	// gave it, without a tenant's namespace. Its options are not kept:
	// Send builds the task again from its payload.
	Task *asynq.Task
	// MaxRetry is the task's retry budget; 0: Options.MaxRetry.
	MaxRetry int
}

// Result is the outcome of one Item of Client.Send or Client.Check.
type Result struct {
	// Task is the task as Send enqueues it: its payload's idempotency key
	// with the tenant's namespace; nil when the item was refused before
	// it was built (validate, namespace).
	Task *asynq.Task
	// ID is the task ID: the idempotency key (namespaced for a send with
	// a tenant), else a random one (after the tenant's namespace for a
	// send with a tenant); "" when the item was refused before the claim.
	ID string
	// Info is asynq's record of the new task; nil when Err is set, and
	// from Check.
	Info *asynq.TaskInfo
	// ETA is when the send is expected to go (Enqueued.ETA).
	ETA time.Time
	// Keys are the limiter keys the send was planned on (Enqueued.Keys).
	Keys []string
	// Err is why the item was not enqueued: an error wrapping ErrInvalid
	// (refused: its text names the field, "to: …", "idempotency_key: …",
	// "channel: sms is disabled …", "payload: … bytes encoded, over …",
	// "url https://host: …"); tasks.ErrKeyInUse (a task of another type
	// holds the ID); tasks.ErrDuplicate (a task with the ID exists: it is
	// not enqueued twice); else the enqueue's own failure (Redis).
	Err error
}

// ErrInvalid is wrapped by the error of an item Send or Check refuses
// before enqueuing it: a payload the tasks package rejects, an
// idempotency key that does not fit its tenant's namespace or poses as
// one, a disabled channel, a payload over its channel's cap, a target the
// egress policy refuses. The error's text is the reason alone, naming the
// field as the tasks package does.
var ErrInvalid = errors.New("producer: send refused")

// ErrNotCounted is wrapped by Send's error when its new tasks were
// enqueued but Options.Count failed: the results stand.
var ErrNotCounted = errors.New("producer: new tasks not counted for their campaign")

// invalidError is a refusal: its text is err's, and it wraps ErrInvalid.
type invalidError struct{ err error }

func (e *invalidError) Error() string   { return e.err.Error() }
func (e *invalidError) Unwrap() []error { return []error{ErrInvalid, e.err} }

func invalid(err error) error { return &invalidError{err} }

// TenantNamespace returns the prefix Sluice puts before the task ID of a
// send with a tenant: "t-" and the first 16 hex digits of the tenant's
// SHA-256, then ':' ("t-9f86d081884c7d65:", 19 characters). Keys of
// different tenants never collide, and a tenant cannot name another
// tenant's task. Sends without a tenant keep their key as is.
func TenantNamespace(tenant string) string {
	d := sha256.Sum256([]byte(tenant))
	return "t-" + hex.EncodeToString(d[:8]) + ":"
}

// namespaceRE matches an ID that starts with a tenant namespace.
var namespaceRE = regexp.MustCompile(`^t-[0-9a-f]{16}:`)

// HasNamespace reports whether id starts with a tenant namespace
// (TenantNamespace's shape): a task ID Send gave a send with a tenant. No
// caller's key may start so.
func HasNamespace(id string) bool { return namespaceRE.MatchString(id) }

// TaskID is the ID Send gives the send of tenant with idempotency key
// key: TenantNamespace(tenant)+key, or key without a tenant; a key that
// already has the tenant's namespace is kept as it is. GET
// /v1/tasks/{id} reads a tenant's key with it.
func TaskID(tenant, key string) string {
	if tenant == "" {
		return key
	}
	ns := TenantNamespace(tenant)
	if len(key) >= len(ns) && key[:len(ns)] == ns {
		return key
	}
	return ns + key
}

// prepared is an item after Check's steps.
type prepared struct {
	task     *asynq.Task
	id       string // the ID where the payload has no key: the tenant's namespace and a random ID
	send     facts
	maxRetry int // the task's asynq MaxRetry
}

// Check runs Send's first three steps on items, without Redis:
//
//   - validate: the payload decodes under the tasks package's rules
//     (tasks.Decode…: a Sluice task type, every field valid);
//   - namespace: a key that poses as a tenant's namespace is refused, and
//     the key of a send with a tenant gets its tenant's namespace
//     (TenantNamespace), within tasks.MaxIdempotencyKey in all;
//   - check: the task type's channel is enabled (one of
//     Options.Channels), the payload fits the channel's MaxPayloadBytes,
//     and a webhook's or HTTP call's target passes Options.Egress
//     (CheckTarget).
//
// Each refused item's Err wraps ErrInvalid; the others have their Task
// (with the namespaced key) and no Err. A Client without Redis can Check.
func (c *Client) Check(items []Item) []Result {
	out := make([]Result, len(items))
	c.check(items, out)
	return out
}

func (c *Client) check(items []Item, out []Result) []prepared {
	ps := make([]prepared, len(items))
	for i, it := range items {
		p, err := c.prepare(it)
		if err != nil {
			out[i].Err = invalid(err)
			continue
		}
		ps[i], out[i].Task = p, p.task
	}
	return ps
}

// prepare validates, namespaces and checks one item.
func (c *Client) prepare(it Item) (prepared, error) {
	if it.Task == nil {
		return prepared{}, errors.New("task: required")
	}
	typ := it.Task.Type()
	if _, known := tasks.FieldNames(typ); !known {
		return prepared{}, fmt.Errorf("type: %q is not a send Sluice makes (whatsapp:send, sms:send, webhook:deliver, http:call)", typ)
	}
	f, err := payloadFacts(it.Task)
	if err != nil {
		return prepared{}, err
	}
	// namespace
	if HasNamespace(f.key) {
		return prepared{}, errors.New(`idempotency_key: may not start with "t-" and 16 hex digits and ':', which Sluice reserves for tenants' keys`)
	}
	var id string
	key := f.key
	if f.tenant != "" {
		ns := TenantNamespace(f.tenant)
		if len(key) > tasks.MaxIdempotencyKey-len(ns) {
			return prepared{}, fmt.Errorf("idempotency_key: %d characters, want at most %d for a send with a tenant (Sluice puts the tenant's %d-character namespace before it)",
				len(key), tasks.MaxIdempotencyKey-len(ns), len(ns))
		}
		if key != "" {
			key = ns + key
		} else {
			id = ns + randomID()
		}
	}
	maxRetry := it.MaxRetry
	if maxRetry == 0 {
		maxRetry = c.maxRetry
	}
	var opts []asynq.Option
	if maxRetry > 0 {
		opts = append(opts, asynq.MaxRetry(maxRetry))
	}
	t, err := build(f.payload, key, opts)
	if err != nil {
		return prepared{}, err
	}
	// check
	if err := c.enabled(typ); err != nil {
		return prepared{}, err
	}
	ch := c.chans[typ]
	if ch.maxPayload > 0 && len(t.Payload()) > ch.maxPayload {
		return prepared{}, fmt.Errorf("payload: %d bytes encoded, over channels.%s.max_payload_bytes (%d)", len(t.Payload()), ch.name, ch.maxPayload)
	}
	// the checks read the payload as built (normalized: a webhook's URL trimmed)
	built, err := decodePayload(t)
	if err != nil {
		return prepared{}, err
	}
	if err := c.checkEndpoint(built); err != nil {
		return prepared{}, err
	}
	if err := c.checkTemplate(built); err != nil {
		return prepared{}, err
	}
	if target := targetOf(built); target != "" {
		if err := CheckTarget(c.egress, "url", target); err != nil {
			return prepared{}, err
		}
	}
	f.key = key
	if maxRetry <= 0 {
		maxRetry = tasks.DefaultMaxRetry // the constructors'
	}
	return prepared{task: t, id: id, send: f, maxRetry: maxRetry}, nil
}

// build builds the task again from its decoded payload (facts.payload),
// with key as its idempotency key and opts: the tasks package's
// constructor normalizes and validates it in full.
func build(p any, key string, opts []asynq.Option) (*asynq.Task, error) {
	switch p := p.(type) {
	case tasks.WhatsAppSend:
		p.IdempotencyKey = key
		return tasks.NewWhatsAppSendTask(p, opts...)
	case tasks.SMSSend:
		p.IdempotencyKey = key
		return tasks.NewSMSSendTask(p, opts...)
	case tasks.WebhookDeliver:
		p.IdempotencyKey = key
		return tasks.NewWebhookDeliverTask(p, opts...)
	case tasks.HTTPCall:
		p.IdempotencyKey = key
		return tasks.NewHTTPCallTask(p, opts...)
	}
	return nil, fmt.Errorf("payload: %T is not a send Sluice makes", p)
}

// targetOf is the URL a webhook or HTTP call goes to (p a decoded
// payload); "" for the other types.
func targetOf(p any) string {
	switch p := p.(type) {
	case tasks.WebhookDeliver:
		return p.URL
	case tasks.HTTPCall:
		return p.URL
	}
	return ""
}

// checkEndpoint holds a webhook to Options.WebhookEndpoints, when it lists
// any: a listed endpoint, to a URL under its prefixes, or none, to a URL
// under no endpoint's.
func (c *Client) checkEndpoint(payload any) error {
	p, ok := payload.(tasks.WebhookDeliver)
	if len(c.endpoints) == 0 || !ok {
		return nil
	}
	// (the error shows neither the name, which may hold a URL's token, nor
	// the URL, nor the configured names, which a tenant's key need not learn)
	err := c.endpoints.Check(p.Endpoint, p.URL)
	var nc *tasks.NotCanonicalError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &nc):
		return fmt.Errorf("url: while channels.webhook.endpoints are listed, must be in canonical form (one spelling a URL, docs/webhooks.md): %v", nc.Reason)
	case errors.Is(err, tasks.ErrUnknownEndpoint):
		return errors.New("endpoint: not one of channels.webhook.endpoints, which have signing secrets; name one of them, or none for the default secret")
	case p.Endpoint == "":
		return errors.New("url: under the urls of one of channels.webhook.endpoints, whose receiver verifies that endpoint's secret only; name the endpoint")
	default:
		return errors.New("url: not under the urls of the endpoint named (channels.webhook.endpoints.<name>.urls); its secret signs for those only")
	}
}

// checkTemplate holds a WhatsApp template send to its template's shape,
// when Options.WhatsAppTemplates lists it.
func (c *Client) checkTemplate(payload any) error {
	p, ok := payload.(tasks.WhatsAppSend)
	if len(c.templates) == 0 || !ok || p.Template == nil {
		return nil
	}
	shape, ok := c.templates[p.Template.Name]
	if !ok {
		return nil
	}
	return shape.Check(p.Template)
}

// CheckChannel returns the error Send gives each send on the channel name
// (one of tasks.Channels) when the Client has it disabled (no channel of
// its task type among Options.Channels): "channel: sms is disabled in this
// configuration (channels.sms.enabled)", wrapping ErrInvalid. A name the
// tasks package does not know is an error too; nil for an enabled channel.
// A caller with many sends on one channel (`sluice send`) asks once, before
// it reads them.
func (c *Client) CheckChannel(name string) error {
	typ, ok := tasks.ChannelTaskType(name)
	if !ok {
		return invalid(fmt.Errorf("channel: %q: want one of %s", name, strings.Join(tasks.Channels(), ", ")))
	}
	if err := c.enabled(typ); err != nil {
		return invalid(err)
	}
	return nil
}

// enabled refuses a send of task type typ when no channel of the Client
// has it.
func (c *Client) enabled(typ string) error {
	if c.chans[typ] == nil {
		name := channelName(typ)
		return fmt.Errorf("channel: %s is disabled in this configuration (channels.%s.enabled)", name, name)
	}
	return nil
}

// channelName is the channel (tasks.Channels) whose sends are of type
// typ, else typ.
func channelName(typ string) string {
	for _, name := range tasks.Channels() {
		if t, ok := tasks.ChannelTaskType(name); ok && t == typ {
			return name
		}
	}
	return typ
}

// Send runs items through the producer's path, in order, and returns each
// item's Result:
//
//  1. validate, 2. namespace, 3. check: as Check (a refused item's Err
//     wraps ErrInvalid);
//  4. claim: the ID's claim (ClaimKey), the one record of an
//     idempotency key's use across channels (tasks.ErrKeyInUse);
//  5. plan: bulk sends take their place on their channel's limits
//     (throttle.Redis.Plan, one call per channel);
//  6. enqueue: asynq, in the channel's queue, scheduled for the planned
//     second (a repeat of an ID in its queue is tasks.ErrDuplicate); on a
//     channel with BatchSends, the sends of one sender planned for the same
//     second go in one batch task (batch.go), each reported as its own;
//  7. count: the new tasks of each tenant's campaign (Options.Count).
//
// Steps 4 to 6 are Enqueue's, run once for the sends to go now and once
// for each instant sends are held to (tasks.Delivery.SendAt: scheduled for
// it, planned when they come due). The error is a failed claim or plan
// (Redis, or a Client without Redis): the results are nil, and nothing
// was enqueued, unless the items were held to several instants and the
// failure came after the first: those enqueued before it stay (a retry
// with the same idempotency keys finds them, tasks.ErrDuplicate). An error wrapping ErrNotCounted comes with the results: the tasks
// were enqueued, Options.Count failed for some.
func (c *Client) Send(ctx context.Context, items []Item) ([]Result, error) {
	if c.client == nil {
		return nil, errors.New("producer: Send: the Client has no Redis (Options.Redis, Options.Limiter); it can only Check")
	}
	out := make([]Result, len(items))
	ps := c.check(items, out)
	// The sends held until a later instant (tasks.Delivery.SendAt) go as
	// tasks scheduled for it, one enqueue call per instant: they are not
	// planned now, but when they are first dequeued, among the sends of
	// then (enqueue: a caller's own schedule is not planned). The others
	// are planned now.
	type batch struct {
		at      time.Time // zero: now
		ts      []*asynq.Task
		ids     []string
		retries []int
		idx     []int
	}
	var batches []*batch
	byAt := map[time.Time]*batch{}
	now := time.Now()
	for i := range items {
		if out[i].Err != nil {
			continue
		}
		at := ps[i].send.sendAt
		if !at.After(now) {
			at = time.Time{}
		}
		at = at.UTC()
		b := byAt[at]
		if b == nil {
			b = &batch{at: at}
			byAt[at] = b
			batches = append(batches, b)
		}
		b.ts, b.ids, b.idx = append(b.ts, ps[i].task), append(b.ids, ps[i].id), append(b.idx, i)
		b.retries = append(b.retries, ps[i].maxRetry)
	}
	type group struct{ tenant, campaign string }
	fresh := map[group]int{}
	var order []group
	for _, b := range batches {
		var opts []asynq.Option
		if !b.at.IsZero() {
			opts = []asynq.Option{asynq.ProcessAt(b.at)}
		}
		res, err := c.enqueue(ctx, b.ts, b.ids, opts, b.retries)
		if err != nil {
			return nil, err
		}
		for j, r := range res {
			i := b.idx[j]
			if !b.at.IsZero() && r.ETA.Before(b.at) {
				r.ETA = b.at // (at the earliest: it is planned then)
			}
			out[i].ID, out[i].Info, out[i].ETA, out[i].Keys, out[i].Err = r.ID, r.Info, r.ETA, r.Keys, r.Err
			if f := ps[i].send; r.Err == nil && f.campaign != "" {
				g := group{f.tenant, f.campaign}
				if fresh[g] == 0 {
					order = append(order, g)
				}
				fresh[g]++
			}
		}
	}
	if c.count == nil {
		return out, nil
	}
	// The tasks are enqueued: count them even if the caller has gone, or
	// its retry (a duplicate, never counted) would leave the campaign's
	// progress short.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var errs []error
	for _, g := range order {
		if err := c.count(cctx, g.tenant, g.campaign, fresh[g]); err != nil {
			errs = append(errs, fmt.Errorf("campaign %q: %w", g.campaign, err))
		}
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("%w: %w", ErrNotCounted, errors.Join(errs...))
	}
	return out, nil
}
