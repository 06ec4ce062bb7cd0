package throttle_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/throttle"
)

// An in-process limiter: 10 sends a second with bursts of 3, on a fixed
// clock so the output does not depend on when the example runs.
func ExampleNewLocal() {
	now := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	lim := throttle.NewLocal(throttle.LocalOptions{Clock: func() time.Time { return now }})
	perSecond := throttle.Limit{Name: "throughput", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(10), Burst: 3}

	ctx := context.Background()
	for range 4 {
		d, err := lim.Consume(ctx, throttle.Request{Key: "whatsapp:throughput:1065", Limit: perSecond})
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v remaining=%d retry_after=%v\n", d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// allowed=true remaining=2 retry_after=0s
	// allowed=true remaining=1 retry_after=0s
	// allowed=true remaining=0 retry_after=0s
	// allowed=false remaining=0 retry_after=100ms
}

// A limiter over Redis (here an embedded miniredis). Every process using
// the same Redis shares the limits; Clock is set only so that the example's
// output is fixed (in production Redis TIME is the clock).
func ExampleNewRedis() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	now := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	lim := throttle.NewRedis(rdb, throttle.Options{Prefix: "example", Clock: func() time.Time { return now }})
	fmt.Println(lim.Key("whatsapp:daily:1065"))

	daily := throttle.Limit{Name: "daily", Algorithm: throttle.FixedWindow, Rate: throttle.PerDay(1000)}
	d, err := lim.Consume(context.Background(), throttle.Request{Key: "whatsapp:daily:1065", Limit: daily, Cost: 10})
	if err != nil {
		panic(err)
	}
	fmt.Printf("allowed=%v remaining=%d reset=%s\n", d.Allowed, d.Remaining, d.Reset.UTC().Format(time.RFC3339))
	// Output:
	// example:{whatsapp}:daily:1065
	// allowed=true remaining=990 reset=2026-11-21T00:00:00Z
}

// Consume checks several limits at once and takes from all of them or from
// none: here the per-pair limit has room, the daily one does not.
func ExampleRedis_Consume() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	now := time.Date(2026, 11, 20, 23, 59, 0, 0, time.UTC)
	lim := throttle.NewRedis(rdb, throttle.Options{Clock: func() time.Time { return now }})
	pair := throttle.Limit{Name: "pair", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1), Burst: 5}
	daily := throttle.Limit{Name: "daily", Algorithm: throttle.FixedWindow, Rate: throttle.PerDay(2)}
	reqs := []throttle.Request{
		{Key: "whatsapp:pair:1065:+12025550123", Limit: pair},
		{Key: "whatsapp:daily:1065", Limit: daily},
	}

	ctx := context.Background()
	for range 3 {
		d, err := lim.Consume(ctx, reqs...)
		if err != nil {
			panic(err)
		}
		if d.Allowed {
			fmt.Printf("sent: pair remaining %d, daily remaining %d\n", d.Limits[0].Remaining, d.Limits[1].Remaining)
			continue
		}
		fmt.Printf("blocked by %s: retry in %v; pair remaining %d (nothing taken)\n",
			d.BlockedBy, d.RetryAfter, d.Limits[0].Remaining)
	}
	// Output:
	// sent: pair remaining 4, daily remaining 1
	// sent: pair remaining 3, daily remaining 0
	// blocked by daily: retry in 1m0s; pair remaining 3 (nothing taken)
}

// The pause channel names the prefix and the database: pub/sub is shared
// by every database of a server, so each deployment hears only its own.
func ExampleRedis_PausesChannel() {
	db3 := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0", DB: 3}) // never dialled
	defer db3.Close()
	l := throttle.NewRedis(db3, throttle.Options{Prefix: "acme"})
	fmt.Println(l.PausesChannel())
	fmt.Println(l.Key("whatsapp:paused:sender:1065"))
	// Output:
	// acme:{_pauses}:db3
	// acme:{whatsapp}:paused:sender:1065
}
