package producer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

// Options configure a Client.
type Options struct {
	// Redis is the server asynq's tasks go to; the Limiter's server. Nil
	// with Limiter nil: a Client that can only Check (a dry run, or a
	// look before Redis is reached).
	Redis redis.UniversalClient
	// Limiter plans the sends (throttle.Redis.Plan) and keeps the claims
	// on idempotency keys (ClaimKey, under its Prefix); set with Redis.
	Limiter *throttle.Redis
	// Channels are the enabled channels as their workers run them: Name
	// and TaskType (required), Queue, Rules, PauseScopes, Headroom,
	// TenantWeights and MaxPayloadBytes (0: tasks.MaxPayloadBytes) are
	// read; Prepare is not. Send refuses a send of a task type no channel
	// has (a disabled channel); Enqueue enqueues any task, one of a type
	// no channel has to run now in its type's default queue.
	Channels []worker.Channel
	// Egress is the policy Send holds webhook and HTTP-call targets to
	// (CheckTarget); the workers' dialers check each address again at
	// send. Zero: public addresses only, names looked up with
	// net.DefaultResolver.
	Egress channels.Egress
	// MaxRetry is each task's retry budget (asynq's MaxRetry: provider
	// throttles and transient failures; Sluice's own limits never spend
	// one) where an Item gives none. Zero: tasks.DefaultMaxRetry.
	MaxRetry int
	// Count is told, after each Send, how many new tasks (repeats of an
	// idempotency key are not new) each tenant's campaign got
	// (delivery.Store.AddEnqueued), so that a campaign's progress knows
	// its size. Nil: not counted.
	Count func(ctx context.Context, tenant, campaign string, n int) error
	// WebhookEndpoints are channels.webhook.endpoints, the endpoints with
	// signing secrets of their own, each bound to its URL prefixes.
	// Non-empty: Send refuses a webhook that names another endpoint, or
	// names one to a URL not under its prefixes, or names none to a URL
	// under one's (tasks.WebhookEndpoints.Check; the worker would archive it,
	// having no secret to sign it with); one that names none is signed
	// with the default secret. Empty: any endpoint name is taken.
	WebhookEndpoints tasks.WebhookEndpoints
	// WhatsAppTemplates are the approved templates' shapes
	// (channels.whatsapp.templates): Send refuses a send of a listed
	// template that does not fit its shape (tasks.TemplateShape.Check).
	// Templates not listed are not checked.
	WhatsAppTemplates map[string]tasks.TemplateShape
	// ClaimRetention is how long past its planned slot an enqueued task's
	// claim on its idempotency key is kept, refusing the key on the other
	// channels. Zero: DefaultClaimRetention.
	ClaimRetention time.Duration
}

// Client enqueues Sluice's sends (whatsapp:send, sms:send,
// webhook:deliver, http:call): Send runs the whole path for every caller
// (the HTTP API, `sluice send`, `sluice enqueue`); Enqueue is its last
// part for tasks already built and checked. It is safe for concurrent use.
type Client struct {
	client    *asynq.Client
	limiter   *throttle.Redis
	chans     map[string]*channel // by task type
	egress    channels.Egress
	maxRetry  int
	count     func(ctx context.Context, tenant, campaign string, n int) error
	retention time.Duration
	endpoints tasks.WebhookEndpoints // Options.WebhookEndpoints
	templates map[string]tasks.TemplateShape
}

// channel is an enabled channel as the Client plans and checks its sends.
type channel struct {
	name       string
	pacing     *worker.Pacing
	maxPayload int  // 0: the task type's own cap, which the tasks package checks
	batch      bool // worker.Channel.BatchSends: Send carries a second's sends in batch tasks
}

// New returns a Client with opts; it does not reach Redis. The error names
// the field: Redis without Limiter or the other way round, a channel whose rules, pause scopes or tenant weights
// do not compile (worker.NewPacing), two channels of one task type.
func New(opts Options) (*Client, error) {
	switch {
	case opts.Redis == nil && opts.Limiter != nil:
		return nil, errors.New("producer: Options.Redis: required with a Limiter")
	case opts.Limiter == nil && opts.Redis != nil:
		return nil, errors.New("producer: Options.Limiter: required with Redis")
	case opts.MaxRetry < 0:
		return nil, fmt.Errorf("producer: Options.MaxRetry: %d, want 0 (the default) or more", opts.MaxRetry)
	case opts.ClaimRetention < 0:
		return nil, fmt.Errorf("producer: Options.ClaimRetention: %v, want 0 (the default) or more", opts.ClaimRetention)
	}
	c := &Client{limiter: opts.Limiter, chans: map[string]*channel{},
		egress: opts.Egress, maxRetry: opts.MaxRetry, count: opts.Count, retention: opts.ClaimRetention}
	if opts.Redis != nil {
		c.client = asynq.NewClientFromRedisClient(opts.Redis)
	}
	if c.retention == 0 {
		c.retention = DefaultClaimRetention
	}
	c.endpoints = maps.Clone(opts.WebhookEndpoints)
	c.templates = opts.WhatsAppTemplates
	for i, ch := range opts.Channels {
		p, err := worker.NewPacing(ch)
		if err != nil {
			return nil, fmt.Errorf("producer: Options.Channels[%d]: %w", i, err)
		}
		if _, dup := c.chans[ch.TaskType]; dup {
			return nil, fmt.Errorf("producer: Options.Channels[%d]: a second channel for %s", i, ch.TaskType)
		}
		c.chans[ch.TaskType] = &channel{name: ch.Name, pacing: p, maxPayload: ch.MaxPayloadBytes, batch: ch.BatchSends}
	}
	return c, nil
}

// Enqueued is the outcome of one task of Client.Enqueue.
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
	// Keys are the limiter keys (without prefix) of the GCRA limits the
	// send was planned on, where its place is kept (throttle.Redis.Backlog);
	// none when it was not planned (it runs now, or at its ProcessAt).
	Keys []string
	// Err is this task's error: a payload that does not decode,
	// tasks.ErrKeyInUse when a task of another type holds its ID, or the
	// enqueue's (tasks.ErrDuplicate wrapping asynq.ErrTaskIDConflict when
	// the ID is taken in its queue: the task exists and is not enqueued
	// twice).
	Err error
}

// Enqueue claims, plans and enqueues ts, in order; opts apply to every task
// (after the task's own options), a MaxRetry below 1 among them raised to 1
// (tasks.MinMaxRetry). It checks nothing: Send is the path for sends built
// from a caller's input. With asynq.ProcessAt or ProcessIn among opts the
// caller's schedule is kept and nothing is planned now. The error is for a
// failed plan or claim (Redis): then nothing is enqueued and no place is
// kept. Each task's own outcome is in its Enqueued; a task whose enqueue
// fails gives its new place back.
//
// Bulk sends on a channel's limits are planned (throttle.Redis.Plan, one
// call per channel) with the channel's pacing (worker.Pacing: its rules,
// pause scopes, tenant weights and headroom, or the wider headroom busy
// workers published) and scheduled for the whole second of their place, so
// a worker dequeues each once and holds it until its slot. High-priority
// sends, sends with nothing to pace and other task types are enqueued to
// run now; the worker reserves their slots when it dequeues them.
//
// Each task goes to its channel's queue, which the workers serve, whatever
// queue its own options named, unless opts has an asynq.Queue: to the queue
// group of its sender where the channel has queue groups
// (worker.Channel.QueueGroups, tasks.GroupQueue).
//
// One ID is one send across channels, but asynq keeps task IDs unique only
// within a queue. The claim (ClaimKey) is the one record of a chosen ID's
// use (an idempotency key, or the one asynq.TaskID among opts gives): taken
// here before the enqueue (for ClaimTTL) and kept, once the task is
// enqueued, until ClaimRetention past its slot. A task whose ID a task of
// another type claims is refused with tasks.ErrKeyInUse; a repeat of the
// same type is asynq's to answer (tasks.ErrDuplicate). A claim whose task
// is not enqueued is given back. Tasks enqueued without a Client
// (tasks.Enqueue…, a plain asynq client) take no claim and are not seen,
// except those in a channel's queue when Backfill walks it.
func (c *Client) Enqueue(ctx context.Context, ts []*asynq.Task, opts ...asynq.Option) ([]Enqueued, error) {
	if c.client == nil {
		return nil, errors.New("producer: Enqueue: the Client has no Redis (Options.Redis, Options.Limiter)")
	}
	return c.enqueue(ctx, ts, nil, opts, nil)
}

// enqueue is Enqueue; ids[i], when ids is not nil and it is not "", is
// task i's ID where it has no chosen one (instead of a random one).
// maxRetry[i], when maxRetry is not nil, is task i's asynq MaxRetry (its
// own options hold it, which asynq does not show): with it, tasks of a
// channel with BatchSends may go in batch tasks (batch.go).
func (c *Client) enqueue(ctx context.Context, ts []*asynq.Task, ids []string, opts []asynq.Option, maxRetry []int) ([]Enqueued, error) {
	out := make([]Enqueued, len(ts))
	type pending struct {
		i      int
		reqs   []throttle.Request
		tenant string
	}
	groups := map[*channel][]pending{}
	var order []*channel
	now := time.Now()
	// A caller's own schedule (ProcessAt, ProcessIn) wins: such tasks are
	// not planned now; they take their place when they are first dequeued.
	scheduled, optID, optQueue := false, "", ""
	for _, o := range opts {
		switch o.Type() {
		case asynq.ProcessAtOpt, asynq.ProcessInOpt:
			scheduled = true
		case asynq.TaskIDOpt:
			optID, _ = o.Value().(string)
		case asynq.QueueOpt:
			optQueue, _ = o.Value().(string)
		}
	}
	var keyed []int // tasks with a chosen ID
	fs := make([]facts, len(ts))
	queues := make([]string, len(ts))
	for i, t := range ts {
		out[i].ETA = now
		f, err := payloadFacts(t)
		switch ch := c.chans[t.Type()]; {
		case optQueue != "":
			queues[i] = optQueue
		case ch != nil:
			queues[i] = ch.pacing.QueueFor(f.fields) // its sender's group, where the channel has groups
		default:
			queues[i] = tasks.DefaultQueue(t.Type())
		}
		if err != nil {
			out[i].Err = err
			continue
		}
		fs[i] = f
		switch {
		case optID != "" && len(ts) == 1:
			out[i].ID = optID
		case f.key != "":
			out[i].ID = f.key
		case ids != nil && ids[i] != "":
			out[i].ID = ids[i]
			continue
		default:
			out[i].ID = randomID()
			continue
		}
		keyed = append(keyed, i)
	}
	claimed, err := c.claim(ctx, ts, keyed, out)
	if err != nil {
		return nil, err
	}
	if optQueue == "" {
		c.repeatQueues(ts, claimed.repeats, queues, out)
	}
	// The claims set here are given back for every task not enqueued; the
	// enqueued tasks' claims are kept first (keep), so those stay.
	defer c.unclaim(ctx, out, claimed)
	for i, t := range ts {
		if out[i].Err != nil {
			continue
		}
		ch, f := c.chans[t.Type()], fs[i]
		if ch == nil || f.high || scheduled {
			continue
		}
		reqs := ch.pacing.Requests(f.fields)
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
	wider := c.publishedHeadroom(ctx, order)
	for _, ch := range order {
		g := groups[ch]
		sends := make([]throttle.Send, len(g))
		for k, p := range g {
			sends[k] = throttle.Send{TaskID: out[p.i].ID, Tenant: p.tenant, Weight: ch.pacing.Weight(p.tenant), Requests: p.reqs}
		}
		ps, err := c.limiter.Plan(ctx, throttle.ReserveOptions{Headroom: max(ch.pacing.Headroom(), wider[ch.name])}, sends)
		if err != nil {
			// Nothing was enqueued: give back the places already taken,
			// this channel's earlier batches' too (ps holds them).
			for k, p := range g {
				if k < len(ps) && ps[k].New {
					planned[p.i] = true
				}
			}
			for i, t := range ts {
				if planned[i] {
					c.release(ctx, t, out[i].ID)
				}
			}
			return nil, err
		}
		plans = append(plans[:0], ps...)
		for k, p := range g {
			out[p.i].ETA = plans[k].At
			planned[p.i] = plans[k].New
			for _, r := range p.reqs {
				if r.Limit.Algorithm == throttle.GCRA {
					out[p.i].Keys = append(out[p.i].Keys, r.Key)
				}
			}
		}
	}
	// Send's path (each task's MaxRetry known, no caller options) may
	// carry sends in batch tasks, which keep their claims themselves.
	send := maxRetry != nil && len(opts) == 0
	if send {
		c.enqueueBatches(ctx, ts, queues, planned, claimed, maxRetry, out)
	}
	held := make([]bool, len(ts)) // enqueued now as its own task: its claim is kept
	for i, t := range ts {
		if out[i].Err != nil || out[i].Info != nil { // refused, or carried by a batch
			continue
		}
		if ch := c.chans[t.Type()]; send && ch != nil && ch.batch && len(out[i].Keys) > 0 && !planned[i] {
			// Its ID holds a place already: a task has it, or a batch task
			// (whose ID is not the send's, so asynq would take this one).
			out[i].Err = fmt.Errorf("enqueue %s (id %q): %w: its ID holds a planned place already", t.Type(), out[i].ID, tasks.ErrDuplicate)
			continue
		}
		o := append(tasks.FloorMaxRetry(opts), asynq.TaskID(out[i].ID))
		if optQueue == "" && c.chans[t.Type()] != nil {
			o = append(o, asynq.Queue(queues[i])) // the channel's queue, which its workers serve
		}
		if due := out[i].ETA.Truncate(time.Second); due.After(time.Now()) && !scheduled {
			o = append(o, asynq.ProcessAt(due))
		}
		out[i].Info, out[i].Err = c.client.EnqueueContext(ctx, t, o...)
		if out[i].Err == nil {
			held[i] = true
			continue
		}
		if errors.Is(out[i].Err, asynq.ErrTaskIDConflict) || errors.Is(out[i].Err, asynq.ErrDuplicateTask) {
			out[i].Err = fmt.Errorf("enqueue %s (id %q): %w: %w", t.Type(), out[i].ID, tasks.ErrDuplicate, out[i].Err)
		}
		if planned[i] {
			c.release(ctx, t, out[i].ID)
		}
	}
	c.keep(ctx, ts, keyed, held, out, claimed)
	return out, nil
}

// claim takes the claims of the chosen IDs of ts[idx]: a free key by SET
// NX in one pipeline (what claimScript does for one), the keys found taken
// by claimScript in a second. A task whose ID a task of another type claims gets
// tasks.ErrKeyInUse. It returns the claims it set, to give back (unclaim)
// for the tasks that are not enqueued. The error is Redis's; then no claim
// is kept.
func (c *Client) claim(ctx context.Context, ts []*asynq.Task, idx []int, out []Enqueued) (claims, error) {
	if len(idx) == 0 {
		return claims{}, nil
	}
	cl := claims{token: randomID(), held: map[int]string{}}
	rdb := c.limiter.Client()
	// A free key, the common case, is claimed by SET NX (as claimScript
	// claims one); claimScript reads the keys that are taken.
	sets := make([]*redis.BoolCmd, len(idx))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, i := range idx {
			sets[k] = p.SetNX(ctx, ClaimKey(c.limiter.Prefix(), out[i].ID), claimValue(ts[i].Type(), cl.token), ClaimTTL)
		}
		return nil
	})
	holders := make([]string, len(idx))
	var taken []int // positions in idx
	for k, i := range idx {
		if set, serr := sets[k].Result(); serr == nil && set {
			cl.held[i] = claimValue(ts[i].Type(), cl.token)
		} else if serr == nil {
			taken = append(taken, k)
		}
	}
	if err == nil && len(taken) > 0 {
		var cmds []*redis.Cmd
		cmds, err = evalPipelined(ctx, rdb, claimScript, len(taken), func(j int) ([]string, []any) {
			i := idx[taken[j]]
			return []string{ClaimKey(c.limiter.Prefix(), out[i].ID)}, []any{ts[i].Type(), cl.token, ClaimTTL.Milliseconds()}
		})
		for j, k := range taken {
			holder, cerr := cmds[j].Text()
			if cerr == nil && holder == "" {
				cl.held[idx[k]] = claimValue(ts[idx[k]].Type(), cl.token)
			}
			holders[k] = holder
		}
	}
	if err != nil {
		c.unclaim(ctx, out, cl)
		return claims{}, fmt.Errorf("producer: claim idempotency keys: %w", err)
	}
	for k, i := range idx {
		switch holder := holders[k]; holder {
		case "":
		case "=":
			cl.repeats = append(cl.repeats, i)
		case batchedHolder:
			// A batch carried a send with this ID: asynq has no task of its
			// ID to answer the repeat, the claim does.
			out[i].Err = fmt.Errorf("enqueue %s (id %q): %w: a batch task carried a send with this ID", ts[i].Type(), out[i].ID, tasks.ErrDuplicate)
		default:
			out[i].Err = fmt.Errorf("enqueue %s (id %q): %w (a %s task)", ts[i].Type(), out[i].ID, tasks.ErrKeyInUse, holder)
		}
	}
	return cl, nil
}

// keep marks the claims of ts[idx] whose tasks were enqueued (held) as
// enqueued, kept until ClaimRetention past the task's slot. A claim not
// kept (Redis failed) lasts its ClaimTTL; the task itself is enqueued all
// the same.
func (c *Client) keep(ctx context.Context, ts []*asynq.Task, idx []int, held []bool, out []Enqueued, cl claims) {
	var kept []int
	for _, i := range idx {
		if held[i] {
			kept = append(kept, i)
		}
	}
	_ = c.keepClaims(context.WithoutCancel(ctx), ts, kept, out, enqueuedToken, cl)
}

// keepClaims sets the claims of ts[idx] to token, each kept until
// ClaimRetention past its task's slot; the error is Redis's (the first;
// every claim is tried). A claim cl holds (this call set it: no other
// type holds the key, and its TTL is at most ClaimTTL) is kept by a plain
// SET when that does not shorten it, in one pipeline, as keepScript would
// keep it; the others by keepScript, in another. (A claim held longer than
// ClaimTTL has expired, and another type may have taken the key: an
// Enqueue call lasts seconds. A batch whose claims were given back,
// unmarkBatched, no longer holds them.)
func (c *Client) keepClaims(ctx context.Context, ts []*asynq.Task, idx []int, out []Enqueued, token string, cl claims) error {
	if len(idx) == 0 {
		return nil
	}
	now := time.Now()
	ttl := func(i int) time.Duration {
		slot := out[i].ETA
		if out[i].Info != nil && out[i].Info.NextProcessAt.After(slot) {
			slot = out[i].Info.NextProcessAt // the caller's own schedule
		}
		return slot.Add(c.retention).Sub(now)
	}
	var plain, scripted []int
	for _, i := range idx {
		if cl.held[i] != "" && ttl(i) >= ClaimTTL {
			plain = append(plain, i)
		} else {
			scripted = append(scripted, i)
		}
	}
	rdb := c.limiter.Client()
	var err error
	if len(plain) > 0 {
		_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range plain {
				p.Set(ctx, ClaimKey(c.limiter.Prefix(), out[i].ID), claimValue(ts[i].Type(), token), ttl(i))
			}
			return nil
		})
	}
	if len(scripted) > 0 {
		_, serr := evalPipelined(ctx, rdb, keepScript, len(scripted), func(k int) ([]string, []any) {
			i := scripted[k]
			return []string{ClaimKey(c.limiter.Prefix(), out[i].ID)}, []any{ts[i].Type(), ttl(i).Milliseconds(), token}
		})
		if err == nil {
			err = serr
		}
	}
	return err
}

// claims are the claims one Enqueue call set: by task index, the value
// it set (type and token).
type claims struct {
	token string
	held  map[int]string
	// repeats are the tasks whose ID a task of their own type was enqueued
	// with (claimScript's "="): asynq answers such a repeat, but only in
	// the queue that holds the task.
	repeats []int
}

// repeatQueues points each repeat (claims.repeats) of a channel with queue
// groups at the queue that holds its ID's task, so that asynq refuses it
// there (tasks.ErrDuplicate): a repeat from another sender, or one sent
// after queue_groups was raised, falls in another queue than its first
// send, where asynq would take it. A task no queue of the channel holds
// any longer (its retention ended) leaves the repeat where it falls, as
// with one queue; a failed lookup fails the repeat (Redis's error).
func (c *Client) repeatQueues(ts []*asynq.Task, repeats []int, queues []string, out []Enqueued) {
	var insp *asynq.Inspector
	for _, i := range repeats {
		ch := c.chans[ts[i].Type()]
		if ch == nil || out[i].Err != nil {
			continue
		}
		qs := ch.pacing.Queues()
		if len(qs) == 1 {
			continue
		}
		if insp == nil {
			insp = asynq.NewInspectorFromRedisClient(c.limiter.Client())
		}
		// The queue it falls in first: most repeats are from the same sender.
		qs = append([]string{queues[i]}, slices.DeleteFunc(qs, func(q string) bool { return q == queues[i] })...)
		info, err := tasks.FindTask(insp, qs, out[i].ID)
		switch {
		case err == nil:
			queues[i] = info.Queue
		case !tasks.NoSuchTask(err):
			out[i].Err = fmt.Errorf("enqueue %s (id %q): find the task its ID was sent with: %w", ts[i].Type(), out[i].ID, err)
		}
	}
}

// unclaim gives back the claims of cl whose tasks were not enqueued (no
// Info), each only if it still holds this call's value: not one a later
// caller took over, nor one kept for an enqueued task. A duplicate's claim
// stays: a task holds its ID, and the caller that enqueued it keeps the
// claim (or, with none, it lasts its ClaimTTL).
func (c *Client) unclaim(ctx context.Context, out []Enqueued, cl claims) {
	var keys, vals []string
	for i, v := range cl.held {
		if out[i].Info == nil && !errors.Is(out[i].Err, tasks.ErrDuplicate) {
			keys, vals = append(keys, ClaimKey(c.limiter.Prefix(), out[i].ID)), append(vals, v)
		}
	}
	if len(keys) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	// One key each: claims may be in different Cluster slots.
	_, _ = evalPipelined(ctx, c.limiter.Client(), unclaimScript, len(keys), func(k int) ([]string, []any) {
		return []string{keys[k]}, []any{vals[k]}
	})
}

// release gives back the new place of a task whose enqueue failed. A place
// not given back only delays later sends by one slot.
func (c *Client) release(ctx context.Context, t *asynq.Task, id string) {
	ch := c.chans[t.Type()]
	f, err := payloadFacts(t)
	if ch == nil || err != nil {
		return
	}
	_, _ = c.limiter.ReleasePlanned(context.WithoutCancel(ctx), throttle.Send{TaskID: id, Tenant: f.tenant,
		Weight: ch.pacing.Weight(f.tenant), Requests: ch.pacing.Rules(f.fields)})
}

// facts is what planning needs from a payload.
type facts struct {
	fields   map[string]string
	high     bool
	key      string // idempotency key
	tenant   string
	campaign string
	sendAt   time.Time // tasks.Delivery.SendAt
	payload  any       // the decoded payload: tasks.WhatsAppSend, SMSSend, WebhookDeliver or HTTPCall
}

// payloadFacts decodes a task of a type the tasks package knows; other
// types have no facts (and no error).
func payloadFacts(t *asynq.Task) (facts, error) {
	p, err := decodePayload(t)
	if err != nil || p == nil {
		return facts{}, err
	}
	f := func(fields map[string]string, high bool, key string, d tasks.Delivery) facts {
		return facts{fields, high, key, d.Tenant, d.Campaign, d.SendAt, p}
	}
	switch p := p.(type) {
	case tasks.WhatsAppSend:
		return f(p.Fields(), p.High(), p.IdempotencyKey, p.Delivery), nil
	case tasks.SMSSend:
		return f(p.Fields(), p.High(), p.IdempotencyKey, p.Delivery), nil
	case tasks.WebhookDeliver:
		return f(p.Fields(), p.High(), p.IdempotencyKey, p.Delivery), nil
	case tasks.HTTPCall:
		return f(p.Fields(), p.High(), p.IdempotencyKey, p.Delivery), nil
	}
	return facts{}, nil
}

// decodePayload decodes a task of a type the tasks package knows into its
// payload value (tasks.WhatsAppSend, …); nil for other types.
func decodePayload(t *asynq.Task) (any, error) {
	b := t.Payload()
	switch t.Type() {
	case tasks.TypeWhatsAppSend:
		return decoded(tasks.DecodeWhatsAppSend(b))
	case tasks.TypeSMSSend:
		return decoded(tasks.DecodeSMSSend(b))
	case tasks.TypeWebhookDeliver:
		return decoded(tasks.DecodeWebhookDeliver(b))
	case tasks.TypeHTTPCall:
		return decoded(tasks.DecodeHTTPCall(b))
	}
	return nil, nil
}

// decoded is a Decode… result as (any, error), nil on error.
func decoded[T any](p T, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return p, nil
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// publishedHeadroom returns, by channel, the widest headroom the workers
// pace the channels of order at now (their measured margins, published
// every 2s: throttle.Redis.Margins), so that a plan is made at the pace
// its sends will be reserved at; none when no worker published one. A
// plan at the configured headroom while busy workers pace wider falls
// behind its firm slots by the difference, 3% of a long campaign's
// length. A failed read plans at the configured headroom.
func (c *Client) publishedHeadroom(ctx context.Context, order []*channel) map[string]float64 {
	if len(order) == 0 {
		return nil
	}
	ms, err := c.limiter.Margins(ctx, time.Now())
	if err != nil {
		return nil
	}
	out := map[string]float64{}
	for _, m := range ms {
		out[m.Channel] = max(out[m.Channel], m.Headroom)
	}
	return out
}
