package limitview

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/throttle"
)

// rule returns cfg's rule name of channel.
func rule(t *testing.T, cfg *config.Config, channel, name string) rules.Rule {
	t.Helper()
	r, ok := cfg.Channels[channel].Rule(name)
	require.True(t, ok, "no rule %s/%s", channel, name)
	return r
}

// The dashboard passes the overrides and adaptations it read once; limits
// show lets ReadKey read them. Both see the same key.
func TestReadKeyWithAndWithoutPreloadedStateAgree(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	cfg := config.Default()
	lim := app.NewLimiter(cfg, rdb, nil)
	ctx := context.Background()
	const key = "sms:sender:+12025550100"
	require.NoError(t, lim.SetOverride(ctx, key, throttle.Override{Rate: throttle.PerSecond(5)}))
	sender := rule(t, cfg, "sms", "sender")
	_, err := lim.AdaptDown(ctx, throttle.AdaptOptions{}, throttle.AdaptSignal{Code: 20429, Reason: "Too Many Requests"},
		throttle.Request{Key: key, Limit: sender.Limit})
	require.NoError(t, err)

	read, err := ReadKey(ctx, lim, cfg, key, KeyOptions{})
	require.NoError(t, err)
	require.True(t, read.Matched)
	require.Equal(t, "sender", read.Rule.Limit.Name)
	require.NotNil(t, read.Override)
	require.Equal(t, key, read.OverridePattern)
	require.True(t, read.RateLimited)
	require.InDelta(t, 5, read.Configured, 1e-9, "the override's rate")
	require.InDelta(t, 1.25, read.Effective, 1e-9, "a quarter after one throttle")
	require.NotNil(t, read.Adaptation)
	require.InDelta(t, 1.25*(1-cfg.Channels["sms"].Headroom), read.Paced, 1e-9)
	require.NotNil(t, read.Backlog)
	require.Zero(t, read.Backlog.Planned)
	require.Regexp(t, `^adapted, last lowered after provider code 20429 at \S+; ceiling 5/s$`, AdaptedWhy(*read.Adaptation))

	overrides, err := lim.Overrides(ctx)
	require.NoError(t, err)
	all, err := lim.Adaptations(ctx)
	require.NoError(t, err)
	pre, err := ReadKey(ctx, lim, cfg, key, KeyOptions{Overrides: overrides, Adaptations: ByKey(all)})
	require.NoError(t, err)
	pre.Now, read.Now = time.Time{}, time.Time{} // the clock moved between the reads
	pre.Decision.Reset, read.Decision.Reset = time.Time{}, time.Time{}
	require.Equal(t, read, pre)

	none, err := ReadKey(ctx, lim, cfg, "sms:unknown:x", KeyOptions{})
	require.NoError(t, err)
	require.False(t, none.Matched, "no rule: no decision, no error")
}

// Firm reservations ahead of now are the GCRA key's TAT ahead of now in
// paced intervals.
func TestReadKeyCountsFirmReservationsAhead(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	cfg := config.Default()
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	lim := app.NewLimiter(cfg, rdb, func() time.Time { return now })
	ctx := context.Background()
	const key = "whatsapp:number:106540352242922"
	number := rule(t, cfg, "whatsapp", "throughput")
	for range 10 {
		r, err := lim.Reserve(ctx, throttle.ReserveOptions{Headroom: cfg.Channels["whatsapp"].Headroom}, throttle.Request{Key: key, Limit: number.Limit, Cost: 1})
		require.NoError(t, err)
		require.True(t, r.Firm)
	}
	k, err := ReadKey(ctx, lim, cfg, key, KeyOptions{})
	require.NoError(t, err)
	require.InDelta(t, 10, k.FirmAhead, 1, "ten slots 12.69ms apart, all ahead of the clock")
	require.Equal(t, int64(0), k.Decision.Remaining)
}

func TestPauseOfSaysWhoPausedAndUntilWhen(t *testing.T) {
	t.Parallel()
	now := time.Now()
	p := PauseOf(throttle.Paused{Key: "whatsapp:paused:channel", Since: now, Until: now.Add(Indefinitely), Reason: "maintenance", Operator: true}, now)
	require.Equal(t, Pause{Key: "whatsapp:paused:channel", Since: now.UnixMilli(), Until: now.Add(Indefinitely).UnixMilli(),
		UntilResumed: true, Reason: "maintenance", By: ByOperator}, p)
	p = PauseOf(throttle.Paused{Key: "whatsapp:paused:sender:1", Since: now, Until: now.Add(time.Hour), Code: 131048, InARow: 2}, now)
	require.Equal(t, ByProvider, p.By)
	require.False(t, p.UntilResumed)
	require.Equal(t, 131048, p.Code)
}

func TestLatestReturnsTheNewestKeptEventsFirst(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	lim := app.NewLimiter(config.Default(), rdb, nil)
	ctx := context.Background()
	for i, typ := range []string{throttle.EventProviderPaused, throttle.EventExceeded, throttle.EventProviderThrottled, throttle.EventEndpointFailing, throttle.EventProviderResumed} {
		lim.Emit(ctx, typ, "whatsapp:paused:sender:"+string(rune('1'+i)), time.Millisecond, "code", 131048)
	}
	provider := func(typ string) bool {
		return typ == throttle.EventProviderThrottled || typ == throttle.EventProviderResumed || typ == throttle.EventProviderPaused
	}
	evs, err := Latest(ctx, lim, 3, provider)
	require.NoError(t, err)
	var got []string
	for _, e := range evs {
		got = append(got, e.Type+" "+e.Key)
	}
	require.Equal(t, []string{"provider.resumed whatsapp:paused:sender:5", "provider.throttled whatsapp:paused:sender:3"}, got,
		"of the last three entries, the provider's, newest first")
	all, err := Latest(ctx, lim, 100, nil)
	require.NoError(t, err)
	require.Len(t, all, 5)
	v := EventOf(all[0])
	require.Equal(t, int64(131048), v.Code)
	require.Equal(t, all[0].At.UnixMilli(), v.At)
}
