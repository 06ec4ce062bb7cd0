package throttle_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/throttle"
)

// scriptCalls counts the scripts a client runs.
type scriptCalls struct{ n atomic.Int64 }

func (h *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		// (a NOSCRIPT reply is followed by the load and the call again)
		if cmd.Name() == "evalsha" && (err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT")) {
			h.n.Add(1)
		}
		return err
	}
}
func (h *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// prefetchLimiter is reserveLimiter with its script round trips counted.
func prefetchLimiter(t *testing.T, span time.Duration) (*throttle.Redis, redis.UniversalClient, *testutil.Clock, *scriptCalls) {
	t.Helper()
	return prefetchLimiterOn(t, redistest.Start(t).Client(t), span)
}

func prefetchLimiterOn(t *testing.T, rdb redis.UniversalClient, span time.Duration) (*throttle.Redis, redis.UniversalClient, *testutil.Clock, *scriptCalls) {
	t.Helper()
	clock := testutil.NewClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	calls := &scriptCalls{}
	rdb.AddHook(calls)
	l := throttle.NewRedis(rdb, throttle.Options{Clock: clock.Now, OverrideRefresh: -1, PrefetchSpan: span})
	return l, rdb, clock, calls
}

var (
	// A limit that never blocks: 1ms of it is a million sends.
	huge = throttle.Limit{Name: "throughput", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1 << 30), Burst: 1 << 20}
	// A daily cap of a trillion: 1ms of it is over 11,000 sends.
	hugeDaily = throttle.Limit{Name: "daily", Algorithm: throttle.FixedWindow, Rate: throttle.PerDay(1 << 40)}
)

func TestPrefetchServesNeverBlockingLimitsFromMemory(t *testing.T) {
	backends(t, func(t *testing.T, c redis.UniversalClient) {
		prefetchServes(t, c)
	})
}

func prefetchServes(t *testing.T, c redis.UniversalClient) {
	l, rdb, clock, calls := prefetchLimiterOn(t, c, 0)
	ctx := context.Background()
	reqs := []throttle.Request{{Key: "wa:number:1", Limit: huge}, {Key: "wa:daily:+12025550100", Limit: hugeDaily}}
	sends := 3*(1+throttle.MaxPrefetch) + 1
	local := 0
	for i := range sends {
		r, err := l.Reserve(ctx, throttle.ReserveOptions{TaskID: fmt.Sprint("t", i)}, reqs...)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Firm || !r.Allowed {
			t.Fatalf("send %d: firm %v allowed %v, want both", i, r.Firm, r.Allowed)
		}
		if r.Local {
			local++
		}
		clock.Advance(time.Microsecond)
	}
	// One call in 1+MaxPrefetch asks Redis; it takes the slots of all.
	if got, want := calls.n.Load(), int64(4); got != want {
		t.Fatalf("%d reserve round trips for %d sends, want %d", got, sends, want)
	}
	if local != sends-4 {
		t.Fatalf("%d sends served from memory, want %d", local, sends-4)
	}
	// Every slot handed out, and the unused ones of the last call, were
	// counted in Redis: the window holds 4 calls' worth.
	count, err := rdb.HGet(ctx, l.Key("wa:daily:+12025550100"), "c").Result()
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(count); n != 4*(1+throttle.MaxPrefetch) {
		t.Fatalf("daily window counts %d, want %d", n, 4*(1+throttle.MaxPrefetch))
	}
}

func TestPrefetchIsOnlyForTheSameLimitsAndBulk(t *testing.T) {
	l, _, _, calls := prefetchLimiter(t, 0)
	ctx := context.Background()
	a := []throttle.Request{{Key: "wa:number:1", Limit: huge}, {Key: "wa:daily:+12025550100", Limit: hugeDaily}}
	b := []throttle.Request{{Key: "wa:number:1", Limit: huge}, {Key: "wa:daily:+12025550101", Limit: hugeDaily}}
	costly := []throttle.Request{{Key: "wa:number:1", Limit: huge, Cost: 2}, {Key: "wa:daily:+12025550100", Limit: hugeDaily}}
	if _, err := l.Reserve(ctx, throttle.ReserveOptions{}, a...); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opts throttle.ReserveOptions
		reqs []throttle.Request
	}{
		{"another recipient", throttle.ReserveOptions{}, b},
		{"another cost", throttle.ReserveOptions{}, costly},
		{"high priority", throttle.ReserveOptions{Priority: throttle.High}, a},
		{"retake", throttle.ReserveOptions{Priority: throttle.High, Retake: true}, a},
	} {
		before := calls.n.Load()
		r, err := l.Reserve(ctx, c.opts, c.reqs...)
		if err != nil {
			t.Fatal(err)
		}
		if r.Local || calls.n.Load() != before+1 {
			t.Fatalf("%s: served from memory (local %v, %d round trips), want one round trip", c.name, r.Local, calls.n.Load()-before)
		}
	}
	r, err := l.Reserve(ctx, throttle.ReserveOptions{}, a...)
	if err != nil || !r.Local {
		t.Fatalf("same limits, bulk: local %v, err %v; want served from memory", r.Local, err)
	}
}

func TestPrefetchNeverOnLimitsNearTheirPace(t *testing.T) {
	for _, c := range []struct {
		name string
		reqs []throttle.Request
		span time.Duration
	}{
		// 80/s: one send per 12.7ms, none more fits in 1ms.
		{"80/s", []throttle.Request{{Key: "wa:number:1", Limit: mps80}}, 0},
		// A million a second whose burst has no room left after the send.
		{"no burst room", []throttle.Request{{Key: "wa:number:1", Limit: throttle.Limit{Name: "t", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1 << 30), Burst: 2}}}, 0},
		// A daily cap of 2.
		{"small window", []throttle.Request{{Key: "wa:number:1", Limit: huge}, {Key: "wa:daily:+12025550100", Limit: daily}}, 0},
		// A sliding log cannot prefetch.
		{"sliding log", []throttle.Request{{Key: "wa:number:1", Limit: huge}, {Key: "wa:log:1", Limit: throttle.Limit{Name: "log", Algorithm: throttle.SlidingWindowLog, Rate: throttle.PerSecond(1 << 20)}}}, 0},
		{"disabled", []throttle.Request{{Key: "wa:number:1", Limit: huge}}, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, _, clock, calls := prefetchLimiter(t, c.span)
			for i := range 2 {
				r, err := l.Reserve(context.Background(), throttle.ReserveOptions{}, c.reqs...)
				if err != nil {
					t.Fatal(err)
				}
				if r.Local {
					t.Fatalf("send %d served from memory", i)
				}
				clock.Advance(time.Second)
			}
			if calls.n.Load() != 2 {
				t.Fatalf("%d round trips for 2 sends, want 2", calls.n.Load())
			}
		})
	}
}

func TestPrefetchedSlotsExpire(t *testing.T) {
	ctx := context.Background()
	reqs := []throttle.Request{{Key: "wa:number:1", Limit: huge}, {Key: "wa:daily:+12025550100", Limit: hugeDaily}}
	t.Run("ttl", func(t *testing.T) {
		l, _, clock, _ := prefetchLimiter(t, 0)
		if _, err := l.Reserve(ctx, throttle.ReserveOptions{}, reqs...); err != nil {
			t.Fatal(err)
		}
		clock.Advance(throttle.PrefetchTTL)
		r, err := l.Reserve(ctx, throttle.ReserveOptions{}, reqs...)
		if err != nil || r.Local {
			t.Fatalf("after PrefetchTTL: local %v, err %v; want a round trip", r.Local, err)
		}
	})
	t.Run("window end", func(t *testing.T) {
		l, _, clock, _ := prefetchLimiter(t, 0)
		// 50ms before the daily window ends: its slots must not be
		// handed out into the next day's window.
		clock.Advance(12*time.Hour - 50*time.Millisecond)
		if _, err := l.Reserve(ctx, throttle.ReserveOptions{}, reqs...); err != nil {
			t.Fatal(err)
		}
		r, err := l.Reserve(ctx, throttle.ReserveOptions{}, reqs...)
		if err != nil || r.Local {
			t.Fatalf("at the window's end: local %v, err %v; want a round trip", r.Local, err)
		}
	})
}

func TestPrefetchStopsWhileAPlanIsInProgress(t *testing.T) {
	l, _, _, _ := prefetchLimiter(t, 0)
	ctx := context.Background()
	// 100,000/s with room for 100 now: 1ms of it holds 100 sends, but a
	// send is planned on it (it comes back in this second).
	fast := throttle.Limit{Name: "throughput", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(100000), Burst: 100}
	reqs := []throttle.Request{{Key: "api:global", Limit: fast}}
	if _, err := l.Plan(ctx, throttle.ReserveOptions{}, []throttle.Send{{TaskID: "planned", Requests: reqs}}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		r, err := l.Reserve(ctx, throttle.ReserveOptions{TaskID: fmt.Sprint("n", i)}, reqs...)
		if err != nil {
			t.Fatal(err)
		}
		// (the first is firm right after the planned send; the second is
		// planned behind both)
		if r.Local || (i == 0 && !r.Firm) {
			t.Fatalf("send %d: firm %v, local %v; want from Redis", i, r.Firm, r.Local)
		}
	}
}

func TestPrefetchNeverExceedsALimitAcrossProcesses(t *testing.T) {
	// Two limiters (two worker processes) on one Redis, at one frozen
	// instant: a million a second with a burst of 500 admits exactly 500
	// sends now, however the two prefetch.
	rdb := redistest.Start(t).Client(t)
	clock := testutil.NewClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	a := throttle.NewRedis(rdb, throttle.Options{Clock: clock.Now, OverrideRefresh: -1})
	b := throttle.NewRedis(rdb, throttle.Options{Clock: clock.Now, OverrideRefresh: -1})
	lim := throttle.Limit{Name: "throughput", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1000000), Burst: 500}
	ctx := context.Background()
	firm, local := 0, 0
	for i := range 1200 {
		l := a
		if i%3 == 2 {
			l = b
		}
		r, err := l.Reserve(ctx, throttle.ReserveOptions{}, throttle.Request{Key: "api:global", Limit: lim})
		if err != nil {
			t.Fatal(err)
		}
		if r.Firm && !r.At.After(clock.Now()) {
			firm++
		}
		if r.Local {
			local++
		}
	}
	if firm != 500 {
		t.Fatalf("%d sends firm now, want exactly the burst, 500", firm)
	}
	if local == 0 {
		t.Fatal("no send was served from memory: the test proves nothing")
	}
}
