package control_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/control"
	"github.com/sluice-dev/sluice/internal/testutil"
	"github.com/sluice-dev/sluice/throttle"
)

// t0 is a UTC midnight, so fixed windows of every length start there.
var t0 = time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)

func at0() time.Time { return t0 }

var backends = testutil.Backends

func TestInspectReadsEachAlgorithmsState(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		l := throttle.NewRedis(rdb, throttle.Options{Prefix: "adm", Clock: at0})
		ctx := context.Background()
		g := throttle.Limit{Name: "pair", Algorithm: throttle.GCRA, Rate: throttle.Rate{Limit: 1, Period: 6 * time.Second}}
		f := throttle.Limit{Name: "throughput", Algorithm: throttle.FixedWindow, Rate: throttle.PerSecond(80)}
		c := throttle.Limit{Name: "conc", Algorithm: throttle.Concurrency, Max: 3}
		_, err := l.Consume(ctx, throttle.Request{Key: "whatsapp:pair:1:+12025550000", Limit: g})
		require.NoError(t, err)
		_, err = l.Consume(ctx, throttle.Request{Key: "whatsapp:number:1", Limit: f, Cost: 5}, throttle.Request{Key: "whatsapp:conc", Limit: c})
		require.NoError(t, err)

		st, err := control.Inspect(ctx, l, "whatsapp:pair:1:+12025550000")
		require.NoError(t, err)
		require.Equal(t, "adm:{whatsapp}:pair:1:+12025550000", st.Key)
		require.Equal(t, "string", st.Type)
		require.Equal(t, fmt.Sprint(t0.Add(6*time.Second).UnixMicro()), st.Value, "the TAT")
		require.Positive(t, st.Bytes)
		require.Greater(t, st.TTL, time.Duration(0))

		st, err = control.Inspect(ctx, l, "whatsapp:number:1")
		require.NoError(t, err)
		require.Equal(t, "hash", st.Type)
		require.Equal(t, map[string]string{"w": fmt.Sprint(t0.UnixMicro()), "c": "5"}, st.Fields)

		st, err = control.Inspect(ctx, l, "whatsapp:conc")
		require.NoError(t, err)
		require.Equal(t, int64(1), st.Count)
		require.Len(t, st.Members, 1)
		require.Equal(t, t0.Add(throttle.DefaultLease), st.Members[0].At.UTC(), "lease expiry")

		st, err = control.Inspect(ctx, l, "whatsapp:missing")
		require.NoError(t, err)
		require.Equal(t, "none", st.Type)
		require.Equal(t, time.Duration(-2), st.TTL)
	})
}

func TestStatsRanksKeysByUse(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		l := throttle.NewRedis(rdb, throttle.Options{Prefix: "stats", Clock: at0, ScanBatch: 2})
		ctx := context.Background()
		f := throttle.Limit{Name: "daily", Algorithm: throttle.FixedWindow, Rate: throttle.PerDay(10)}
		for i, cost := range []int64{2, 7, 4} {
			_, err := l.Consume(ctx, throttle.Request{Key: fmt.Sprintf("sms:sender:%d", i), Limit: f, Cost: cost})
			require.NoError(t, err)
		}
		st, err := control.Stats(ctx, l, "sms:", 2, func(string) (throttle.Limit, bool) { return f, true })
		require.NoError(t, err)
		require.Equal(t, int64(3), st.Keys)
		require.Equal(t, map[string]int64{"hash": 3}, st.ByType)
		require.Len(t, st.Top, 2, "the top 2")
		require.Equal(t, "sms:sender:1", st.Top[0].Key)
		require.Equal(t, int64(7), st.Top[0].Used)
		require.InDelta(t, 0.7, st.Top[0].Share, 1e-9)
		require.Equal(t, "sms:sender:2", st.Top[1].Key)
	})
}

func TestStatsLogsKeysItLeavesOut(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		var buf bytes.Buffer
		log := slog.New(slog.NewJSONHandler(&buf, nil))
		l := throttle.NewRedis(rdb, throttle.Options{Prefix: "logstats", Logger: log})
		require.NoError(t, rdb.Set(ctx, l.Key("test:k:1"), "x", time.Hour).Err())
		// A limit Status refuses: a fixed window must divide a day.
		lim := throttle.Limit{Name: "daily", Algorithm: throttle.FixedWindow, Rate: throttle.Rate{Limit: 1, Period: 7 * time.Second}}
		st, err := control.Stats(ctx, l, "", 10, func(string) (throttle.Limit, bool) { return lim, true })
		require.NoError(t, err)
		require.Equal(t, int64(1), st.Keys)
		require.Empty(t, st.Top)
		var rec map[string]any
		require.NoError(t, json.Unmarshal(buf.Bytes(), &rec), "one record: %s", buf.String())
		require.Equal(t, "WARN", rec["level"])
		require.Equal(t, "control: stats left out keys whose use could not be read", rec["msg"])
		require.Equal(t, "test:k:1", rec["key"])
		require.Equal(t, float64(1), rec["skipped"])
		require.Contains(t, rec["err"], `limit "daily"`)
	})
}
