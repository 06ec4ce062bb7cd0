package app

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/throttle"
)

func TestLimiterOptionsFollowTheEventsSection(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		yaml string
		want throttle.EventOptions
	}{
		{"defaults", "", throttle.EventOptions{MaxLen: 10000, WarnAt: 0.1}},
		{"cleanup batch", "cleanup: {batch: 7}", throttle.EventOptions{MaxLen: 10000, WarnAt: 0.1}},
		{"set", "events: {max_len: 50, warn_at: 0.5}", throttle.EventOptions{MaxLen: 50, WarnAt: 0.5}},
		{"warnings off", "events: {warn_at: 0}", throttle.EventOptions{MaxLen: 10000, WarnAt: -1}},
		{"disabled", "events: {enabled: false}", throttle.EventOptions{Disabled: true, MaxLen: 10000, WarnAt: 0.1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.Parse("sluice.yaml", []byte(c.yaml))
			require.NoError(t, err)
			got := LimiterOptions(cfg, nil)
			if diff := cmp.Diff(c.want, got.Events); diff != "" {
				t.Errorf("Events (-want +got):\n%s", diff)
			}
			require.Equal(t, "sluice", got.Prefix)
			require.Equal(t, int64(cfg.Cleanup.Batch), got.ScanBatch, "cleanup.batch pages the key walks")
			require.Equal(t, OverrideRefresh, got.OverrideRefresh)
			require.LessOrEqual(t, got.OverrideRefresh, time.Second/2, "a change is honoured within 1s")
		})
	}
}

// A blocked consume writes a limits.exceeded event unless events are
// disabled; a warn_at of 0.5 warns when half the capacity is used.
func TestNewLimiterWritesConfiguredEvents(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	lim := throttle.Limit{Name: "daily", Algorithm: throttle.FixedWindow, Rate: throttle.PerDay(2)}

	consume3 := func(l *throttle.Redis, key string) {
		t.Helper()
		for i, allowed := range []bool{true, true, false} {
			d, err := l.Consume(ctx, throttle.Request{Key: key, Limit: lim})
			require.NoError(t, err)
			require.Equal(t, allowed, d.Allowed, "consume %d", i+1)
		}
	}

	on, err := config.Parse("on.yaml", []byte("redis: {key_prefix: on}\nevents: {warn_at: 0.5}"))
	require.NoError(t, err)
	l := NewLimiter(on, rdb, nil)
	consume3(l, "sms:daily:+12025550101")
	evs, _, err := l.Events(ctx, "0", 10, 0)
	require.NoError(t, err)
	var types []string
	for _, e := range evs {
		require.Equal(t, "sms:daily:+12025550101", e.Key)
		types = append(types, e.Type)
	}
	require.Equal(t, []string{throttle.EventWarning, throttle.EventExceeded}, types)

	off, err := config.Parse("off.yaml", []byte("redis: {key_prefix: off}\nevents: {enabled: false}"))
	require.NoError(t, err)
	l = NewLimiter(off, rdb, nil)
	consume3(l, "sms:daily:+12025550101")
	evs, _, err = l.Events(ctx, "0", 10, 0)
	require.NoError(t, err)
	require.Empty(t, evs, "events disabled")
}
