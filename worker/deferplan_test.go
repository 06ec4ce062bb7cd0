package worker

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/redistest"
)

// moveTasks moves a scheduled task and a retry task by the shift, as
// asynq's own Inspector reads them, and leaves a pending one alone: the
// keys are asynq's layout.
func TestMoveTasksMovesScheduledAndRetryTasks(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	cl := asynq.NewClientFromRedisClient(rdb)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	at := time.Now().Add(time.Minute).Truncate(time.Second)
	if _, err := cl.Enqueue(asynq.NewTask("whatsapp:send", []byte("{}")), asynq.Queue("whatsapp"), asynq.TaskID("sched"), asynq.ProcessAt(at)); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Enqueue(asynq.NewTask("whatsapp:send", []byte("{}")), asynq.Queue("whatsapp"), asynq.TaskID("pend")); err != nil {
		t.Fatal(err)
	}
	// A task in the retry set (a throttled send asynq brings back).
	if _, err := cl.Enqueue(asynq.NewTask("whatsapp:send", []byte("{}")), asynq.Queue("whatsapp"), asynq.TaskID("retry"), asynq.ProcessAt(at)); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ZRem(ctx, "asynq:{whatsapp}:scheduled", "retry").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ZAdd(ctx, "asynq:{whatsapp}:retry", redisZ(at, "retry")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, "asynq:{whatsapp}:t:retry", "state", "retry").Err(); err != nil {
		t.Fatal(err)
	}
	n, err := moveTasks(ctx, rdb, "whatsapp", []taskMove{{TaskID: "sched", By: 7 * time.Second},
		{TaskID: "pend", By: 7 * time.Second}, {TaskID: "retry", By: 7 * time.Second}, {TaskID: "gone", By: 7 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("moved %d tasks, want 2 (scheduled, retry)", n)
	}
	for _, id := range []string{"sched", "retry"} {
		ti, err := insp.GetTaskInfo("whatsapp", id)
		if err != nil {
			t.Fatal(err)
		}
		if want := at.Add(7 * time.Second); !ti.NextProcessAt.Equal(want) {
			t.Fatalf("%s: next process at %v, want %v", id, ti.NextProcessAt, want)
		}
	}
	if ti, err := insp.GetTaskInfo("whatsapp", "pend"); err != nil || ti.State != asynq.TaskStatePending {
		t.Fatalf("pending task: %+v, %v", ti, err)
	}
}

func redisZ(at time.Time, id string) redis.Z { return redis.Z{Score: float64(at.Unix()), Member: id} }
