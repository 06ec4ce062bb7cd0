package throttle_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/throttle"
)

func TestOverridesApplyToEveryLimiterOnTheServer(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		clk := testutil.NewClock(t0)
		// Two workers; the second re-reads overrides on every call, the
		// first at the default refresh (500ms: within the promised 1s).
		admin := throttle.NewRedis(rdb, throttle.Options{Prefix: "ov", Clock: clk.Now})
		worker := throttle.NewRedis(rdb, throttle.Options{Prefix: "ov", Clock: clk.Now, OverrideRefresh: time.Nanosecond})
		daily := throttle.Limit{Name: "daily", Algorithm: throttle.FixedWindow, Rate: throttle.PerDay(2)}
		req := func(key string) throttle.Request { return throttle.Request{Key: key, Limit: daily} }

		d, err := worker.Consume(ctx, req("whatsapp:daily:1065"))
		require.NoError(t, err)
		require.Equal(t, int64(2), d.Limit)

		require.NoError(t, admin.SetOverride(ctx, "whatsapp:daily:1065", throttle.Override{Rate: throttle.PerDay(10000)}))
		require.NoError(t, admin.SetOverride(ctx, "whatsapp:daily:*", throttle.Override{Rate: throttle.PerDay(5)}))
		d, err = worker.Consume(ctx, req("whatsapp:daily:1065"))
		require.NoError(t, err)
		require.Equal(t, []int64{10000, 9998}, []int64{d.Limit, d.Remaining}, "exact key wins; the count so far stays")
		d, err = worker.Consume(ctx, req("whatsapp:daily:2000"))
		require.NoError(t, err)
		require.Equal(t, int64(5), d.Limit, "the pattern")

		// An override the limit cannot take is ignored, not an error.
		require.NoError(t, admin.SetOverride(ctx, "whatsapp:daily:3000", throttle.Override{Rate: throttle.Rate{Limit: 1, Period: 7 * time.Second}}))
		d, err = worker.Consume(ctx, req("whatsapp:daily:3000"))
		require.NoError(t, err)
		require.Equal(t, int64(2), d.Limit)

		all, err := admin.Overrides(ctx)
		require.NoError(t, err)
		require.Len(t, all, 3)
		require.Equal(t, throttle.PerDay(5), all["whatsapp:daily:*"].Rate)

		ok, err := admin.UnsetOverride(ctx, "whatsapp:daily:1065")
		require.NoError(t, err)
		require.True(t, ok)
		d, err = worker.Consume(ctx, req("whatsapp:daily:1065"))
		require.NoError(t, err)
		require.Equal(t, int64(5), d.Limit, "back to the pattern")

		require.ErrorIs(t, admin.SetOverride(ctx, "whatsapp:daily:1", throttle.Override{}), throttle.ErrBadRequest)
		keys, _, err := admin.List(ctx, "", 0, 100)
		require.NoError(t, err)
		require.NotContains(t, keys, "_overrides", "Sluice's own keys are not limiter keys")
	})
}

func TestEventsOncePerKeyAndWindow(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		clk := testutil.NewClock(t0.Add(10 * time.Second))
		l := throttle.NewRedis(rdb, throttle.Options{Prefix: "ev", Clock: clk.Now})
		// A second process: its own in-memory marks, the same stream.
		other := throttle.NewRedis(rdb, throttle.Options{Prefix: "ev", Clock: clk.Now})
		perMin := throttle.Request{Key: "api:user:42", Limit: throttle.Limit{Name: "minute", Algorithm: throttle.FixedWindow, Rate: throttle.PerMinute(20)}}

		for i := range 25 { // 20 allowed, then 5 blocked
			lim := throttle.Limiter(l)
			if i%2 == 1 {
				lim = other
			}
			_, err := lim.Consume(ctx, perMin)
			require.NoError(t, err)
		}
		evs, next, err := l.Events(ctx, "0", 100, 0)
		require.NoError(t, err)
		require.Len(t, evs, 2, "one warning when remaining fell below 10%% (2 of 20), one exceeded")
		require.Equal(t, throttle.EventWarning, evs[0].Type)
		require.Equal(t, []any{"api:user:42", "minute", int64(1), int64(2), int64(20)}, []any{evs[0].Key, evs[0].Name, evs[0].Remaining, evs[0].Threshold, evs[0].Limit})
		require.Equal(t, throttle.EventExceeded, evs[1].Type)
		require.Equal(t, []any{"api:user:42", int64(20), time.Minute, t0.Add(time.Minute)}, []any{evs[1].Key, evs[1].Limit, evs[1].Window, evs[1].Reset.UTC()})

		// The next window may raise them again.
		clk.Set(t0.Add(70 * time.Second))
		for range 21 {
			_, err := l.Consume(ctx, perMin)
			require.NoError(t, err)
		}
		evs, _, err = l.Events(ctx, next, 100, 0)
		require.NoError(t, err)
		require.Len(t, evs, 2)

		n, err := rdb.PTTL(ctx, l.StreamKey()).Result()
		require.NoError(t, err)
		require.Positive(t, n, "the stream has a TTL too")
	})
}
