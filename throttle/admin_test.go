package throttle_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/throttle"
)

func TestListReset(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		clk := testutil.NewClock(t0)
		l := throttle.NewRedis(rdb, throttle.Options{Prefix: "adm", Clock: clk.Now})
		ctx := context.Background()
		g := throttle.Limit{Name: "pair", Algorithm: throttle.GCRA, Rate: throttle.Rate{Limit: 1, Period: 6 * time.Second}}
		f := throttle.Limit{Name: "throughput", Algorithm: throttle.FixedWindow, Rate: throttle.PerSecond(80)}
		c := throttle.Limit{Name: "conc", Algorithm: throttle.Concurrency, Max: 3}
		for i := range 30 {
			_, err := l.Consume(ctx, throttle.Request{Key: fmt.Sprintf("whatsapp:pair:1:+1202555%04d", i), Limit: g})
			require.NoError(t, err)
		}
		_, err := l.Consume(ctx, throttle.Request{Key: "whatsapp:number:1", Limit: f, Cost: 5}, throttle.Request{Key: "whatsapp:conc", Limit: c})
		require.NoError(t, err)

		var all []string
		var cursor uint64
		for {
			keys, next, err := l.List(ctx, "whatsapp:pair:", cursor, 7)
			require.NoError(t, err)
			all = append(all, keys...)
			if next == 0 {
				break
			}
			cursor = next
		}
		sort.Strings(all)
		require.Len(t, all, 30)
		require.Equal(t, "whatsapp:pair:1:+12025550000", all[0])

		n, err := l.Reset(ctx, "whatsapp:number:1", "whatsapp:missing")
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		n, err = l.ResetPrefix(ctx, "whatsapp:pair:")
		require.NoError(t, err)
		require.Equal(t, int64(30), n)
		var left []string // (on a cluster, each master is a page of its own)
		require.NoError(t, l.Each(ctx, "", func(k string) error { left = append(left, k); return nil }))
		require.Equal(t, []string{"whatsapp:conc"}, left)
	})
}

func TestCleanupReclaimsLeasesAndTTLLessState(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		// A lease taken "an hour ago" by a worker that died.
		past := testutil.NewClock(time.Now().Add(-time.Hour))
		old := throttle.NewRedis(rdb, throttle.Options{Prefix: "cl", Clock: past.Now})
		c := throttle.Limit{Name: "conc", Algorithm: throttle.Concurrency, Max: 3, Lease: time.Minute}
		_, err := old.Consume(ctx, throttle.Request{Key: "sms:account:AC1", Limit: c})
		require.NoError(t, err)
		l := throttle.NewRedis(rdb, throttle.Options{Prefix: "cl"})
		_, err = l.Consume(ctx, throttle.Request{Key: "sms:account:AC1", Limit: c}) // a live lease (this one reclaims the old one itself)
		require.NoError(t, err)
		_, err = old.Consume(ctx, throttle.Request{Key: "sms:account:AC1", Limit: c}) // expired again, as seen from now
		require.NoError(t, err)
		require.NoError(t, rdb.Set(ctx, l.Key("sms:stray"), "1", 0).Err()) // state without TTL

		st, err := l.Cleanup(ctx)
		require.NoError(t, err)
		require.Equal(t, throttle.CleanupStats{Scanned: 2, ReclaimedLeases: 1, RemovedKeys: 1}, st)
		n, err := rdb.ZCard(ctx, l.Key("sms:account:AC1")).Result()
		require.NoError(t, err)
		require.Equal(t, int64(1), n, "the live lease stays")

		st, err = l.Cleanup(ctx)
		require.NoError(t, err)
		require.Equal(t, throttle.CleanupStats{Scanned: 1}, st, "nothing left to do")
	})
}

// TestScanBatchPagesEveryKey: with Options.ScanBatch 1 (config's
// cleanup.batch), Each still visits every key once, page by page.
func TestScanBatchPagesEveryKey(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		lim := throttle.NewRedis(rdb, throttle.Options{Prefix: "sb", ScanBatch: 1})
		ctx := context.Background()
		want := map[string]bool{}
		for i := range 7 {
			key := fmt.Sprintf("sms:sender:+1202555010%d", i)
			_, err := lim.Consume(ctx, throttle.Request{Key: key, Limit: throttle.Limit{Name: "s", Algorithm: throttle.FixedWindow, Rate: throttle.PerSecond(1)}})
			require.NoError(t, err)
			want[key] = true
		}
		got := map[string]bool{}
		require.NoError(t, lim.Each(ctx, "", func(k string) error { got[k] = true; return nil }))
		require.Equal(t, want, got)
	})
}
