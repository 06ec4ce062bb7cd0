package producer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/producer"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

// numberAt1PerSecond paces a WhatsApp number at 1 send a second.
var numberAt1PerSecond = []rules.Rule{{Key: "whatsapp:number:{phone_number_id}", Limit: throttle.Limit{Name: "throughput", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1), Burst: 1}}}

// enqueuerOn starts a redis-server and returns it, a client, a limiter and
// a producer of chans on it.
func enqueuerOn(t *testing.T, chans ...worker.Channel) (*redistest.Server, *redis.Client, *throttle.Redis, *producer.Client) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	lim := throttle.NewRedis(rdb, throttle.Options{OverrideRefresh: -1})
	enq, err := producer.New(producer.Options{Redis: rdb, Limiter: lim, Channels: chans})
	require.NoError(t, err)
	return srv, rdb, lim, enq
}

// Enqueue plans bulk sends (a place in the number's backlog, scheduled
// for its second), keeps a caller's TaskID and schedule, refuses a taken ID
// without keeping a second place, and plans nothing for high priority.
func TestEnqueuePlansAndKeepsTheCallersOptions(t *testing.T) {
	_, _, lim, enq := enqueuerOn(t, worker.Channel{Name: "whatsapp", TaskType: tasks.TypeWhatsAppSend, Rules: numberAt1PerSecond})
	ctx := context.Background()
	send := func(key, priority string) *asynq.Task {
		task, err := tasks.NewWhatsAppSendTask(tasks.WhatsAppSend{Delivery: tasks.Delivery{Priority: priority}, PhoneNumberID: "1065", To: "+12025550101", Text: "hi", IdempotencyKey: key})
		if err != nil {
			t.Fatal(err)
		}
		return task
	}
	// Three bulk sends at 1/s: the third is planned about 2s out.
	out, err := enq.Enqueue(ctx, []*asynq.Task{send("a", ""), send("b", ""), send("c", "")})
	if err != nil {
		t.Fatal(err)
	}
	if out[2].Err != nil || out[2].ETA.Sub(out[0].ETA) < 1900*time.Millisecond || out[2].Info.State != asynq.TaskStateScheduled {
		t.Fatalf("third send: %+v, first ETA %v", out[2], out[0].ETA)
	}
	b, _ := lim.Backlog(ctx, "whatsapp:number:1065")
	if b.Planned != 3 {
		t.Fatalf("backlog %d, want 3", b.Planned)
	}
	// The same ID again: refused, and the backlog keeps one place for it.
	out, _ = enq.Enqueue(ctx, []*asynq.Task{send("c", "")})
	if !errors.Is(out[0].Err, tasks.ErrDuplicate) {
		t.Fatalf("repeat: %v", out[0].Err)
	}
	if b, _ := lim.Backlog(ctx, "whatsapp:number:1065"); b.Planned != 3 {
		t.Fatalf("backlog %d after the repeat, want 3", b.Planned)
	}
	// A caller's ID and schedule are kept, and such a send is not planned now.
	out, _ = enq.Enqueue(ctx, []*asynq.Task{send("", "")}, asynq.TaskID("mine"), asynq.ProcessIn(time.Hour))
	if out[0].Err != nil || out[0].ID != "mine" || out[0].Info.NextProcessAt.Before(time.Now().Add(50*time.Minute)) {
		t.Fatalf("caller's options: %+v", out[0])
	}
	// High priority: due now, no place.
	out, _ = enq.Enqueue(ctx, []*asynq.Task{send("urgent", "high")})
	if out[0].Err != nil || out[0].Info.State != asynq.TaskStatePending {
		t.Fatalf("high priority: %+v", out[0])
	}
	if b, _ := lim.Backlog(ctx, "whatsapp:number:1065"); b.Planned != 3 {
		t.Fatalf("backlog %d, want 3: neither the scheduled nor the high-priority send holds a place", b.Planned)
	}
}

// asynq keeps task IDs unique per queue only: the claim refuses one
// idempotency key on two task types (two queues) and takes no place for
// the refused send. The claim is the one record of the key's use: kept
// for the task's life, it is all that refuses the key on another type.
func TestEnqueueRefusesOneKeyOnTwoTaskTypes(t *testing.T) {
	srv, rdb, lim, enq := enqueuerOn(t,
		worker.Channel{Name: "whatsapp", TaskType: tasks.TypeWhatsAppSend, Rules: numberAt1PerSecond},
		worker.Channel{Name: "sms", TaskType: tasks.TypeSMSSend})
	ctx := context.Background()
	waTask := func(key string) *asynq.Task {
		task, err := tasks.NewWhatsAppSendTask(tasks.WhatsAppSend{PhoneNumberID: "1065", To: "+12025550101", Text: "hi", IdempotencyKey: key})
		require.NoError(t, err)
		return task
	}
	smsTask := func(key string) *asynq.Task {
		task, err := tasks.NewSMSSendTask(tasks.SMSSend{From: "+12025550100", To: "+12025550101", Body: "hi", IdempotencyKey: key})
		require.NoError(t, err)
		return task
	}
	wa, sms := waTask("order-7"), smsTask("order-7")
	out, err := enq.Enqueue(ctx, []*asynq.Task{sms})
	if err != nil || out[0].Err != nil {
		t.Fatalf("first use of the key: %v %+v", err, out)
	}
	claim := producer.ClaimKey(lim.Prefix(), "order-7")
	if v, err := rdb.Get(ctx, claim).Result(); err != nil || !strings.HasPrefix(v, tasks.TypeSMSSend+"|") {
		t.Fatalf("claim: %q %v, want the type and the caller's token", v, err)
	}
	// Kept for the task's life: its slot (now) and DefaultClaimRetention.
	if ttl := rdb.PTTL(ctx, claim).Val(); ttl < producer.DefaultClaimRetention-time.Minute || ttl > producer.DefaultClaimRetention {
		t.Fatalf("claim TTL %v, want about %v", ttl, producer.DefaultClaimRetention)
	}
	out, err = enq.Enqueue(ctx, []*asynq.Task{wa})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(out[0].Err, tasks.ErrKeyInUse) || out[0].Info != nil {
		t.Fatalf("the key on another type: %+v", out[0])
	}
	t.Logf("refused: %v", out[0].Err)
	if b, _ := lim.Backlog(ctx, "whatsapp:number:1065"); b.Planned != 0 {
		t.Fatalf("backlog %d, want 0: a refused send keeps no place", b.Planned)
	}
	// The same type again is asynq's duplicate, as before.
	out, _ = enq.Enqueue(ctx, []*asynq.Task{sms})
	if !errors.Is(out[0].Err, tasks.ErrDuplicate) {
		t.Fatalf("repeat on the same type: %v", out[0].Err)
	}
	// A send whose enqueue fails gives its claim back, so the key stays
	// free for a retry on any channel: an asynq client on a closed
	// connection fails every enqueue after the claim.
	closed := srv.Client(t)
	require.NoError(t, closed.Close())
	broken, err := producer.New(producer.Options{Redis: closed, Limiter: lim, Channels: []worker.Channel{{Name: "sms", TaskType: tasks.TypeSMSSend}}})
	require.NoError(t, err)
	out, err = broken.Enqueue(ctx, []*asynq.Task{smsTask("order-9")})
	require.NoError(t, err)
	require.Error(t, out[0].Err, "the enqueue on a closed connection")
	require.Zero(t, rdb.Exists(ctx, producer.ClaimKey(lim.Prefix(), "order-9")).Val(), "the failed send kept its claim")
	// The repeat left the enqueued task's claim as it was: the key is
	// still the SMS task's, and a refused send changes nothing.
	v, err := rdb.Get(ctx, claim).Result()
	require.NoError(t, err)
	require.Equal(t, tasks.TypeSMSSend+"|enqueued", v)
	out, err = enq.Enqueue(ctx, []*asynq.Task{wa})
	if err != nil || !errors.Is(out[0].Err, tasks.ErrKeyInUse) {
		t.Fatalf("the key held by a task in another queue: %v %+v", err, out)
	}
	require.Equal(t, tasks.TypeSMSSend+"|enqueued", rdb.Get(ctx, claim).Val(), "a refused send changed the claim")
	// Two types with one key in one batch: the first takes it.
	out, err = enq.Enqueue(ctx, []*asynq.Task{waTask("order-8"), smsTask("order-8")})
	if err != nil || out[0].Err != nil || !errors.Is(out[1].Err, tasks.ErrKeyInUse) {
		t.Fatalf("one key twice in a batch: %v %+v", err, out)
	}
	// The claims stay out of the limiter's key listings.
	keys, _, err := lim.List(ctx, "", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.Contains(k, "idem") {
			t.Fatalf("limiter keys list a claim: %q", k)
		}
	}
}

// Two channels may share a queue: a repeat of a keyed send there is asynq's
// duplicate, not another channel's key, and it leaves the enqueued task's
// claim. A same-type repeat takes over a claim still being enqueued, so
// the first caller giving its claim back cannot free the key while the
// second is still enqueuing.
func TestEnqueueOnASharedQueue(t *testing.T) {
	srv, rdb, lim, enq := enqueuerOn(t,
		worker.Channel{Name: "whatsapp", TaskType: tasks.TypeWhatsAppSend, Queue: "msgs"},
		worker.Channel{Name: "sms", TaskType: tasks.TypeSMSSend, Queue: "msgs"})
	ctx := context.Background()
	sms, err := tasks.NewSMSSendTask(tasks.SMSSend{From: "+12025550100", To: "+12025550101", Body: "hi", IdempotencyKey: "k"})
	require.NoError(t, err)
	out, err := enq.Enqueue(ctx, []*asynq.Task{sms})
	require.NoError(t, err)
	require.NoError(t, out[0].Err)
	require.Equal(t, "msgs", out[0].Info.Queue, "the channel's queue")
	first, err := rdb.Get(ctx, producer.ClaimKey(lim.Prefix(), "k")).Result()
	require.NoError(t, err)

	out, err = enq.Enqueue(ctx, []*asynq.Task{sms})
	require.NoError(t, err)
	require.ErrorIs(t, out[0].Err, tasks.ErrDuplicate, "a repeat on a shared queue")
	// The first send's claim is kept as enqueued; the repeat leaves it.
	require.Equal(t, tasks.TypeSMSSend+"|enqueued", first)
	require.Equal(t, first, rdb.Get(ctx, producer.ClaimKey(lim.Prefix(), "k")).Val())
	wa, err := tasks.NewWhatsAppSendTask(tasks.WhatsAppSend{PhoneNumberID: "1065", To: "+12025550101", Text: "hi", IdempotencyKey: "k"})
	require.NoError(t, err)
	out, err = enq.Enqueue(ctx, []*asynq.Task{wa})
	require.NoError(t, err)
	require.ErrorIs(t, out[0].Err, tasks.ErrKeyInUse, "the claim: an SMS task holds the key")
	// A failed repeat takes over a claim another caller of its type is
	// still enqueuing with, then gives back its own.
	require.NoError(t, rdb.Set(ctx, producer.ClaimKey(lim.Prefix(), "k"), tasks.TypeSMSSend+"|someone-else", time.Minute).Err())
	closed := srv.Client(t)
	require.NoError(t, closed.Close())
	broken, err := producer.New(producer.Options{Redis: closed, Limiter: lim, Channels: []worker.Channel{{Name: "sms", TaskType: tasks.TypeSMSSend, Queue: "msgs"}}})
	require.NoError(t, err)
	out, err = broken.Enqueue(ctx, []*asynq.Task{sms})
	require.NoError(t, err)
	require.Error(t, out[0].Err)
	require.Zero(t, rdb.Exists(ctx, producer.ClaimKey(lim.Prefix(), "k")).Val(), "the failed repeat took the claim over, so it gives it back")

	// Without a claim (as for a task a plain asynq client enqueued), the
	// same queue still refuses the ID: asynq's own answer.
	out, err = enq.Enqueue(ctx, []*asynq.Task{wa})
	require.NoError(t, err)
	require.ErrorIs(t, out[0].Err, tasks.ErrDuplicate, "the same queue holds the key: asynq refuses it")
}
