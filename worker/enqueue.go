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

	"github.com/sluice-dev/sluice/control"
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
	watched []watched                  // where an ID may already be held
}

type enqueueChannel struct {
	ch     Channel
	rules  *rules.Set
	pauses []pauseScope // as the worker's: a paused send is planned from the pause's end
	queue  string       // ch.Queue, or the type's default queue
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
	// Keys are the limiter keys (without prefix) of the GCRA limits the
	// send was planned on, where its place is kept (throttle.Redis.Backlog);
	// none when it was not planned (it runs now, or at its ProcessAt).
	Keys []string
	// Err is this task's error: a payload that does not decode, or the
	// enqueue's (tasks.ErrDuplicate wrapping asynq.ErrTaskIDConflict when the
	// ID is taken: the task exists and is not enqueued twice).
	Err error
}

// NewEnqueuer plans with limiter (which must use the Redis of client: it
// also looks there for tasks holding an ID) using chans' Rules, PauseScopes,
// Headroom and TenantWeights (the same values the workers use; Name and
// TaskType are required, Prepare is not used): a send whose scope is
// paused is planned from the pause's end. Channels whose TaskType the tasks package does not know are
// enqueued to run now.
func NewEnqueuer(client *asynq.Client, limiter *throttle.Redis, chans []Channel) (*Enqueuer, error) {
	e := &Enqueuer{client: client, limiter: limiter, chans: map[string]*enqueueChannel{}}
	var chanQueues []watched
	for i, ch := range chans {
		fields, known := tasks.FieldNames(ch.TaskType)
		if !known {
			continue
		}
		set, err := rules.Compile(ch.Name, fields, ch.Rules)
		if err == nil {
			err = ch.checkWeights()
		}
		var pauses []pauseScope
		if err == nil {
			pauses, err = pauseScopes(ch, fields)
		}
		if err != nil {
			return nil, fmt.Errorf("worker: enqueuer: channels[%d]: %w", i, err)
		}
		q := ch.queueName()
		e.chans[ch.TaskType] = &enqueueChannel{ch: ch, rules: set, pauses: pauses, queue: q}
		chanQueues = append(chanQueues, watched{q, ch.TaskType})
	}
	e.watched = watchedQueues(chanQueues)
	return e, nil
}

// ClaimTTL is how long a claim on an idempotency key lasts: it only has to
// outlast one Enqueue call, so that two producers sending one key on two
// channels at once cannot both find it free. After that, asynq's own
// record of the task (in its queue while it exists) is what holds the key.
const ClaimTTL = 10 * time.Minute

// ClaimKey is the Redis key of an ID's claim: "<prefix>:_idem:<id>", with
// the limiter's prefix (redis.key_prefix, "sluice"); a string, the task
// type. The leading '_' keeps it out of the limiter's key listings, and it
// has no hash tag, so claims spread over Redis Cluster's slots.
func ClaimKey(prefix, id string) string { return control.ClaimKey(prefix, id) }

// Enqueue plans and enqueues ts, in order; opts apply to every task (after
// the task's own options), a MaxRetry below 1 among them raised to 1
// (tasks.MinMaxRetry). With asynq.ProcessAt or ProcessIn among opts the
// caller's schedule is kept and nothing is planned now. The error is for a
// failed plan or claim (Redis): then nothing is enqueued and no place is
// kept. Each task's own outcome is in its Enqueued; a task whose enqueue
// fails gives its new place back.
//
// Each task goes to its channel's queue (Channel.Queue), which the workers
// serve, whatever queue its own options named, unless opts has an
// asynq.Queue.
//
// One ID is one send across channels: asynq keeps task IDs unique only
// within a queue. A task with a chosen ID (an idempotency key, or the one
// asynq.TaskID among opts gives) is refused with tasks.ErrKeyInUse while a
// task of another type holds it: one in another queue of the Enqueuer's
// channels or in another type's default queue (asynq's record, pending to
// completed within its retention), or one being enqueued at the same
// moment (a claim, ClaimKey, kept for ClaimTTL, given back when the task is
// not enqueued). Tasks enqueued without the Enqueuer (tasks.Enqueue…) take
// no claim but are found in their queue.
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
		switch ch := e.chans[t.Type()]; {
		case optQueue != "":
			queues[i] = optQueue
		case ch != nil:
			queues[i] = ch.queue
		default:
			queues[i] = tasks.DefaultQueue(t.Type())
		}
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
			keyed = append(keyed, i)
		}
	}
	claimed, err := e.claim(ctx, ts, keyed, queues, out)
	if err != nil {
		return nil, err
	}
	// The claims set here are given back for every task not enqueued.
	defer e.unclaim(ctx, out, claimed)
	for i, t := range ts {
		if out[i].Err != nil {
			continue
		}
		ch, f := e.chans[t.Type()], fs[i]
		if ch == nil || f.high || scheduled {
			continue
		}
		// The pauses the worker reserves against: a send whose scope is
		// paused is planned from the pause's end.
		reqs := pauseRequests(ch.rules.Requests(f.fields), ch.pauses, f.fields)
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
	wider := e.publishedHeadroom(ctx, order)
	for _, ch := range order {
		g := groups[ch]
		sends := make([]throttle.Send, len(g))
		for k, p := range g {
			sends[k] = throttle.Send{TaskID: out[p.i].ID, Tenant: p.tenant, Weight: ch.ch.weight(p.tenant), Requests: p.reqs}
		}
		ps, err := e.limiter.Plan(ctx, throttle.ReserveOptions{Headroom: max(ch.ch.headroom(), wider[ch.ch.Name])}, sends)
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
			for _, r := range p.reqs {
				if r.Limit.Algorithm == throttle.GCRA {
					out[p.i].Keys = append(out[p.i].Keys, r.Key)
				}
			}
		}
	}
	for i, t := range ts {
		if out[i].Err != nil {
			continue
		}
		o := append(tasks.FloorMaxRetry(opts), asynq.TaskID(out[i].ID))
		if optQueue == "" && e.chans[t.Type()] != nil {
			o = append(o, asynq.Queue(queues[i])) // the channel's queue, which its workers serve
		}
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

// claimScript takes a claim: KEYS[1] the claim; ARGV[1] the task type,
// ARGV[2] the caller's token, ARGV[3] the TTL in ms. A claim's value is
// "<type>|<token>". With no claim, or one of the same type (a repeat of
// the send, which asynq then answers itself), the caller's value is set
// and "" returned; else the type holding it. One script, so two producers
// cannot both find the key free.
var claimScript = redis.NewScript(`local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1] + 1) ~= ARGV[1] .. '|' then
  return string.match(cur, '^[^|]*')
end
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. ARGV[2], 'PX', ARGV[3])
return ''`)

// unclaimScript deletes KEYS[1] if it still holds ARGV[1]: a claim a later
// caller of the same type took over is theirs to give back.
var unclaimScript = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

// asynqTaskKey is the key of asynq's record of task id in queue, which
// exists while the task does (pending to completed within its retention);
// asynq's internal/base.TaskKey. TestAsynqTaskKeyIsAsynqs checks it.
func asynqTaskKey(queue, id string) string { return "asynq:{" + queue + "}:t:" + id }

// watched is a queue the Enqueuer looks in for an ID, with the task type
// whose tasks it holds.
type watched struct{ queue, taskType string }

// watchedQueues are the queues of the Enqueuer's channels (chans, in
// order) and the default queues of every task type the tasks package knows
// (a disabled channel's tasks, or those a producer enqueued with the tasks
// package's defaults), each once.
func watchedQueues(chans []watched) []watched {
	var ws []watched
	seen := map[string]bool{}
	add := func(q, typ string) {
		if !seen[q] {
			seen[q] = true
			ws = append(ws, watched{q, typ})
		}
	}
	for _, c := range chans {
		add(c.queue, c.taskType)
	}
	for _, name := range tasks.Channels() {
		if typ, ok := tasks.ChannelTaskType(name); ok {
			add(tasks.DefaultQueue(typ), typ)
		}
	}
	return ws
}

// claim checks the chosen IDs of ts[idx] across task types, in one
// pipeline: each ID's claim (claimScript) and whether asynq holds a task
// with that ID in another queue Sluice's channels use (queues[i] is task
// i's own, where asynq itself refuses a second task with the ID). A task
// whose ID a task of another type holds gets tasks.ErrKeyInUse, and its
// claim is given back at once. It returns the claims it holds, to give
// back (unclaim) for the tasks that are not enqueued. The error is Redis's;
// then no claim is kept.
func (e *Enqueuer) claim(ctx context.Context, ts []*asynq.Task, idx []int, queues []string, out []Enqueued) (claims, error) {
	if len(idx) == 0 {
		return claims{}, nil
	}
	c := claims{token: randomID(), held: map[int]string{}}
	ws := e.watched
	type check struct {
		claim  *redis.Cmd
		others []*redis.IntCmd // by ws; nil for the task's own queue
	}
	checks := make([]check, len(idx))
	_, err := e.limiter.Client().Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, i := range idx {
			checks[k].claim = claimScript.Eval(ctx, p, []string{ClaimKey(e.limiter.Prefix(), out[i].ID)}, ts[i].Type(), c.token, ClaimTTL.Milliseconds())
			checks[k].others = make([]*redis.IntCmd, len(ws))
			for w, q := range ws {
				if q.queue != queues[i] {
					checks[k].others[w] = p.Exists(ctx, asynqTaskKey(q.queue, out[i].ID))
				}
			}
		}
		return nil
	})
	for k, i := range idx {
		if holder, cerr := checks[k].claim.Text(); cerr == nil && holder == "" {
			c.held[i] = ts[i].Type() + "|" + c.token
		}
	}
	if err != nil {
		e.unclaim(ctx, out, c)
		return claims{}, fmt.Errorf("worker: enqueue: claim idempotency keys: %w", err)
	}
	refused := claims{token: c.token, held: map[int]string{}}
	for k, i := range idx {
		holder, _ := checks[k].claim.Text()
		if holder == "" {
			for w, n := range checks[k].others {
				if n != nil && n.Val() > 0 {
					holder = ws[w].taskType
					break
				}
			}
		}
		if holder == "" {
			continue
		}
		out[i].Err = fmt.Errorf("enqueue %s (id %q): %w (a %s task)", ts[i].Type(), out[i].ID, tasks.ErrKeyInUse, holder)
		if v, ok := c.held[i]; ok {
			refused.held[i] = v
			delete(c.held, i)
		}
	}
	// A refused send's claim would make the key's real owner look like
	// another channel to its own retries while this batch runs.
	e.unclaim(ctx, out, refused)
	return c, nil
}

// claims are the claims one Enqueue call holds: by task index, the value
// it set (type and token).
type claims struct {
	token string
	held  map[int]string
}

// unclaim gives back the claims of c whose tasks were not enqueued (no
// Info), each only if it still holds this call's value.
func (e *Enqueuer) unclaim(ctx context.Context, out []Enqueued, c claims) {
	var keys, vals []string
	for i, v := range c.held {
		if out[i].Info == nil {
			keys, vals = append(keys, ClaimKey(e.limiter.Prefix(), out[i].ID)), append(vals, v)
		}
	}
	if len(keys) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	_, _ = e.limiter.Client().Pipelined(ctx, func(p redis.Pipeliner) error {
		for k := range keys {
			unclaimScript.Eval(ctx, p, []string{keys[k]}, vals[k]) // one key each: claims may be in different Cluster slots
		}
		return nil
	})
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

// publishedHeadroom returns, by channel, the widest headroom the workers
// pace the channels of order at now (their measured margins, published
// every 2s: throttle.Redis.Margins), so that a plan is made at the pace
// its sends will be reserved at; none when no worker published one. A
// plan at the configured headroom while busy workers pace wider falls
// behind its firm slots by the difference, 3% of a long campaign's
// length. A failed read plans at the configured headroom.
func (e *Enqueuer) publishedHeadroom(ctx context.Context, order []*enqueueChannel) map[string]float64 {
	if len(order) == 0 {
		return nil
	}
	ms, err := e.limiter.Margins(ctx, time.Now())
	if err != nil {
		return nil
	}
	out := map[string]float64{}
	for _, m := range ms {
		out[m.Channel] = max(out[m.Channel], m.Headroom)
	}
	return out
}
