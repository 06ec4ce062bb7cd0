package throttle_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/throttle"
)

// TestGCRAFastPathMatchesGenericScript: a call of one GCRA limit runs
// gcra_one.lua; with any other request beside it, consume.lua's gcra.lua.
// Both must decide the same on a random sequence.
func TestGCRAFastPathMatchesGenericScript(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		clk := testutil.NewClock(t0)
		l := throttle.NewRedis(rdb, throttle.Options{Prefix: "fp", Clock: clk.Now})
		idle := throttle.Request{Key: "fp:idle", Limit: throttle.Limit{Name: "idle", Algorithm: throttle.FixedWindow, Rate: throttle.PerSecond(1 << 40)}}
		rng := rand.New(rand.NewPCG(7, 11))
		for _, lim := range []throttle.Limit{
			{Name: "g", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(10), Burst: 5},
			{Name: "g", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(3), Burst: 2},
			{Name: "g", Algorithm: throttle.GCRA, Rate: throttle.Rate{Limit: 1, Period: 6 * time.Second}},
		} {
			now := t0
			for i := range 2000 {
				now = now.Add(time.Duration(rng.Int64N(int64(2*lim.Rate.Interval()))) / time.Microsecond * time.Microsecond)
				clk.Set(now)
				cost := 1 + rng.Int64N(lim.Capacity())
				check := rng.IntN(5) == 0
				run := l.Consume
				if check {
					run = l.Check
				}
				fast, err := run(ctx, throttle.Request{Key: "fp:fast", Limit: lim, Cost: cost})
				require.NoError(t, err)
				generic, err := run(ctx, throttle.Request{Key: "fp:generic", Limit: lim, Cost: cost}, idle)
				require.NoError(t, err)
				f, g := fast.Limits[0], generic.Limits[0]
				f.Key, g.Key = "", ""
				require.Equal(t, g, f, "%v step %d (cost %d, check %v)", lim, i, cost, check)
			}
		}
	})
}
