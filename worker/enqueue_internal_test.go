package worker

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/throttle"
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

// unclaim gives a claim back only while it holds the caller's value: a
// later caller of the same type that took it over keeps it.
func TestUnclaimLeavesAClaimTakenOver(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	lim := throttle.NewRedis(rdb, throttle.Options{OverrideRefresh: -1})
	e := &Enqueuer{limiter: lim}
	key := ClaimKey(lim.Prefix(), "k")
	if err := rdb.Set(ctx, key, "sms:send|later-caller", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	out := []Enqueued{{ID: "k"}}
	e.unclaim(ctx, out, claims{token: "first-caller", held: map[int]string{0: "sms:send|first-caller"}})
	if v := rdb.Get(ctx, key).Val(); v != "sms:send|later-caller" {
		t.Fatalf("claim %q after another caller's give-back", v)
	}
	e.unclaim(ctx, out, claims{token: "later-caller", held: map[int]string{0: "sms:send|later-caller"}})
	if n := rdb.Exists(ctx, key).Val(); n != 0 {
		t.Fatal("the holder's give-back left the claim")
	}
}
