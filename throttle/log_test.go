package throttle_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-dev/sluice/internal/testutil"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/throttle"
)

// logBuffer is a slog JSON handler's output, safe for concurrent writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// records returns every logged record, decoded.
func (b *logBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		out = append(out, r)
	}
	return out
}

func newLogger() (*slog.Logger, *logBuffer) {
	b := &logBuffer{}
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

// requireWarn asserts that the only record is a WARN with msg and the
// given keys, and that its err contains errPart.
func requireWarn(t *testing.T, b *logBuffer, msg, errPart string, keys map[string]any) {
	t.Helper()
	recs := b.records(t)
	require.Len(t, recs, 1, "one warning")
	r := recs[0]
	require.Equal(t, "WARN", r["level"])
	require.Equal(t, msg, r["msg"])
	for k, v := range keys {
		require.Equal(t, v, r[k], "key %q", k)
	}
	require.Contains(t, r["err"], errPart)
}

func TestDroppedEventWriteIsLoggedOnce(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		log, buf := newLogger()
		clk := testutil.NewClock(t0)
		l := throttle.NewRedis(rdb, throttle.Options{Prefix: "logev", Clock: clk.Now, Logger: log})
		// The stream key holds a string: every XADD fails with WRONGTYPE.
		require.NoError(t, rdb.Set(ctx, l.StreamKey(), "x", 0).Err())
		lim := throttle.Limit{Name: "daily", Algorithm: throttle.FixedWindow, Rate: throttle.PerDay(1)}
		for _, key := range []string{"test:a:1", "test:b:1"} {
			for range 2 {
				_, err := l.Consume(ctx, throttle.Request{Key: key, Limit: lim})
				require.NoError(t, err, "a failed event never fails the decision")
			}
		}
		// Two exceeded events failed; the second within 10s is held back.
		requireWarn(t, buf, "throttle: event dropped", "WRONGTYPE",
			map[string]any{"key": "test:a:1", "type": throttle.EventExceeded})
	})
}

func TestFailedOverrideRefreshIsLogged(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		log, buf := newLogger()
		l := throttle.NewRedis(rdb, throttle.Options{Prefix: "logov", Logger: log,
			Events: throttle.EventOptions{Disabled: true}})
		require.NoError(t, rdb.Set(ctx, l.OverridesKey(), "x", 0).Err())
		lim := throttle.Limit{Name: "g", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(10)}
		d, err := l.Consume(ctx, throttle.Request{Key: "test:k:1", Limit: lim})
		require.NoError(t, err, "overrides that cannot be read are not an error")
		require.True(t, d.Allowed)
		requireWarn(t, buf, "throttle: override refresh failed: keeping the last overrides read", "WRONGTYPE",
			map[string]any{"key": "logov:{_overrides}"})
	})
}

func TestIgnoredOverrideIsLogged(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		log, buf := newLogger()
		l := throttle.NewRedis(rdb, throttle.Options{Prefix: "logign", Logger: log,
			Events: throttle.EventOptions{Disabled: true}})
		require.NoError(t, l.SetOverride(ctx, "test:k:1", throttle.Override{Max: 1}))
		lim := throttle.Limit{Name: "conc", Algorithm: throttle.Concurrency, Max: 5}
		d, err := l.Consume(ctx, throttle.Request{Key: "test:k:1", Limit: lim, Cost: 3})
		require.NoError(t, err)
		require.Equal(t, int64(5), d.Limit, "the configured limit, not the override")
		requireWarn(t, buf, "throttle: override ignored", "cost 3, capacity 1",
			map[string]any{"key": "test:k:1", "limit": "conc", "override": "max 1"})
	})
}

// An event another process already wrote this window is not a failure:
// the second process's limiter writes nothing and logs nothing.
func TestEventAnotherProcessWroteIsNotDropped(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		clk := testutil.NewClock(t0)
		lim := throttle.Limit{Name: "daily", Algorithm: throttle.FixedWindow, Rate: throttle.PerDay(1)}
		var bufs []*logBuffer
		var first *throttle.Redis
		for range 2 { // two processes on one Redis
			log, buf := newLogger()
			l := throttle.NewRedis(rdb, throttle.Options{Prefix: "logdup", Clock: clk.Now, Logger: log})
			if first == nil {
				first = l
			}
			for range 2 {
				_, err := l.Consume(ctx, throttle.Request{Key: "test:a:1", Limit: lim})
				require.NoError(t, err)
			}
			bufs = append(bufs, buf)
		}
		evs, _, err := first.Events(ctx, "0", 10, 0)
		require.NoError(t, err)
		require.Len(t, evs, 1, "one limits.exceeded for the key and window")
		for i, b := range bufs {
			require.Empty(t, b.records(t), "process %d logged", i+1)
		}
	})
}
