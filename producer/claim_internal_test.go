package producer

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/throttle"
)

// unclaim gives a claim back only while it holds the caller's value: a
// later caller of the same type that took it over keeps it.
func TestUnclaimLeavesAClaimTakenOver(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	lim := throttle.NewRedis(rdb, throttle.Options{OverrideRefresh: -1})
	e := &Client{limiter: lim}
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
