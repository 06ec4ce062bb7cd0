package worker

import (
	"context"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/sluice-dev/sluice/internal/redistest"
)

// The Enqueuer finds a task in another queue by asynq's own record of it;
// this pins the key's format to the asynq version in go.mod.
func TestAsynqTaskKeyIsAsynqs(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	client := asynq.NewClientFromRedisClient(rdb)
	if _, err := client.EnqueueContext(ctx, asynq.NewTask("x:y", nil), asynq.Queue("some-queue"), asynq.TaskID("order-7")); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.Exists(ctx, asynqTaskKey("some-queue", "order-7")).Result(); err != nil || n != 1 {
		t.Fatalf("EXISTS %s = %d, %v: asynq keeps its task records elsewhere", asynqTaskKey("some-queue", "order-7"), n, err)
	}
	if n, _ := rdb.Exists(ctx, asynqTaskKey("other-queue", "order-7")).Result(); n != 0 {
		t.Fatalf("a task found in a queue it is not in")
	}
}
