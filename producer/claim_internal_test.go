package producer

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"

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

// The claim scripts run by EVALSHA; on a Redis that lost its scripts (a
// restart, SCRIPT FLUSH) the calls run again by EVAL, which loads them, and
// every call still runs, once each.
func TestEvalPipelinedLoadsLostScripts(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	keys := []string{"sluice:_idem:a", "sluice:_idem:b", "sluice:_idem:c"}
	claim := func(i int) ([]string, []any) { return []string{keys[i]}, []any{"sms:send", "tok", 60000} }
	for round := range 2 {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		cmds, err := evalPipelined(ctx, rdb, claimScript, len(keys), claim)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i, c := range cmds {
			if v, err := c.Text(); err != nil || v != "" {
				t.Fatalf("round %d: claim %d = %q, %v; want the caller's own claim taken again", round, i, v, err)
			}
			if v := rdb.Get(ctx, keys[i]).Val(); v != "sms:send|tok" {
				t.Fatalf("round %d: key %d holds %q", round, i, v)
			}
		}
	}
	if n, err := rdb.Do(ctx, "SCRIPT", "EXISTS", claimScript.Hash()).Slice(); err != nil || n[0] != int64(1) {
		t.Fatalf("script not loaded after the calls: %v %v", n, err)
	}
}

// A claim the call set is kept by a plain SET (value and TTL as
// keepScript sets them); one the call does not hold goes through
// keepScript, which leaves another type's claim alone.
func TestKeepClaimsByPlainSetOnlyForHeldClaims(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	lim := throttle.NewRedis(rdb, throttle.Options{OverrideRefresh: -1})
	e := &Client{limiter: lim, retention: DefaultClaimRetention}
	ts := []*asynq.Task{asynq.NewTask("sms:send", nil), asynq.NewTask("sms:send", nil)}
	slot := time.Now().Add(time.Hour)
	out := []Enqueued{{ID: "mine", ETA: slot}, {ID: "theirs", ETA: slot}}
	cl, err := e.claim(ctx, ts[:1], []int{0}, out[:1])
	if err != nil || cl.held[0] == "" {
		t.Fatalf("claim of a free key: held %q, %v", cl.held[0], err)
	}
	other := ClaimKey(lim.Prefix(), "theirs")
	if err := rdb.Set(ctx, other, "whatsapp:send|enqueued", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.keepClaims(ctx, ts, []int{0, 1}, out, enqueuedToken, cl); err != nil {
		t.Fatal(err)
	}
	mine := ClaimKey(lim.Prefix(), "mine")
	if v := rdb.Get(ctx, mine).Val(); v != "sms:send|enqueued" {
		t.Errorf("held claim kept as %q, want sms:send|enqueued", v)
	}
	if ttl := rdb.PTTL(ctx, mine).Val(); ttl < DefaultClaimRetention || ttl > DefaultClaimRetention+time.Hour+time.Minute {
		t.Errorf("held claim's TTL %v, want the retention past its slot (about %v)", ttl, DefaultClaimRetention+time.Hour)
	}
	if v := rdb.Get(ctx, other).Val(); v != "whatsapp:send|enqueued" {
		t.Errorf("another type's claim became %q", v)
	}
}
