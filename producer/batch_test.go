package producer_test

import (
	"context"
	"fmt"
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

// smsProducer returns a producer whose SMS channel (a sender at 5/s)
// batches sends or not, on a redis-server of the test's own and a limiter
// on the clock now (nil: Redis's), with n sends of distinct recipients and
// keys.
func smsProducer(t *testing.T, n int, now func() time.Time, batch bool) (*redis.Client, *throttle.Redis, *producer.Client, []producer.Item) {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	lim := throttle.NewRedis(rdb, throttle.Options{OverrideRefresh: -1, Clock: now})
	sender := rules.Rule{Limit: throttle.Limit{Name: "sender", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(5), Burst: 1}, Key: "sms:sender:{from}"}
	prod, err := producer.New(producer.Options{Redis: rdb, Limiter: lim,
		Channels: []worker.Channel{{Name: "sms", TaskType: tasks.TypeSMSSend, Rules: []rules.Rule{sender}, BatchSends: batch}}})
	require.NoError(t, err)
	var items []producer.Item
	for i := range n {
		items = append(items, producer.Item{Task: smsTask(t, tasks.SMSSend{To: fmt.Sprintf("+1202555%04d", 1000+i),
			IdempotencyKey: fmt.Sprintf("k%d", i)})})
	}
	return rdb, lim, prod, items
}

// A second that has begun is batched too: its batch is pending at once and
// each of its sends is reported pending, not as a task of its own. (The
// limiter's clock is an hour behind this host's, so every second the plan
// gives has begun.)
func TestSendBatchesASecondThatHasBegun(t *testing.T) {
	t.Parallel()
	// A whole second: the plan's first second has room for a full second's
	// sends (five), so no second holds a lone send (which goes as its own
	// task).
	behind := time.Now().Add(-time.Hour).Truncate(time.Second)
	rdb, _, prod, items := smsProducer(t, 12, func() time.Time { return behind }, true)
	ctx := context.Background()
	out, err := prod.Send(ctx, items)
	require.NoError(t, err)
	for i, r := range out {
		require.NoError(t, r.Err, i)
		require.True(t, r.ETA.Before(time.Now()), "planned on the limiter's clock, an hour behind")
		require.Equal(t, asynq.TaskStatePending, r.Info.State, "send %d", i)
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	pending, err := insp.ListPendingTasks("sms", asynq.PageSize(100))
	require.NoError(t, err)
	carried := 0
	for _, ti := range pending {
		require.Equal(t, tasks.TypeBatch, ti.Type, "no send is a task of its own")
		b, err := tasks.DecodeBatch(ti.Payload)
		require.NoError(t, err)
		carried += len(b.Sends)
	}
	require.Equal(t, len(items), carried, "every send is carried by a batch")
	require.Less(t, len(pending), len(items)/2, "a batch a second, not a task a send")
}

// With BatchSends, Send carries the sends planned for the same second in
// batch tasks: each second's sends (5 at 5/s) in one task, scheduled for
// that second, each send reported as its own (ID, queue, scheduled, due at
// the second). A send with a key keeps its claim as batched, so a repeat
// of it is a duplicate. A channel without the setting, and a second with
// one send, enqueue a task per send.
func TestSendCarriesASecondsSendsInABatchTask(t *testing.T) {
	t.Parallel()
	rdb, lim, prod, items := smsProducer(t, 16, nil, true)
	ctx := context.Background()
	out, err := prod.Send(ctx, items)
	require.NoError(t, err)
	// The sends due in a second that began after Send returned: batched
	// whatever the host's speed (the producer batches a second still to
	// come when it enqueues; one that began meanwhile may have gone as
	// tasks of their own).
	after := time.Now()
	bySecond := map[int64][]string{}
	for i, r := range out {
		require.NoError(t, r.Err, i)
		require.Equal(t, fmt.Sprintf("k%d", i), r.ID)
		require.Equal(t, r.ID, r.Info.ID)
		require.Equal(t, "sms", r.Info.Queue)
		if r.ETA.Truncate(time.Second).After(after) {
			require.Equal(t, asynq.TaskStateScheduled, r.Info.State, i)
			require.Equal(t, r.ETA.Truncate(time.Second), r.Info.NextProcessAt, i)
			bySecond[r.ETA.Unix()] = append(bySecond[r.ETA.Unix()], r.ID)
		}
	}

	insp := asynq.NewInspectorFromRedisClient(rdb)
	scheduled, err := insp.ListScheduledTasks("sms", asynq.PageSize(100))
	require.NoError(t, err)
	carried := map[string]int64{} // send ID → its batch's second
	for _, ti := range scheduled {
		if ti.Type != tasks.TypeBatch {
			continue
		}
		b, err := tasks.DecodeBatch(ti.Payload)
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(b.Sends), 2, "a batch carries two sends or more")
		for _, s := range b.Sends {
			require.Equal(t, tasks.TypeSMSSend, s.Type)
			require.Equal(t, tasks.DefaultMaxRetry, s.MaxRetry)
			carried[s.ID] = ti.NextProcessAt.Unix()
		}
	}
	for sec, ids := range bySecond {
		for _, id := range ids {
			if len(ids) == 1 {
				require.NotContains(t, carried, id, "the only send of its second goes as its own task")
				continue
			}
			require.Equal(t, sec, carried[id], "%s is carried by its second's batch", id)
		}
	}
	require.GreaterOrEqual(t, len(carried), 10, "16 sends at 5/s: at least two full seconds in batches (carried %d)", len(carried))
	for id := range carried {
		_, err := insp.GetTaskInfo("sms", id)
		require.ErrorIs(t, err, asynq.ErrTaskNotFound, "%s has no task of its own", id)
		held, err := producer.Batched(ctx, lim, tasks.TypeSMSSend, id)
		require.NoError(t, err)
		require.True(t, held, "%s's claim is kept as batched", id)
	}

	// A repeat of a carried send is a duplicate: the claim answers it.
	var repeat string
	for id := range carried {
		repeat = id
		break
	}
	var n int
	_, err = fmt.Sscanf(repeat, "k%d", &n)
	require.NoError(t, err)
	again, err := prod.Send(ctx, []producer.Item{items[n]})
	require.NoError(t, err)
	require.ErrorIs(t, again[0].Err, tasks.ErrDuplicate)

	// A repeat racing the first call (its claim still in flight, taken
	// over) finds the ID's place: a duplicate, not a task beside the batch.
	require.NoError(t, rdb.Set(ctx, producer.ClaimKey(lim.Prefix(), repeat), tasks.TypeSMSSend+"|in-flight", time.Minute).Err())
	again, err = prod.Send(ctx, []producer.Item{items[n]})
	require.NoError(t, err)
	require.ErrorIs(t, again[0].Err, tasks.ErrDuplicate)
	_, err = insp.GetTaskInfo("sms", repeat)
	require.ErrorIs(t, err, asynq.ErrTaskNotFound, "no task of its own beside the batch")

	// Without the setting, each send is its own task.
	rdb2, _, plain, _ := smsProducer(t, 0, nil, false)
	out, err = plain.Send(ctx, items)
	require.NoError(t, err)
	for i, r := range out {
		require.NoError(t, r.Err, i)
		_, err := asynq.NewInspectorFromRedisClient(rdb2).GetTaskInfo("sms", r.ID)
		require.NoError(t, err, "%s is its own task", r.ID)
	}
}
