package producer_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/control"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/producer"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

// backfillChannels are a WhatsApp and an SMS channel in their default
// queues ("whatsapp", "sms").
var backfillChannels = []worker.Channel{
	{Name: "whatsapp", TaskType: tasks.TypeWhatsAppSend},
	{Name: "sms", TaskType: tasks.TypeSMSSend},
}

// oldEnqueue enqueues task with ID id as the earlier release's enqueuer
// left it: a plain asynq client, no claim.
func oldEnqueue(t *testing.T, rdb redis.UniversalClient, task *asynq.Task, id string, opts ...asynq.Option) {
	t.Helper()
	c := asynq.NewClientFromRedisClient(rdb)
	_, err := c.Enqueue(task, append([]asynq.Option{asynq.TaskID(id), asynq.Queue(tasks.DefaultQueue(task.Type()))}, opts...)...)
	require.NoError(t, err)
}

func waSendTask(t *testing.T, key string) *asynq.Task {
	t.Helper()
	task, err := tasks.NewWhatsAppSendTask(tasks.WhatsAppSend{PhoneNumberID: "1065", To: "+12025550101", Text: "hi", IdempotencyKey: key})
	require.NoError(t, err)
	return task
}

// The reviewer's case: a whatsapp:send enqueued with key order-7 before
// the upgrade holds no claim, so an SMS with order-7 is enqueued; once
// Backfill has run, the SMS is refused as the earlier release refused it.
func TestBackfillRefusesAKeyAnEarlierReleaseEnqueued(t *testing.T) {
	t.Parallel()
	for _, backfilled := range []bool{false, true} {
		rdb := redistest.Start(t).Client(t)
		lim := throttle.NewRedis(rdb, throttle.Options{OverrideRefresh: -1})
		prod, err := producer.New(producer.Options{Redis: rdb, Limiter: lim, Channels: backfillChannels})
		require.NoError(t, err)
		ctx := context.Background()
		oldEnqueue(t, rdb, waSendTask(t, "order-7"), "order-7")
		if backfilled {
			n, err := prod.Backfill(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			v, err := rdb.Get(ctx, producer.ClaimKey(lim.Prefix(), "order-7")).Result()
			require.NoError(t, err)
			require.Equal(t, tasks.TypeWhatsAppSend+"|enqueued", v)
		}
		out, err := prod.Send(ctx, []producer.Item{{Task: smsTask(t, tasks.SMSSend{IdempotencyKey: "order-7"})}})
		require.NoError(t, err)
		if backfilled {
			require.ErrorIs(t, out[0].Err, tasks.ErrKeyInUse, "after Backfill")
		} else {
			require.NoError(t, out[0].Err, "without Backfill the key is free on the other channel: the gap Backfill closes")
		}
	}
}

// A claim that exists, live or being taken, is left as it is: its value
// and its TTL.
func TestBackfillKeepsALiveClaim(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	oldEnqueue(t, rdb, waSendTask(t, "order-7"), "order-7")
	oldEnqueue(t, rdb, waSendTask(t, "order-8"), "order-8")
	claim := producer.ClaimKey("sluice", "order-7")
	require.NoError(t, rdb.Set(ctx, claim, tasks.TypeSMSSend+"|tok", time.Minute).Err())

	n, err := producer.Backfill(ctx, rdb, "sluice", backfillChannels, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n, "order-8 only")
	require.Equal(t, tasks.TypeSMSSend+"|tok", rdb.Get(ctx, claim).Val())
	require.LessOrEqual(t, rdb.PTTL(ctx, claim).Val(), time.Minute)
}

// The marker makes Backfill run once per deployment: a second call
// writes nothing, not even the claim of a task enqueued since.
func TestBackfillRunsOnce(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	oldEnqueue(t, rdb, waSendTask(t, "order-7"), "order-7")
	retention := 48 * time.Hour
	n, err := producer.Backfill(ctx, rdb, "sluice", backfillChannels, retention)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	ttl := rdb.PTTL(ctx, control.ClaimBackfillKey("sluice")).Val()
	require.InDelta(t, retention.Seconds(), ttl.Seconds(), 60, "the marker lasts the retention")

	oldEnqueue(t, rdb, waSendTask(t, "order-8"), "order-8")
	n, err = producer.Backfill(ctx, rdb, "sluice", backfillChannels, retention)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Zero(t, rdb.Exists(ctx, producer.ClaimKey("sluice", "order-8")).Val())

	// Another prefix is another deployment, with a marker of its own.
	n, err = producer.Backfill(ctx, rdb, "other", backfillChannels, retention)
	require.NoError(t, err)
	require.Equal(t, 2, n)
}

// Tasks in every state get claims, of their own type, for the retention
// past their slot; tasks of another type in a channel's queue, and queues
// of no channel, are left alone. Many tasks span pages.
func TestBackfillClaimsTasksInEveryState(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	retention := time.Hour
	oldEnqueue(t, rdb, waSendTask(t, "pending"), "pending")
	oldEnqueue(t, rdb, waSendTask(t, "scheduled"), "scheduled", asynq.ProcessIn(24*time.Hour))
	oldEnqueue(t, rdb, smsTask(t, tasks.SMSSend{IdempotencyKey: "archived"}), "archived")
	insp := asynq.NewInspectorFromRedisClient(rdb)
	require.NoError(t, insp.ArchiveTask("sms", "archived"))
	// A whatsapp:send in the SMS queue is not the SMS channel's task.
	oldEnqueue(t, rdb, waSendTask(t, "stray"), "stray", asynq.Queue("sms"))
	// A webhook's queue is no channel's here.
	hook, err := tasks.NewWebhookDeliverTask(tasks.WebhookDeliver{URL: "https://example.com/hook", EventType: "order.paid", Payload: []byte(`{}`), IdempotencyKey: "hook"})
	require.NoError(t, err)
	oldEnqueue(t, rdb, hook, "hook")
	// More than a page of pending SMS.
	const bulk = 1203
	c := asynq.NewClientFromRedisClient(rdb)
	for range bulk {
		_, err := c.Enqueue(smsTask(t, tasks.SMSSend{}), asynq.Queue("sms"))
		require.NoError(t, err)
	}

	n, err := producer.Backfill(ctx, rdb, "sluice", backfillChannels, retention)
	require.NoError(t, err)
	require.Equal(t, 3+bulk, n)
	for id, want := range map[string]struct {
		value string
		ttl   time.Duration
	}{
		"pending":   {tasks.TypeWhatsAppSend + "|enqueued", retention},
		"scheduled": {tasks.TypeWhatsAppSend + "|enqueued", 24*time.Hour + retention},
		"archived":  {tasks.TypeSMSSend + "|enqueued", retention},
	} {
		k := producer.ClaimKey("sluice", id)
		require.Equal(t, want.value, rdb.Get(ctx, k).Val(), id)
		require.InDelta(t, want.ttl.Seconds(), rdb.PTTL(ctx, k).Val().Seconds(), 60, id)
	}
	for _, id := range []string{"stray", "hook"} {
		require.Zero(t, rdb.Exists(ctx, producer.ClaimKey("sluice", id)).Val(), id)
	}
}
