package throttle_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/throttle"
)

// t0 is a UTC midnight, so fixed windows of every length start there.
var t0 = testutil.T0

var backends = testutil.Backends

type step struct {
	at        time.Duration // since t0
	cost      int64
	allowed   bool
	remaining int64
	retry     time.Duration
}

func runSteps(t *testing.T, newLimiter limiterFactory, lim throttle.Limit, steps []step) {
	t.Helper()
	clk := testutil.NewClock(time.Time{})
	l := newLimiter(clk.Now)
	ctx := context.Background()
	for i, s := range steps {
		clk.Set(t0.Add(s.at))
		d, err := l.Consume(ctx, throttle.Request{Key: "test:k:1", Limit: lim, Cost: s.cost})
		require.NoError(t, err, "step %d", i)
		got := step{at: s.at, cost: s.cost, allowed: d.Allowed, remaining: d.Limits[0].Remaining, retry: d.RetryAfter}
		require.Equal(t, s, got, "step %d at %v", i, s.at)
	}
}

func TestGCRASteps(t *testing.T) {
	allBackends(t, func(t *testing.T, newLimiter limiterFactory) {
		// 10/s, burst 3: T = 100ms, bucket depth 300ms.
		lim := throttle.Limit{Name: "g", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(10), Burst: 3}
		runSteps(t, newLimiter, lim, []step{
			{0, 1, true, 2, 0},
			{0, 1, true, 1, 0},
			{0, 1, true, 0, 0},
			{0, 1, false, 0, 100 * time.Millisecond},
			{50 * time.Millisecond, 1, false, 0, 50 * time.Millisecond},
			{100 * time.Millisecond, 1, true, 0, 0},
			{100 * time.Millisecond, 2, false, 0, 200 * time.Millisecond},
			{300 * time.Millisecond, 2, true, 0, 0},
			{time.Second, 3, true, 0, 0}, // bucket refilled
			{time.Second, 1, false, 0, 100 * time.Millisecond},
		})
	})
}

func TestGCRAEvenSpacing(t *testing.T) {
	allBackends(t, func(t *testing.T, newLimiter limiterFactory) {
		// 80/s burst 1 (WhatsApp throughput): exactly one unit per 12.5ms.
		lim := throttle.Limit{Name: "throughput", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(80)}
		steps := []step{{0, 1, true, 0, 0}}
		for i := 1; i <= 80; i++ {
			at := time.Duration(i) * 12500 * time.Microsecond
			steps = append(steps,
				step{at - time.Microsecond, 1, false, 0, time.Microsecond},
				step{at, 1, true, 0, 0})
		}
		runSteps(t, newLimiter, lim, steps)
	})
}

func TestGCRAPairInterval(t *testing.T) {
	allBackends(t, func(t *testing.T, newLimiter limiterFactory) {
		// 1/6s: the WhatsApp pair rate limit.
		lim := throttle.Limit{Name: "pair", Algorithm: throttle.GCRA, Rate: throttle.Rate{Limit: 1, Period: 6 * time.Second}}
		runSteps(t, newLimiter, lim, []step{
			{0, 1, true, 0, 0},
			{time.Second, 1, false, 0, 5 * time.Second},
			{6 * time.Second, 1, true, 0, 0},
			{20 * time.Second, 1, true, 0, 0},
		})
	})
}

func TestFixedWindowSteps(t *testing.T) {
	allBackends(t, func(t *testing.T, newLimiter limiterFactory) {
		lim := throttle.Limit{Name: "f", Algorithm: throttle.FixedWindow, Rate: throttle.Rate{Limit: 3, Period: time.Minute}}
		runSteps(t, newLimiter, lim, []step{
			{10 * time.Second, 2, true, 1, 0},
			{20 * time.Second, 1, true, 0, 0},
			{59 * time.Second, 1, false, 0, time.Second},
			// Boundary: the window is aligned, so the next one starts at
			// exactly 1m and the full limit is available again — up to 2×limit
			// can pass within a second spanning the boundary (documented).
			{time.Minute, 3, true, 0, 0},
			{time.Minute + 500*time.Millisecond, 1, false, 0, 59500 * time.Millisecond},
			{3 * time.Minute, 4 - 1, true, 0, 0},
		})
	})
}

func TestFixedWindowDailyAlignedToUTCMidnight(t *testing.T) {
	allBackends(t, func(t *testing.T, newLimiter limiterFactory) {
		lim := throttle.Limit{Name: "daily", Algorithm: throttle.FixedWindow, Rate: throttle.PerDay(2)}
		runSteps(t, newLimiter, lim, []step{
			{23 * time.Hour, 2, true, 0, 0},
			{23*time.Hour + 59*time.Minute, 1, false, 0, time.Minute},
			{24 * time.Hour, 1, true, 1, 0},
		})
	})
}

func TestConcurrencyLeases(t *testing.T) {
	allBackends(t, func(t *testing.T, newLimiter limiterFactory) {
		clk := testutil.NewClock(t0)
		l := newLimiter(clk.Now)
		lim := throttle.Limit{Name: "c", Algorithm: throttle.Concurrency, Max: 2, Lease: 10 * time.Second}
		req := throttle.Request{Key: "test:conc", Limit: lim}
		ctx := context.Background()

		a, err := l.Consume(ctx, req)
		require.NoError(t, err)
		require.True(t, a.Allowed)
		require.Len(t, a.Leases, 1)
		require.Equal(t, int64(1), a.Limits[0].Remaining)
		require.Equal(t, t0.Add(10*time.Second), a.Limits[0].Reset.UTC(), "full again when the last lease expires")

		clk.Set(t0.Add(time.Second))
		b, err := l.Consume(ctx, req)
		require.NoError(t, err)
		require.True(t, b.Allowed)

		c, err := l.Consume(ctx, req)
		require.NoError(t, err)
		require.False(t, c.Allowed)
		require.Empty(t, c.Leases)
		require.Equal(t, 9*time.Second, c.RetryAfter, "until the oldest lease expires")

		// Released slots are free at once.
		require.NoError(t, l.Release(ctx, a.Leases))
		clk.Set(t0.Add(5 * time.Second))
		d, err := l.Consume(ctx, req)
		require.NoError(t, err)
		require.True(t, d.Allowed)

		// A worker that dies never releases: its lease expires and is reclaimed.
		clk.Set(t0.Add(12 * time.Second))
		e, err := l.Consume(ctx, req)
		require.NoError(t, err)
		require.True(t, e.Allowed, "b's lease expired at 11s")
		st, err := l.Status(ctx, req)
		require.NoError(t, err)
		require.Equal(t, int64(0), st.Limits[0].Remaining, "d and e hold leases; b was reclaimed")
	})
}

func TestConsumeIsAllOrNothing(t *testing.T) {
	allBackends(t, func(t *testing.T, newLimiter limiterFactory) {
		clk := testutil.NewClock(t0)
		l := newLimiter(clk.Now)
		ctx := context.Background()
		number := throttle.Request{Key: "whatsapp:number:1065", Limit: throttle.Limit{Name: "throughput", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(80), Burst: 80}}
		pair := throttle.Request{Key: "whatsapp:pair:1065:+12025550123", Limit: throttle.Limit{Name: "pair", Algorithm: throttle.GCRA, Rate: throttle.Rate{Limit: 1, Period: 6 * time.Second}}}
		daily := throttle.Request{Key: "whatsapp:daily:+12025550123", Limit: throttle.Limit{Name: "daily", Algorithm: throttle.FixedWindow, Rate: throttle.PerDay(250)}}

		d, err := l.Consume(ctx, number, pair, daily)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.Equal(t, []int64{79, 0, 249}, remaining(d))

		// The pair limit blocks: nothing is taken from the other two.
		clk.Set(t0.Add(2 * time.Second))
		d, err = l.Consume(ctx, number, pair, daily)
		require.NoError(t, err)
		require.False(t, d.Allowed)
		require.Equal(t, "pair", d.BlockedBy)
		require.Equal(t, 4*time.Second, d.RetryAfter)
		require.Equal(t, []int64{80, 0, 249}, remaining(d), "number refilled, daily untouched")
		blk, ok := d.Blocking()
		require.True(t, ok)
		require.Equal(t, "whatsapp:pair:1065:+12025550123", blk.Key)

		// Check peeks without taking.
		clk.Set(t0.Add(6 * time.Second))
		c, err := l.Check(ctx, number, pair, daily)
		require.NoError(t, err)
		require.True(t, c.Allowed)
		require.Equal(t, []int64{80, 1, 249}, remaining(c))
		d, err = l.Consume(ctx, number, pair, daily)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.Equal(t, []int64{79, 0, 248}, remaining(d))
	})
}

func remaining(d throttle.Decision) []int64 {
	out := make([]int64, len(d.Limits))
	for i, ld := range d.Limits {
		out[i] = ld.Remaining
	}
	return out
}

func TestEveryKeyHasTTL(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		l := throttle.NewRedis(rdb, throttle.Options{Prefix: "ttl"})
		ctx := context.Background()
		for i := range 20 {
			_, err := l.Consume(ctx,
				throttle.Request{Key: fmt.Sprintf("s:g:%d", i), Limit: throttle.Limit{Name: "g", Algorithm: throttle.GCRA, Rate: throttle.PerMinute(5)}},
				throttle.Request{Key: fmt.Sprintf("s:f:%d", i), Limit: throttle.Limit{Name: "f", Algorithm: throttle.FixedWindow, Rate: throttle.PerHour(5)}},
				throttle.Request{Key: fmt.Sprintf("s:c:%d", i), Limit: throttle.Limit{Name: "c", Algorithm: throttle.Concurrency, Max: 5}})
			require.NoError(t, err)
		}
		keys, err := testutil.AllKeys(ctx, rdb, "ttl:*")
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(keys), 60, "limiter keys, plus the events stream and its markers")
		for _, k := range keys {
			ttl, err := rdb.PTTL(ctx, k).Result()
			require.NoError(t, err)
			require.Greater(t, ttl, time.Duration(0), "key %s has no TTL", k)
		}
	})
}

func TestRequestErrors(t *testing.T) {
	l := throttle.NewRedis(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), throttle.Options{})
	ctx := context.Background()
	g := throttle.Limit{Name: "g", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1), Burst: 2}
	_, err := l.Consume(ctx)
	require.ErrorIs(t, err, throttle.ErrNoRequests)
	_, err = l.Consume(ctx, throttle.Request{Key: "a:x", Limit: g}, throttle.Request{Key: "a:x", Limit: g})
	require.ErrorIs(t, err, throttle.ErrBadRequest, "two limits of one name on one key")
	_, err = l.Consume(ctx, throttle.Request{Key: "a:x", Limit: g, Cost: 3})
	require.ErrorIs(t, err, throttle.ErrCostOverLimit)
	_, err = l.Consume(ctx, throttle.Request{Key: "a:x", Limit: throttle.Limit{Name: "bad", Algorithm: throttle.FixedWindow, Rate: throttle.Rate{Limit: 1, Period: 6 * time.Second}}})
	require.ErrorContains(t, err, "window 6s: fixed_window needs one of 1s, 30s, 1m, 5m, 1h, 1d")
}

func TestKeyHashTag(t *testing.T) {
	l := throttle.NewRedis(nil, throttle.Options{})
	require.Equal(t, "sluice:{whatsapp}:pair:1065:+12025550123", l.Key("whatsapp:pair:1065:+12025550123"))
	require.Equal(t, "sluice:{sms}", l.Key("sms"))
}

func TestFixedWindowWaitLinesUpWaiters(t *testing.T) {
	allBackends(t, func(t *testing.T, newLimiter limiterFactory) {
		clk := testutil.NewClock(t0.Add(200 * time.Millisecond))
		l := newLimiter(clk.Now)
		ctx := context.Background()
		req := throttle.Request{Key: "sms:sender:+12025550100", Limit: throttle.Limit{Name: "sender", Algorithm: throttle.FixedWindow, Rate: throttle.PerSecond(2)}}
		var waits []time.Duration
		for range 7 {
			d, err := l.Consume(ctx, req)
			require.NoError(t, err)
			waits = append(waits, d.Wait)
			if !d.Allowed {
				require.Equal(t, 800*time.Millisecond, d.RetryAfter, "exact: the next window")
			}
		}
		// Two fit now; five waiters are sent to the next windows, two per window.
		ms := time.Millisecond
		require.Equal(t, []time.Duration{0, 0, 800 * ms, 800 * ms, 1800 * ms, 1800 * ms, 2800 * ms}, waits)

		// Check reports the wait a consumer would get, and counts no waiter.
		for range 2 {
			c, err := l.Check(ctx, req)
			require.NoError(t, err)
			require.Equal(t, 800*ms, c.RetryAfter)
			require.Equal(t, 2800*ms, c.Wait)
		}

		// Places are counted afresh in each window.
		clk.Set(t0.Add(10*time.Second + 100*ms))
		for range 2 {
			d, err := l.Consume(ctx, req)
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
		d, err := l.Consume(ctx, req)
		require.NoError(t, err)
		require.Equal(t, 900*ms, d.Wait)
	})
}

func TestOnlyTheLimitThatSetsTheWaitCountsAWaiter(t *testing.T) {
	allBackends(t, func(t *testing.T, newLimiter limiterFactory) {
		clk := testutil.NewClock(t0)
		l := newLimiter(clk.Now)
		ctx := context.Background()
		number := throttle.Request{Key: "whatsapp:number:1", Limit: throttle.Limit{Name: "throughput", Algorithm: throttle.FixedWindow, Rate: throttle.PerSecond(1)}}
		pair := func(to string) throttle.Request {
			return throttle.Request{Key: "whatsapp:pair:1:" + to, Limit: throttle.Limit{Name: "pair", Algorithm: throttle.GCRA, Rate: throttle.Rate{Limit: 1, Period: 6 * time.Second}}}
		}
		d, err := l.Consume(ctx, number, pair("+1"))
		require.NoError(t, err)
		require.True(t, d.Allowed)
		// Blocked by both; the pair's 6 s wait is the longer, so the
		// throughput window does not count this caller.
		clk.Set(t0.Add(500 * time.Millisecond))
		d, err = l.Consume(ctx, number, pair("+1"))
		require.NoError(t, err)
		require.Equal(t, "pair", d.BlockedBy)
		require.Equal(t, 5500*time.Millisecond, d.Wait)
		// So the next caller blocked only by throughput is first in line.
		d, err = l.Consume(ctx, number, pair("+2"))
		require.NoError(t, err)
		require.Equal(t, "throughput", d.BlockedBy)
		require.Equal(t, 500*time.Millisecond, d.Wait)
		d, err = l.Consume(ctx, number, pair("+3"))
		require.NoError(t, err)
		require.Equal(t, 1500*time.Millisecond, d.Wait, "one per window: second in line")
	})
}

// A plan extends its books' lifetimes once per script, at its end
// (extend_later in prelude.lua): every key a plan or a reservation writes
// still has a TTL, and the number's books outlive the last send planned on
// them.
func TestPlannedBooksOutliveTheirPlan(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		clock := testutil.NewClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
		l := throttle.NewRedis(rdb, throttle.Options{Prefix: "books", Clock: clock.Now, OverrideRefresh: -1})
		ctx := context.Background()
		opts := throttle.ReserveOptions{Headroom: 0.015}
		var sends []throttle.Send
		for i := range 400 {
			// Two tenants, and every recipient twice: the second send of a
			// pair is planned 6s behind the first.
			sends = append(sends, throttle.Send{TaskID: fmt.Sprint("task-", i), Tenant: fmt.Sprint("t", i%2),
				Requests: whatsAppSendRequests("106540352242922", fmt.Sprintf("+1202555%04d", i%200))})
		}
		planned, err := l.Plan(ctx, opts, sends)
		require.NoError(t, err)
		last := planned[0].At
		for _, p := range planned {
			if p.At.After(last) {
				last = p.At
			}
		}
		require.Greater(t, last.Sub(clock.Now()), 5*time.Second, "a plan some seconds long")
		// The first sends come back and are reserved at their places; the
		// last ones are planned again (they keep their places).
		for i, p := range planned[:50] {
			clock.Set(p.At)
			o := opts
			o.TaskID, o.Tenant = sends[i].TaskID, sends[i].Tenant
			_, err := l.Reserve(ctx, o, sends[i].Requests...)
			require.NoError(t, err)
		}
		_, err = l.Plan(ctx, opts, sends[350:]) // planned again: the same places
		require.NoError(t, err)

		keys, err := testutil.AllKeys(ctx, rdb, "books:*")
		require.NoError(t, err)
		require.NotEmpty(t, keys)
		books := 0
		for _, k := range keys {
			ttl, err := rdb.PTTL(ctx, k).Result()
			require.NoError(t, err)
			require.Greater(t, ttl, time.Duration(0), "key %s has no TTL", k)
			if strings.HasSuffix(k, "|plan") || strings.HasSuffix(k, "|backlog") {
				books++
				if strings.Contains(k, ":number:") {
					// Redis counts a TTL on its own clock, the test's is set ahead.
					require.Greater(t, ttl, last.Sub(clock.Now()), "book %s expires before its last planned send", k)
				}
			}
		}
		require.Greater(t, books, 100, "the number's and the pairs' books")
	})
}
