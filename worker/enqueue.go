package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
)

// Enqueuer enqueues Sluice's tasks (whatsapp:send, sms:send,
// webhook:deliver, http:call) with their slots planned at enqueue: each
// bulk send takes its place behind the sends already planned on its
// channel's GCRA limits (throttle.Redis.Plan, one call per 256 sends) and is
// scheduled for the whole second of that place, so a worker dequeues it
// once and holds it until its slot. High-priority sends, sends with nothing
// to pace and other task types are enqueued to run now; the worker reserves
// their slots when it dequeues them.
type Enqueuer struct {
	client  *asynq.Client
	limiter *throttle.Redis
	chans   map[string]*enqueueChannel // by task type
}

type enqueueChannel struct {
	ch    Channel
	rules *rules.Set
}

// Enqueued is the outcome of one task of Enqueuer.Enqueue.
type Enqueued struct {
	// Info is asynq's record of the new task; nil when Err is set.
	Info *asynq.TaskInfo
	// ID is the task ID: an asynq.TaskID among Enqueue's opts (one task),
	// else the payload's idempotency_key, else a random one (the plan needs
	// it before the enqueue, so a TaskID set in asynq.NewTask's own options
	// is not seen: pass it to Enqueue).
	ID string
	// ETA is when the send is expected to go: its planned slot, or the time
	// of the call when it runs now. Past sends planned earlier keep theirs.
	ETA time.Time
	// Err is this task's error: a payload that does not decode, or the
	// enqueue's (tasks.ErrDuplicate wrapping asynq.ErrTaskIDConflict when the
	// ID is taken: the task exists and is not enqueued twice).
	Err error
}

// NewEnqueuer plans with limiter using chans' Rules, Headroom and
// TenantWeights (the same values the workers use; Name and TaskType are
// required, Prepare is not used). Channels whose TaskType the tasks package does not know are
// enqueued to run now.
func NewEnqueuer(client *asynq.Client, limiter *throttle.Redis, chans []Channel) (*Enqueuer, error) {
	e := &Enqueuer{client: client, limiter: limiter, chans: map[string]*enqueueChannel{}}
	for i, ch := range chans {
		fields, known := tasks.FieldNames(ch.TaskType)
		if !known {
			continue
		}
		set, err := rules.Compile(ch.Name, fields, ch.Rules)
		if err == nil {
			err = ch.checkWeights()
		}
		if err != nil {
			return nil, fmt.Errorf("worker: enqueuer: channels[%d]: %w", i, err)
		}
		e.chans[ch.TaskType] = &enqueueChannel{ch: ch, rules: set}
	}
	return e, nil
}

// ClaimTTL is how long an idempotency key stays claimed for its task type
// (ErrKeyInUse): asynq's retention of completed tasks (24h) and an hour.
const ClaimTTL = tasks.DefaultRetention + time.Hour

// ClaimKey is the Redis key of an ID's claim: "<prefix>:_idem:<id>", with
// the limiter's prefix (redis.key_prefix, "sluice"); a string, the task
// type. The leading '_' keeps it out of the limiter's key listings, and it
// has no hash tag, so claims spread over Redis Cluster's slots.
func ClaimKey(prefix, id string) string { return prefix + ":_idem:" + id }

// Enqueue plans and enqueues ts, in order; opts apply to every task (after
// the task's own options), a MaxRetry below 1 among them raised to 1
// (tasks.MinMaxRetry). With asynq.ProcessAt or ProcessIn among opts the
// caller's schedule is kept and nothing is planned now. The error is for a
// failed plan or claim (Redis): then nothing is enqueued and no place is
// kept. Each task's own outcome is in its Enqueued; a task whose enqueue
// fails gives its new place back.
//
// A task with a chosen ID (an idempotency key, or the one asynq.TaskID
// among opts gives) claims it for its task type for ClaimTTL
// (ClaimKey): the same ID on another type is refused
// with tasks.ErrKeyInUse, in every queue.
func (e *Enqueuer) Enqueue(ctx context.Context, ts []*asynq.Task, opts ...asynq.Option) ([]Enqueued, error) {
	out := make([]Enqueued, len(ts))
	type pending struct {
		i      int
		reqs   []throttle.Request
		tenant string
	}
	groups := map[*enqueueChannel][]pending{}
	var order []*enqueueChannel
	now := time.Now()
	// A caller's own schedule (ProcessAt, ProcessIn) wins: such tasks are
	// not planned now; they take their place when they are first dequeued.
	scheduled, optID := false, ""
	for _, o := range opts {
		switch o.Type() {
		case asynq.ProcessAtOpt, asynq.ProcessInOpt:
			scheduled = true
		case asynq.TaskIDOpt:
			optID, _ = o.Value().(string)
		}
	}
	var claims []int // tasks with a chosen ID
	fs := make([]facts, len(ts))
	for i, t := range ts {
		out[i].ETA = now
		f, err := payloadFacts(t)
		if err != nil {
			out[i].Err = err
			continue
		}
		fs[i] = f
		chosen := true
		switch {
		case optID != "" && len(ts) == 1:
			out[i].ID = optID
		case f.key != "":
			out[i].ID = f.key
		default:
			out[i].ID, chosen = randomID(), false
		}
		if chosen {
			claims = append(claims, i)
		}
	}
	if err := e.claim(ctx, ts, claims, out); err != nil {
		return nil, err
	}
	for i, t := range ts {
		if out[i].Err != nil {
			continue
		}
		ch, f := e.chans[t.Type()], fs[i]
		if ch == nil || f.high || scheduled {
			continue
		}
		reqs := ch.rules.Requests(f.fields)
		if !throttle.Reservable(reqs) {
			continue
		}
		if _, ok := groups[ch]; !ok {
			order = append(order, ch)
		}
		groups[ch] = append(groups[ch], pending{i, reqs, f.tenant})
	}
	planned := make([]bool, len(ts))
	var plans []throttle.Planned
	for _, ch := range order {
		g := groups[ch]
		sends := make([]throttle.Send, len(g))
		for k, p := range g {
			sends[k] = throttle.Send{TaskID: out[p.i].ID, Tenant: p.tenant, Weight: ch.ch.weight(p.tenant), Requests: p.reqs}
		}
		ps, err := e.limiter.Plan(ctx, throttle.ReserveOptions{Headroom: ch.ch.headroom()}, sends)
		if err != nil {
			// Nothing was enqueued: give back the places already taken.
			for i, t := range ts {
				if planned[i] {
					e.release(ctx, t, out[i].ID)
				}
			}
			return nil, err
		}
		plans = append(plans[:0], ps...)
		for k, p := range g {
			out[p.i].ETA = plans[k].At
			planned[p.i] = plans[k].New
		}
	}
	for i, t := range ts {
		if out[i].Err != nil {
			continue
		}
		o := append(tasks.FloorMaxRetry(opts), asynq.TaskID(out[i].ID))
		if due := out[i].ETA.Truncate(time.Second); due.After(time.Now()) && !scheduled {
			o = append(o, asynq.ProcessAt(due))
		}
		out[i].Info, out[i].Err = e.client.EnqueueContext(ctx, t, o...)
		if out[i].Err == nil {
			continue
		}
		if errors.Is(out[i].Err, asynq.ErrTaskIDConflict) || errors.Is(out[i].Err, asynq.ErrDuplicateTask) {
			out[i].Err = fmt.Errorf("enqueue %s (id %q): %w: %w", t.Type(), out[i].ID, tasks.ErrDuplicate, out[i].Err)
		}
		if planned[i] {
			e.release(ctx, t, out[i].ID)
		}
	}
	return out, nil
}

// claim claims the IDs of ts[idx] for their task types (one pipeline, and
// one more for the IDs already claimed) and sets tasks.ErrKeyInUse on the
// tasks whose ID another type holds. The error is Redis's.
func (e *Enqueuer) claim(ctx context.Context, ts []*asynq.Task, idx []int, out []Enqueued) error {
	if len(idx) == 0 {
		return nil
	}
	rdb := e.limiter.Client()
	key := func(id string) string { return ClaimKey(e.limiter.Prefix(), id) }
	set := make([]*redis.BoolCmd, len(idx))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, i := range idx {
			set[k] = p.SetNX(ctx, key(out[i].ID), ts[i].Type(), ClaimTTL)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("worker: enqueue: claim idempotency keys: %w", err)
	}
	var held []int
	for k, i := range idx {
		if !set[k].Val() {
			held = append(held, i)
		}
	}
	if len(held) == 0 {
		return nil
	}
	get := make([]*redis.StringCmd, len(held))
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, i := range held {
			get[k] = p.Get(ctx, key(out[i].ID))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("worker: enqueue: read idempotency key claims: %w", err)
	}
	for k, i := range held {
		// A claim that expired between the two calls (redis.Nil) is no
		// conflict: asynq's own ID check still applies.
		if typ := get[k].Val(); typ != "" && typ != ts[i].Type() {
			out[i].Err = fmt.Errorf("enqueue %s (id %q): %w (a %s task)", ts[i].Type(), out[i].ID, tasks.ErrKeyInUse, typ)
		}
	}
	return nil
}

// release gives back the new place of a task whose enqueue failed. A place
// not given back only delays later sends by one slot.
func (e *Enqueuer) release(ctx context.Context, t *asynq.Task, id string) {
	ch := e.chans[t.Type()]
	f, err := payloadFacts(t)
	if ch == nil || err != nil {
		return
	}
	_, _ = e.limiter.ReleasePlanned(context.WithoutCancel(ctx), throttle.Send{TaskID: id, Tenant: f.tenant,
		Weight: ch.ch.weight(f.tenant), Requests: ch.rules.Requests(f.fields)})
}

// facts is what planning needs from a payload.
type facts struct {
	fields map[string]string
	high   bool
	key    string // idempotency key
	tenant string
}

// payloadFacts decodes a task of a type the tasks package knows; other
// types have no facts (and no error).
func payloadFacts(t *asynq.Task) (facts, error) {
	switch t.Type() {
	case tasks.TypeWhatsAppSend:
		p, err := tasks.DecodeWhatsAppSend(t.Payload())
		return facts{p.Fields(), p.High(), p.IdempotencyKey, p.Tenant}, err
	case tasks.TypeSMSSend:
		p, err := tasks.DecodeSMSSend(t.Payload())
		return facts{p.Fields(), p.High(), p.IdempotencyKey, p.Tenant}, err
	case tasks.TypeWebhookDeliver:
		p, err := tasks.DecodeWebhookDeliver(t.Payload())
		return facts{p.Fields(), p.High(), p.IdempotencyKey, p.Tenant}, err
	case tasks.TypeHTTPCall:
		p, err := tasks.DecodeHTTPCall(t.Payload())
		return facts{p.Fields(), p.High(), p.IdempotencyKey, p.Tenant}, err
	}
	return facts{}, nil
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
