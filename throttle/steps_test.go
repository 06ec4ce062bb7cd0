package throttle_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/throttle"
)

// limiterFactory makes a fresh, empty limiter that reads time from clock.
type limiterFactory func(clock func() time.Time) throttle.Limiter

// allBackends runs f against every backend: Redis (a private redis-server
// and miniredis, the demo's embedded Redis) and the in-process Local. The
// same table must pass on all of them.
func allBackends(t *testing.T, f func(t *testing.T, newLimiter limiterFactory)) {
	redisFactory := func(rdb redis.UniversalClient) limiterFactory {
		n := 0
		return func(clock func() time.Time) throttle.Limiter {
			n++ // each limiter its own prefix: fresh state
			return throttle.NewRedis(rdb, throttle.Options{Prefix: "t" + string(rune('a'+n)), Clock: clock, ConcurrencyRetry: time.Hour})
		}
	}
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		f(t, redisFactory(redistest.Start(t).Client(t)))
	})
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		f(t, redisFactory(c))
	})
	t.Run("local", func(t *testing.T) {
		t.Parallel()
		f(t, func(clock func() time.Time) throttle.Limiter {
			return throttle.NewLocal(throttle.LocalOptions{Clock: clock, ConcurrencyRetry: time.Hour})
		})
	})
}

const ms = time.Millisecond

func TestSlidingWindowLogSteps(t *testing.T) {
	allBackends(t, func(t *testing.T, newLimiter limiterFactory) {
		lim := throttle.Limit{Name: "log", Algorithm: throttle.SlidingWindowLog, Rate: throttle.PerMinute(3)}
		runSteps(t, newLimiter, lim, []step{
			{0, 1, true, 2, 0},
			{10 * time.Second, 1, true, 1, 0},
			{20 * time.Second, 1, true, 0, 0},
			// Exact: retry when the oldest entry (0s) leaves the window.
			{30 * time.Second, 1, false, 0, 30 * time.Second},
			// Two units need the two oldest gone: the one at 10s leaves at 70s.
			{30 * time.Second, 2, false, 0, 40 * time.Second},
			// An entry at s counts while now < s + 1m: the 0s entry is gone at 60s.
			{60 * time.Second, 1, true, 0, 0},
			{61 * time.Second, 1, false, 0, 9 * time.Second},
			{70 * time.Second, 1, true, 0, 0},
			// Three units in one microsecond are three entries.
			{200 * time.Second, 3, true, 0, 0},
			{200 * time.Second, 1, false, 0, time.Minute},
			{260 * time.Second, 3, true, 0, 0},
		})
	})
}

func TestSlidingWindowCounterSteps(t *testing.T) {
	allBackends(t, func(t *testing.T, newLimiter limiterFactory) {
		// 10/1m. used = previous × (share of it still in the window) + current.
		lim := throttle.Limit{Name: "swc", Algorithm: throttle.SlidingWindowCounter, Rate: throttle.PerMinute(10)}
		runSteps(t, newLimiter, lim, []step{
			{0, 5, true, 5, 0},
			{30 * time.Second, 5, true, 0, 0},
			// Full. In the next window this one's 10 weigh 10×(60-e)/60; one
			// unit fits once that is <= 9: at e = 6s, i.e. 66s.
			{40 * time.Second, 1, false, 0, 26 * time.Second},
			{66 * time.Second, 1, true, 0, 0}, // 9 + 0 + 1
			// Denied calls are not counted: 9 + 1 + 1 > 10 until the weight
			// is 8, at e = 12s.
			{66 * time.Second, 1, false, 0, 6 * time.Second},
			{66 * time.Second, 1, false, 0, 6 * time.Second},
			{72 * time.Second, 1, true, 0, 0},                  // 8 + 1 + 1
			{90 * time.Second, 1, true, 2, 0},                  // 5 + 2 + 1
			{150 * time.Second, 1, true, 7, 0},                 // previous 3 × 0.5 = 1.5; 10 - 1.5 - 1
			{300 * time.Second, 10, true, 0, 0},                // both windows long gone
			{301 * time.Second, 1, false, 0, 65 * time.Second}, // the next window, weight 10×(60-e)/60 <= 9 at e = 6s: 366s
		})
	})
}

func TestMinIntervalSteps(t *testing.T) {
	allBackends(t, func(t *testing.T, newLimiter limiterFactory) {
		lim := throttle.Limit{Name: "lock", Algorithm: throttle.MinInterval, Interval: 5 * time.Second}
		runSteps(t, newLimiter, lim, []step{
			{0, 1, true, 0, 0},
			{time.Second, 1, false, 0, 4 * time.Second},
			{5 * time.Second, 1, true, 0, 0},
			{9999 * ms, 1, false, 0, ms},
			{10 * time.Second, 1, true, 0, 0},
			{time.Minute, 1, true, 0, 0},
		})
		_, err := newLimiter(time.Now).Consume(context.Background(), throttle.Request{Key: "test:k:1", Limit: lim, Cost: 2})
		require.ErrorIs(t, err, throttle.ErrCostOverLimit, "an interval admits one operation")
	})
}

func TestDistinctSteps(t *testing.T) {
	allBackends(t, func(t *testing.T, newLimiter limiterFactory) {
		// A messaging tier of 2 unique recipients per rolling day.
		lim := throttle.Limit{Name: "tier", Algorithm: throttle.Distinct, Rate: throttle.PerDay(2)}
		clk := testutil.NewClock(time.Time{})
		l := newLimiter(clk.Now)
		h := time.Hour
		for i, s := range []struct {
			at        time.Duration
			member    string
			allowed   bool
			remaining int64
			retry     time.Duration
			taken     int64
		}{
			{0, "+12025550001", true, 1, 0, 1},
			{h, "+12025550002", true, 0, 0, 1},
			{2 * h, "+12025550001", true, 0, 0, 0}, // counted already: free, and its time moves to 2h
			// A third person waits for the oldest (…002 at 1h) to leave the day.
			{3 * h, "+12025550003", false, 0, 22 * h, 0},
			{25 * h, "+12025550003", true, 0, 0, 1}, // …002 left at 25h; …001 (2h) still counts
			{25 * h, "+12025550002", false, 0, h, 0},
		} {
			clk.Set(t0.Add(s.at))
			d, err := l.Consume(context.Background(), throttle.Request{Key: "whatsapp:tier:1065", Limit: lim, Member: s.member})
			require.NoError(t, err, "step %d", i)
			ld := d.Limits[0]
			require.Equal(t, []any{s.allowed, s.remaining, s.retry, s.taken}, []any{d.Allowed, ld.Remaining, d.RetryAfter, ld.Taken}, "step %d at %v", i, s.at)
		}
		_, err := l.Consume(context.Background(), throttle.Request{Key: "whatsapp:tier:1065", Limit: lim})
		require.ErrorIs(t, err, throttle.ErrBadRequest, "a distinct limit needs a member")
	})
}

// TestCrossScopeBlockedCallKeepsNothing: keys of different scopes may live in
// different cluster slots, so Redis takes them scope by scope and refunds;
// the caller sees the same all-or-nothing result as within one scope.
func TestCrossScopeBlockedCallKeepsNothing(t *testing.T) {
	allBackends(t, func(t *testing.T, newLimiter limiterFactory) {
		clk := testutil.NewClock(t0)
		l := newLimiter(clk.Now)
		ctx := context.Background()
		// Scopes sort as a, b, c, d: the blocking limit is taken third.
		reqs := []throttle.Request{
			{Key: "d:log", Limit: throttle.Limit{Name: "log", Algorithm: throttle.SlidingWindowLog, Rate: throttle.PerMinute(5)}},
			{Key: "a:bucket", Limit: throttle.Limit{Name: "bucket", Algorithm: throttle.GCRA, Rate: throttle.PerMinute(6), Burst: 3}, Cost: 2},
			{Key: "c:daily", Limit: throttle.Limit{Name: "daily", Algorithm: throttle.FixedWindow, Rate: throttle.PerDay(1)}},
			{Key: "b:conc", Limit: throttle.Limit{Name: "conc", Algorithm: throttle.Concurrency, Max: 2, Lease: time.Hour}},
		}
		d, err := l.Consume(ctx, reqs...)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.Equal(t, []int64{4, 1, 0, 1}, remaining(d))
		require.Len(t, d.Leases, 1)

		clk.Set(t0.Add(30 * time.Second))
		d, err = l.Consume(ctx, reqs...)
		require.NoError(t, err)
		require.False(t, d.Allowed)
		require.Equal(t, "daily", d.BlockedBy)
		require.Equal(t, 24*time.Hour-30*time.Second, d.RetryAfter)
		require.Empty(t, d.Leases)

		// Nothing was kept: a, b and d are as the first call left them.
		st, err := l.Status(ctx, reqs...)
		require.NoError(t, err)
		require.Equal(t, []int64{4, 3, 0, 1}, remaining(st), "log 4, bucket refilled to 3 by 20s, daily 0, one lease held")
	})
}

func TestCheckAndStatusTakeNothing(t *testing.T) {
	allBackends(t, func(t *testing.T, newLimiter limiterFactory) {
		clk := testutil.NewClock(t0)
		l := newLimiter(clk.Now)
		ctx := context.Background()
		for _, lim := range []throttle.Limit{
			{Name: "gcra", Algorithm: throttle.GCRA, Rate: throttle.PerMinute(2), Burst: 2},
			{Name: "fixed", Algorithm: throttle.FixedWindow, Rate: throttle.PerMinute(2)},
			{Name: "log", Algorithm: throttle.SlidingWindowLog, Rate: throttle.PerMinute(2)},
			{Name: "swc", Algorithm: throttle.SlidingWindowCounter, Rate: throttle.PerMinute(2)},
			{Name: "interval", Algorithm: throttle.MinInterval, Interval: time.Minute},
			{Name: "conc", Algorithm: throttle.Concurrency, Max: 2},
			{Name: "distinct", Algorithm: throttle.Distinct, Rate: throttle.PerMinute(2)},
		} {
			req := throttle.Request{Key: "chk:" + lim.Name, Limit: lim, Member: "m"}
			for range 3 {
				c, err := l.Check(ctx, req)
				require.NoError(t, err, lim.Name)
				require.True(t, c.Allowed, lim.Name)
				s, err := l.Status(ctx, req)
				require.NoError(t, err, lim.Name)
				require.Equal(t, lim.Capacity(), s.Remaining, lim.Name)
				require.Zero(t, s.Limits[0].Taken)
			}
			d, err := l.Consume(ctx, req)
			require.NoError(t, err)
			require.Equal(t, lim.Capacity()-1, d.Remaining, lim.Name)
		}
	})
}

func TestDecisionJSON(t *testing.T) {
	d := throttle.Decision{Allowed: false, Remaining: 0, Reset: time.UnixMilli(1704307200000), RetryAfter: 22999*ms + 1}
	b, err := json.Marshal(d)
	require.NoError(t, err)
	require.JSONEq(t, `{"allowed":false,"remaining":0,"reset":1704307200000,"retryAfter":23000}`, string(b))
	require.Equal(t, `{"allowed":false,"remaining":0,"reset":1704307200000,"retryAfter":23000}`, string(b), "exact names and order")
}

// TestCrossScopeRefundsEveryAlgorithm: every algorithm taken in an earlier
// scope is given back when the last scope ("z") blocks.
func TestCrossScopeRefundsEveryAlgorithm(t *testing.T) {
	allBackends(t, func(t *testing.T, newLimiter limiterFactory) {
		clk := testutil.NewClock(t0.Add(90 * time.Second))
		l := newLimiter(clk.Now)
		ctx := context.Background()
		reqs := []throttle.Request{
			{Key: "a:fixed", Limit: throttle.Limit{Name: "fixed", Algorithm: throttle.FixedWindow, Rate: throttle.PerMinute(5)}, Cost: 2},
			{Key: "b:swc", Limit: throttle.Limit{Name: "swc", Algorithm: throttle.SlidingWindowCounter, Rate: throttle.PerMinute(5)}, Cost: 2},
			{Key: "c:log", Limit: throttle.Limit{Name: "log", Algorithm: throttle.SlidingWindowLog, Rate: throttle.PerMinute(5)}, Cost: 2},
			{Key: "d:interval", Limit: throttle.Limit{Name: "interval", Algorithm: throttle.MinInterval, Interval: time.Minute}},
			{Key: "e:distinct", Limit: throttle.Limit{Name: "distinct", Algorithm: throttle.Distinct, Rate: throttle.PerMinute(5)}, Member: "m"},
			{Key: "f:gcra", Limit: throttle.Limit{Name: "gcra", Algorithm: throttle.GCRA, Rate: throttle.PerMinute(5), Burst: 5}, Cost: 2},
		}
		gate := throttle.Request{Key: "z:gate", Limit: throttle.Limit{Name: "gate", Algorithm: throttle.FixedWindow, Rate: throttle.PerMinute(1)}}
		_, err := l.Consume(ctx, gate)
		require.NoError(t, err)
		// Member m is counted already: the call takes nothing from distinct.
		_, err = l.Consume(ctx, reqs[4])
		require.NoError(t, err)
		before, err := l.Status(ctx, reqs...)
		require.NoError(t, err)
		d, err := l.Consume(ctx, append(reqs, gate)...)
		require.NoError(t, err)
		require.False(t, d.Allowed)
		require.Equal(t, "gate", d.BlockedBy)
		require.Equal(t, remaining(before), remaining(d)[:len(reqs)], "the decision reports the refunded limits as they stand")
		after, err := l.Status(ctx, reqs...)
		require.NoError(t, err)
		require.Equal(t, remaining(before), remaining(after), "nothing kept")
		require.Equal(t, []int64{5, 5, 5, 1, 4, 5}, remaining(after))
	})
}
