package throttle_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/throttle"
)

// localT0 is a UTC midnight, so fixed windows of every length start there.
var localT0 = testutil.T0

func newLocalClock() *testutil.Clock { return testutil.NewClock(localT0) }

var (
	localDaily  = throttle.Limit{Name: "daily", Algorithm: throttle.FixedWindow, Rate: throttle.PerDay(1)}
	localBucket = throttle.Limit{Name: "bucket", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(10)}
)

func TestLocalKeepsAtMostMaxKeys(t *testing.T) {
	clk := newLocalClock()
	const maxKeys = 1000
	l := throttle.NewLocal(throttle.LocalOptions{Clock: clk.Now, MaxKeys: maxKeys})
	ctx := context.Background()
	for i := range 3 * maxKeys {
		// Every key is live (a full day window): eviction has no idle key
		// to take and must still keep the bound.
		d, err := l.Consume(ctx, throttle.Request{Key: fmt.Sprintf("t:live:%d", i), Limit: localDaily})
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.LessOrEqual(t, l.Len(), maxKeys)
	}
	require.Equal(t, maxKeys, l.Len())
	keys, _, err := l.List(ctx, "", 0, 10*maxKeys)
	require.NoError(t, err)
	require.Len(t, keys, maxKeys)
	require.Equal(t, "t:live:2000", keys[0], "the most recently used thousand are kept")
}

func TestLocalEvictsIdleKeysFirst(t *testing.T) {
	clk := newLocalClock()
	l := throttle.NewLocal(throttle.LocalOptions{Clock: clk.Now, MaxKeys: 10})
	ctx := context.Background()
	daily := func(i int) throttle.Request {
		return throttle.Request{Key: fmt.Sprintf("t:daily:%d", i), Limit: localDaily}
	}
	for i := range 5 {
		_, err := l.Consume(ctx, daily(i))
		require.NoError(t, err)
	}
	// The daily keys are now the least recently used. Bucket keys refill in
	// 100ms and expire a second later; every 150ms a new one arrives, so the
	// bound is hit while older buckets are idle but not yet expired.
	for i := range 100 {
		clk.Advance(150 * time.Millisecond)
		_, err := l.Consume(ctx, throttle.Request{Key: fmt.Sprintf("t:bucket:%d", i), Limit: localBucket})
		require.NoError(t, err)
		require.LessOrEqual(t, l.Len(), 10)
	}
	require.Equal(t, 10, l.Len(), "the bound was hit")
	for i := range 5 {
		d, err := l.Check(ctx, daily(i))
		require.NoError(t, err)
		require.False(t, d.Allowed, "live key %d was kept: idle buckets went first", i)
	}
}

func TestLocalEvictsLeastRecentlyUsedWhenAllLive(t *testing.T) {
	clk := newLocalClock()
	l := throttle.NewLocal(throttle.LocalOptions{Clock: clk.Now, MaxKeys: 3})
	ctx := context.Background()
	req := func(k string) throttle.Request { return throttle.Request{Key: "t:" + k, Limit: localDaily} }
	for _, k := range []string{"a", "b", "c"} {
		_, err := l.Consume(ctx, req(k))
		require.NoError(t, err)
	}
	_, err := l.Check(ctx, req("a")) // a read is a use: b is now the LRU key
	require.NoError(t, err)
	_, err = l.Consume(ctx, req("d"))
	require.NoError(t, err)

	keys, _, err := l.List(ctx, "t:", 0, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"t:a", "t:c", "t:d"}, keys)
	// The documented cost: an evicted live key starts over, so its limit
	// admits again within the window.
	d, err := l.Consume(ctx, req("b"))
	require.NoError(t, err)
	require.True(t, d.Allowed)
}

func TestLocalDropsExpiredState(t *testing.T) {
	clk := newLocalClock()
	l := throttle.NewLocal(throttle.LocalOptions{Clock: clk.Now})
	ctx := context.Background()
	second := throttle.Limit{Name: "s", Algorithm: throttle.FixedWindow, Rate: throttle.PerSecond(1)}
	_, err := l.Consume(ctx,
		throttle.Request{Key: "t:g", Limit: localBucket},
		throttle.Request{Key: "t:f", Limit: second})
	require.NoError(t, err)
	require.Equal(t, 2, l.Len())
	// The keys live as long as their Redis TTL: until the state is unused
	// (100ms, 1s), plus a second.
	clk.Advance(1100 * time.Millisecond)
	require.Equal(t, 1, l.Len())
	clk.Advance(time.Second)
	require.Zero(t, l.Len())
	n, err := l.Reset(ctx, "t:g", "t:f")
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestLocalRelease(t *testing.T) {
	clk := newLocalClock()
	l := throttle.NewLocal(throttle.LocalOptions{Clock: clk.Now})
	ctx := context.Background()
	req := throttle.Request{Key: "t:conc", Limit: throttle.Limit{Name: "conc", Algorithm: throttle.Concurrency, Max: 3}, Cost: 2}

	a, err := l.Consume(ctx, req)
	require.NoError(t, err)
	require.True(t, a.Allowed)
	require.Len(t, a.Leases, 2, "one lease per unit")
	require.Equal(t, "t:conc", a.Leases[0].Key)
	require.NotEqual(t, a.Leases[0].ID, a.Leases[1].ID)

	b, err := l.Consume(ctx, req)
	require.NoError(t, err)
	require.False(t, b.Allowed)
	require.Empty(t, b.Leases)
	require.Equal(t, 100*time.Millisecond, b.RetryAfter, "capped at the default ConcurrencyRetry, not the 30s lease")
	require.Equal(t, 100*time.Millisecond, b.Wait)

	require.NoError(t, l.Release(ctx, a.Leases[:1]))
	require.NoError(t, l.Release(ctx, a.Leases[:1]), "releasing twice is not an error")
	require.NoError(t, l.Release(ctx, []throttle.Lease{{Key: "t:none", ID: "x"}}), "nor is an unknown lease")
	st, err := l.Status(ctx, req)
	require.NoError(t, err)
	require.Equal(t, int64(2), st.Remaining)

	require.NoError(t, l.Release(ctx, a.Leases[1:]))
	require.Zero(t, l.Len(), "a set whose last lease is released is gone, as in Redis")

	// A lease never released expires after Limit.Lease (30s by default).
	c, err := l.Consume(ctx, req)
	require.NoError(t, err)
	require.True(t, c.Allowed)
	clk.Advance(throttle.DefaultLease)
	st, err = l.Status(ctx, req)
	require.NoError(t, err)
	require.Equal(t, int64(3), st.Remaining)
}

func TestLocalResetAndList(t *testing.T) {
	clk := newLocalClock()
	l := throttle.NewLocal(throttle.LocalOptions{Clock: clk.Now})
	ctx := context.Background()
	for _, k := range []string{"a:3", "b:1", "a:1", "a:2", "ab:1"} {
		_, err := l.Consume(ctx, throttle.Request{Key: k, Limit: localDaily})
		require.NoError(t, err)
	}
	var pages [][]string
	var cursor uint64
	for {
		keys, next, err := l.List(ctx, "a:", cursor, 2)
		require.NoError(t, err)
		pages = append(pages, keys)
		if next == 0 {
			break
		}
		cursor = next
	}
	require.Equal(t, [][]string{{"a:1", "a:2"}, {"a:3"}}, pages, "sorted, a page of count at a time")

	n, err := l.Reset(ctx, "a:1", "zz:1")
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	d, err := l.Consume(ctx, throttle.Request{Key: "a:1", Limit: localDaily})
	require.NoError(t, err)
	require.True(t, d.Allowed, "reset: back to full capacity")

	n, err = l.ResetPrefix(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, int64(4), n)
	keys, next, err := l.List(ctx, "", 0, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"b:1"}, keys)
	require.Zero(t, next)
}

// TestLocalCallIsOneStepAcrossScopes: unlike Redis, Local decides a call
// spanning scopes in one step, so a blocked call reports what every limit
// has now and never takes anything, not even for a moment.
func TestLocalCallIsOneStepAcrossScopes(t *testing.T) {
	clk := newLocalClock()
	l := throttle.NewLocal(throttle.LocalOptions{Clock: clk.Now})
	ctx := context.Background()
	bucket := throttle.Request{Key: "a:bucket", Limit: throttle.Limit{Name: "bucket", Algorithm: throttle.GCRA, Rate: throttle.PerMinute(1), Burst: 2}}
	daily := throttle.Request{Key: "b:daily", Limit: localDaily}
	d, err := l.Consume(ctx, bucket, daily)
	require.NoError(t, err)
	require.True(t, d.Allowed)

	d, err = l.Consume(ctx, bucket, daily)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.Equal(t, "daily", d.BlockedBy)
	require.Equal(t, int64(1), d.Limits[0].Remaining, "available now")
	require.Zero(t, d.Limits[0].Taken)
	st, err := l.Status(ctx, bucket)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Remaining)
}

// TestLocalGCRARoundsLikeTheLua: with a 1s/3 emission interval the Lua
// stores each TAT rounded up to the microsecond; Local re-anchors its
// rate.Limiter on it, so the retries match to the microsecond.
func TestLocalGCRARoundsLikeTheLua(t *testing.T) {
	clk := newLocalClock()
	l := throttle.NewLocal(throttle.LocalOptions{Clock: clk.Now})
	ctx := context.Background()
	req := throttle.Request{Key: "t:third", Limit: throttle.Limit{Name: "third", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(3)}}
	us := time.Microsecond
	for i, s := range []struct {
		advance time.Duration
		allowed bool
		retry   time.Duration
		reset   time.Duration // since localT0
	}{
		{0, true, 0, 333334 * us},                  // TAT ceil(333333.33)
		{0, false, 333334 * us, 333334 * us},       // ceil(333333.33 - 0)
		{333333 * us, false, us, 333334 * us},      // one microsecond short
		{us, true, 0, 666668 * us},                 // TAT ceil(666667.33)
		{0, false, 333334 * us, 666668 * us},       // the rounding carries over
		{10 * time.Second, true, 0, 10666668 * us}, // full again: the TAT restarts at now
	} {
		clk.Advance(s.advance)
		d, err := l.Consume(ctx, req)
		require.NoError(t, err)
		require.Equal(t, []any{s.allowed, s.retry, localT0.Add(s.reset)}, []any{d.Allowed, d.RetryAfter, d.Reset.UTC()}, "step %d", i)
	}
}

func TestLocalContextDone(t *testing.T) {
	l := throttle.NewLocal(throttle.LocalOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := l.Consume(ctx, throttle.Request{Key: "t:k", Limit: localBucket})
	require.ErrorIs(t, err, context.Canceled)
	_, err = l.Consume(ctx)
	require.ErrorIs(t, err, throttle.ErrNoRequests, "bad requests are reported first, as by Redis")
	require.ErrorIs(t, l.Release(ctx, []throttle.Lease{{Key: "t:k", ID: "x"}}), context.Canceled)
	_, _, err = l.List(ctx, "", 0, 0)
	require.ErrorIs(t, err, context.Canceled)
}

// TestLocalConcurrentCallers hammers one Local from many goroutines (run
// with -race): a shared window admits exactly its limit, and no more
// leases are held at once than Max.
func TestLocalConcurrentCallers(t *testing.T) {
	clk := newLocalClock()
	l := throttle.NewLocal(throttle.LocalOptions{Clock: clk.Now, MaxKeys: 50})
	ctx := context.Background()
	const limit, maxHeld = 500, 4
	window := throttle.Request{Key: "w:total", Limit: throttle.Limit{Name: "total", Algorithm: throttle.FixedWindow, Rate: throttle.PerDay(limit)}}
	conc := throttle.Request{Key: "c:slots", Limit: throttle.Limit{Name: "slots", Algorithm: throttle.Concurrency, Max: maxHeld}}
	var allowed, held, peak atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 200 {
				per := throttle.Request{Key: fmt.Sprintf("p:%d:%d", g, i%70), Limit: localBucket} // churns past MaxKeys
				d, err := l.Consume(ctx, window, conc, per)
				if err != nil {
					t.Error(err)
					return
				}
				if !d.Allowed {
					continue
				}
				allowed.Add(1)
				n := held.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				held.Add(-1)
				if err := l.Release(ctx, d.Leases); err != nil {
					t.Error(err)
					return
				}
				if i%50 == 0 {
					_, _, _ = l.List(ctx, "p:", 0, 10)
					clk.Advance(time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(limit), allowed.Load(), "exactly the window's limit, never more")
	require.LessOrEqual(t, peak.Load(), int64(maxHeld))
	require.LessOrEqual(t, l.Len(), 50)
}

// BenchmarkLocalConsume: WhatsApp's three limits in one call, from
// parallel callers, in-process.
func BenchmarkLocalConsume(b *testing.B) {
	consumeWhatsAppCalls(b, throttle.NewLocal(throttle.LocalOptions{}))
}
