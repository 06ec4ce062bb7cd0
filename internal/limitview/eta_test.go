package limitview

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/throttle"
)

func TestHolds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		pause, key string
		want       bool
	}{
		{"sms:paused:channel", "sms:sender:+12025550100", true},
		{"whatsapp:paused:account", "whatsapp:pair:106540352242922:+12025550199", true},
		{"sms:paused:account:AC0123", "sms:sender:+12025550100", true},
		{"sms:paused:sender:+12025550100", "sms:sender:+12025550100", true},
		{"whatsapp:paused:sender:106540352242922", "whatsapp:pair:106540352242922:+12025550199", true},
		{"whatsapp:paused:sender:106540352242922", "whatsapp:number:106540352242922", true},
		{"whatsapp:paused:pair:106540352242922:+12025550199", "whatsapp:pair:106540352242922:+12025550199", true},
		// Narrower or other scopes, other channels.
		{"whatsapp:paused:pair:106540352242922:+12025550199", "whatsapp:number:106540352242922", false},
		{"whatsapp:paused:sender:10654035224292", "whatsapp:number:106540352242922", false},
		{"sms:paused:sender:+12025550101", "sms:sender:+12025550100", false},
		{"sms:paused:channel", "whatsapp:number:106540352242922", false},
		{"sms:sender:+12025550100", "sms:sender:+12025550100", false},
	} {
		require.Equal(t, c.want, Holds(c.pause, c.key), "Holds(%q, %q)", c.pause, c.key)
	}
}

// HolderKeys names exactly the pauses of its scopes that Holds says hold
// a key, but an account's with an id: checked against every pause key
// made of the scopes and of ids drawn from the keys (each of their
// segments and leading parts) and a few others (no id for a scope whose
// pauses have none).
func TestHolderKeysAreTheHoldersOfTheirScopes(t *testing.T) {
	t.Parallel()
	keys := []string{
		"whatsapp:pair:106540352242922:+12025550199", "whatsapp:number:106540352242922",
		"sms:sender:+12025550100", "sms:sender:MG0123", "webhook:host:example.com:8443",
		"webhook:host:[::1]:8443", "http:host:a::b", "sms:global", "sms", "sms:sender:x:",
	}
	scopes := map[string]string{"account": "{account_sid}", "channel": "", "pair": "{sender}:{to}", "sender": "{sender}"}
	ids := map[string]bool{"": true, "AC0123": true, "10654035224292": true, "+12025550101": true}
	for _, k := range keys {
		parts := strings.Split(k, ":")
		for i := range parts {
			ids[parts[i]] = true
			for j := i + 1; j <= len(parts); j++ {
				ids[strings.Join(parts[i:j], ":")] = true
			}
		}
	}
	for _, k := range keys {
		got := HolderKeys(k, scopes)
		require.Len(t, got, len(slices.Compact(slices.Sorted(slices.Values(got)))), "HolderKeys(%q) repeats a key: %q", k, got)
		for _, p := range got {
			require.True(t, Holds(p, k), "HolderKeys(%q) names %q, which does not hold it", k, p)
		}
		for _, ch := range []string{"whatsapp", "sms", "webhook", "http"} {
			for s, tmpl := range scopes {
				for id := range ids {
					p := throttle.PauseKey(ch, s, id)
					if Holds(p, k) && (id == "" || tmpl != "" && s != "account") {
						require.Contains(t, got, p, "HolderKeys(%q) misses %q", k, p)
					}
				}
			}
		}
	}
	require.Equal(t, []string{"whatsapp:paused:account", "whatsapp:paused:channel", "whatsapp:paused:pair", "whatsapp:paused:pair:1065",
		"whatsapp:paused:pair:1065:+12025550199", "whatsapp:paused:sender", "whatsapp:paused:sender:1065",
		"whatsapp:paused:sender:1065:+12025550199"},
		HolderKeys("whatsapp:pair:1065:+12025550199", map[string]string{"account": "", "channel": "", "pair": "{phone_number_id}:{to}", "sender": "{phone_number_id}"}))
}

func TestEstimateDrainSteps(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 15, 49, 0, 0, time.UTC)
	planned := t0.Add(21 * time.Second)
	pause := func(key string, until time.Time) throttle.Paused { return throttle.Paused{Key: key, Until: until} }
	for _, c := range []struct {
		name    string
		n       int64
		rate    float64
		holders []throttle.Paused
		want    time.Time
		unknown bool
		why     string
	}{
		{"nothing planned", 0, 1, nil, time.Time{}, false, ""},
		{"as planned", 22, 1, nil, planned, false, ""},
		{"plan's pace unknown", 22, 0, nil, planned, false, ""},
		{"adapted: slower than planned", 22, 0.25, nil, t0.Add(84 * time.Second), false, "22 sends at 0.25/s from now"},
		{"paused past the plan", 22, 1, []throttle.Paused{pause("sms:paused:channel", t0.Add(7*time.Minute))},
			t0.Add(7*time.Minute + 21*time.Second), false, "held by sms:paused:channel until 15:56:00Z, then 22 sends at 1/s"},
		{"the longest pause counts", 22, 1, []throttle.Paused{pause("sms:paused:channel", t0.Add(time.Minute)), pause("sms:paused:sender:+1", t0.Add(2*time.Minute))},
			t0.Add(2*time.Minute + 21*time.Second), false, "held by sms:paused:sender:+1 until 15:51:00Z, then 22 sends at 1/s"},
		{"a pause that ended", 22, 1, []throttle.Paused{pause("sms:paused:channel", t0.Add(-time.Second))}, planned, false, ""},
		{"until resumed", 22, 1, []throttle.Paused{pause("sms:paused:channel", t0.Add(Indefinitely))}, time.Time{}, true, "sms:paused:channel: paused until resumed"},
	} {
		d := EstimateDrain(t0, c.n, planned, c.rate, c.holders)
		require.True(t, c.want.Equal(d.At), "%s: At %v, want %v", c.name, d.At, c.want)
		require.Equal(t, c.unknown, d.Unknown != "", c.name)
		require.Equal(t, c.why, d.Why(), c.name)
	}
}

// planSends plans n sends on key with rule's limit and returns the plan's
// backlog.
func planSends(t *testing.T, lim *throttle.Redis, cfg *config.Config, key string, limit throttle.Limit, n int) throttle.Backlog {
	t.Helper()
	ctx := context.Background()
	sends := make([]throttle.Send, n)
	for i := range sends {
		sends[i] = throttle.Send{TaskID: fmt.Sprintf("t%d", i), Requests: []throttle.Request{{Key: key, Limit: limit, Cost: 1}}}
	}
	_, err := lim.Plan(ctx, throttle.ReserveOptions{Headroom: cfg.Channels["sms"].Headroom}, sends)
	require.NoError(t, err)
	b, err := lim.Backlog(ctx, key)
	require.NoError(t, err)
	require.EqualValues(t, n, b.Planned)
	return b
}

// An operator's 10-minute pause is longer than the plan looks past
// (throttle.MaxPlannedPause): the plan still has the sends drain within
// seconds, which `limits show`, /limits/ and `send` used to print. ReadKey
// says they drain after the pause, and cannot say when while a pause lasts
// until resumed.
func TestReadKeyDrainWaitsForThePause(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	cfg := config.Default()
	lim := app.NewLimiter(cfg, rdb, nil)
	ctx := context.Background()
	const key = "sms:sender:+12025550100"
	b := planSends(t, lim, cfg, key, rule(t, cfg, "sms", "sender").Limit, 10)

	p, err := lim.Pause(ctx, "sms:paused:channel", throttle.PauseOptions{Wait: 10 * time.Minute, Operator: true, Reason: "maintenance"})
	require.NoError(t, err)
	require.True(t, b.Drains.Before(p.Until), "the plan drains %v, before the pause ends at %v", b.Drains, p.Until)

	k, err := ReadKey(ctx, lim, cfg, key, KeyOptions{})
	require.NoError(t, err)
	require.Len(t, k.Holders, 1)
	require.Equal(t, "sms:paused:channel", k.Drain.HeldBy)
	require.True(t, k.Drain.HeldUntil.Equal(p.Until))
	require.True(t, b.Drains.Equal(k.Drain.Planned))
	wantAt := p.Until.Add(time.Duration(9 / k.Paced * float64(time.Second)))
	require.WithinDuration(t, wantAt, k.Drain.At, time.Millisecond, "nine sends a pace apart after the pause")
	require.Contains(t, k.Drain.Why(), "held by sms:paused:channel until ")

	// The dashboard passes the pauses it read: the same answer.
	all, err := lim.Pauses(ctx, "")
	require.NoError(t, err)
	pre, err := ReadKey(ctx, lim, cfg, key, KeyOptions{Pauses: all})
	require.NoError(t, err)
	require.True(t, k.Drain.At.Equal(pre.Drain.At))
	// A pause of another sender holds nothing here.
	other, err := ReadKey(ctx, lim, cfg, key, KeyOptions{Pauses: []throttle.Paused{{Key: "sms:paused:sender:+12025550101", Until: p.Until}}})
	require.NoError(t, err)
	require.Empty(t, other.Holders)
	require.True(t, other.Drain.At.Equal(b.Drains), "no pause, the plan's pace: as planned")

	_, err = lim.Pause(ctx, "sms:paused:channel", throttle.PauseOptions{Wait: Indefinitely, Operator: true})
	require.NoError(t, err)
	k, err = ReadKey(ctx, lim, cfg, key, KeyOptions{})
	require.NoError(t, err)
	require.True(t, k.Drain.At.IsZero())
	require.Equal(t, "sms:paused:channel: paused until resumed", k.Drain.Unknown)
}

// A sender throttled by its provider is paced at a quarter of its rate
// (adaptive limits): the sends planned before at the full rate drain four
// times later than the plan says.
func TestReadKeyDrainAtTheAdaptedRate(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	cfg := config.Default()
	lim := app.NewLimiter(cfg, rdb, nil)
	ctx := context.Background()
	const key = "sms:sender:+12025550100"
	sender := rule(t, cfg, "sms", "sender")
	b := planSends(t, lim, cfg, key, sender.Limit, 20)
	_, err := lim.AdaptDown(ctx, throttle.AdaptOptions{}, throttle.AdaptSignal{Code: 20429, Reason: "Too Many Requests"},
		throttle.Request{Key: key, Limit: sender.Limit})
	require.NoError(t, err)

	k, err := ReadKey(ctx, lim, cfg, key, KeyOptions{})
	require.NoError(t, err)
	require.NotNil(t, k.Adaptation)
	require.Less(t, k.Paced, throttle.PerSecondOf(sender.Limit.Rate)/2)
	require.Empty(t, k.Holders)
	wantAt := k.Now.Add(time.Duration(19 / k.Paced * float64(time.Second)))
	require.WithinDuration(t, wantAt, k.Drain.At, time.Millisecond)
	require.True(t, k.Drain.At.After(b.Drains.Add(30*time.Second)), "drains %v, the plan %v", k.Drain.At, b.Drains)
	require.Equal(t, "20 sends at "+throttle.FormatPerSecond(k.Paced)+" from now", k.Drain.Why())
}
