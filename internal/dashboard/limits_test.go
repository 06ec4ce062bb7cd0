package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
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

// limitsServer starts a redis-server, a limiter over it with the default
// configuration and an httptest server mounting the dashboard at /limits/.
func limitsServer(t *testing.T, o LimitsOptions) (*httptest.Server, *throttle.Redis, *config.Config) {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	cfg := config.Default()
	lim := app.NewLimiter(cfg, rdb, nil)
	o.Limiter, o.Config = lim, cfg
	h, err := NewLimits(o)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/limits/", h)
	mux.Handle("/limits", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, lim, cfg
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res, string(b)
}

func TestLimitsPageShowsKeysPausesAndEvents(t *testing.T) {
	t.Parallel()
	srv, lim, cfg := limitsServer(t, LimitsOptions{})
	ctx := context.Background()
	daily := rule(t, cfg, "whatsapp", "daily")
	number := rule(t, cfg, "whatsapp", "throughput")
	const dailyKey = "whatsapp:daily:+12025550123"
	const numberKey = "whatsapp:number:106540352242922"
	for range 3 {
		_, err := lim.Consume(ctx, throttle.Request{Key: dailyKey, Limit: daily.Limit, Cost: 1})
		require.NoError(t, err)
	}
	// 200 sends planned on the number: a backlog that drains in about 2.5s.
	sends := make([]throttle.Send, 200)
	for i := range sends {
		sends[i] = throttle.Send{TaskID: fmt.Sprintf("t%d", i), Requests: []throttle.Request{{Key: numberKey, Limit: number.Limit, Cost: 1}}}
	}
	_, err := lim.Plan(ctx, throttle.ReserveOptions{Headroom: cfg.Channels["whatsapp"].Headroom}, sends)
	require.NoError(t, err)
	_, err = lim.Pause(ctx, "whatsapp:paused:sender:106540352242977", throttle.PauseOptions{Wait: time.Hour, Code: 131048, Reason: "Spam rate limit hit"})
	require.NoError(t, err)
	lim.Emit(ctx, throttle.EventProviderPaused, "whatsapp:paused:sender:106540352242977", time.Millisecond, "code", 131048, "reason", "Spam rate limit hit")

	res, body := get(t, srv.URL+"/limits/")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"))
	require.Contains(t, res.Header.Get("Content-Security-Policy"), "default-src 'none'")
	require.Contains(t, body, `<tr data-key="whatsapp:daily:&#43;12025550123">`)
	require.Regexp(t, `<details class="group" data-group="whatsapp/daily" data-count="1" open>\s*<summary><strong>whatsapp · daily</strong> <span class="meta">fixed_window 250/d</span>(?s:.*?)data-key="whatsapp:daily:&#43;12025550123">\s*<td><code>[^<]+</code></td>\s*<td class="num remaining" data-value="247">247 <span class="meta">of 250</span></td>`, body)
	require.Regexp(t, `data-key="whatsapp:number:106540352242922">(?s:.*?)<td class="num backlog" data-value="200">200</td>`, body)
	require.Contains(t, body, "78.8/s", "the number's pacing: 80/s less 1.5% headroom")
	require.Contains(t, body, "showing 2 of 2 keys")
	require.Regexp(t, `data-pause="whatsapp:paused:sender:106540352242977">(?s:.*?)<td class="by">provider</td><td class="num code">131048</td>\s*<td class="reason">Spam rate limit hit</td>`, body)
	require.Contains(t, body, `<tr data-event="provider.paused">`)
	require.Contains(t, body, `<meta http-equiv="refresh" content="2">`, "the refresh without JavaScript")
	require.Contains(t, body, `var every =  2000 ;`, "the script's refresh")
}

func TestLimitsDataJSON(t *testing.T) {
	t.Parallel()
	srv, lim, cfg := limitsServer(t, LimitsOptions{})
	ctx := context.Background()
	pair := rule(t, cfg, "whatsapp", "pair")
	const key = "whatsapp:pair:106540352242922:+12025550123"
	_, err := lim.Consume(ctx, throttle.Request{Key: key, Limit: pair.Limit, Cost: 1})
	require.NoError(t, err)
	_, err = lim.Pause(ctx, "sms:paused:sender:+14155550100", throttle.PauseOptions{Wait: time.Hour, Reason: "paused by an operator", Operator: true})
	require.NoError(t, err)

	res, body := get(t, srv.URL+"/limits/data.json")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "application/json", res.Header.Get("Content-Type"))
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &raw))
	for _, f := range []string{"at", "prefix", "keys", "keys_seen", "keys_more", "pauses", "pauses_more", "events"} {
		require.Contains(t, raw, f)
	}
	var snap Snapshot
	require.NoError(t, json.Unmarshal([]byte(body), &snap))
	require.Len(t, snap.Keys, 1)
	k := snap.Keys[0]
	require.Equal(t, key, k.Key)
	require.Equal(t, "pair", k.Limit)
	require.Equal(t, "gcra", k.Algorithm)
	require.Equal(t, int64(1), k.Capacity)
	require.Equal(t, int64(0), k.Remaining, "the pair just sent")
	require.InDelta(t, 1.0/6, k.Configured, 1e-9)
	require.Equal(t, k.Configured, k.Effective, "not adapted")
	require.Greater(t, k.Reset, snap.At, "the pair is free again in up to 6s")
	require.Equal(t, []string{"sms:paused:sender:+14155550100"}, []string{snap.Pauses[0].Key})
	require.Equal(t, "operator", snap.Pauses[0].By)
	require.Equal(t, 1, snap.KeysSeen)
	require.False(t, snap.KeysMore)
	require.Empty(t, snap.Margins, "no worker published a margin")

	// A worker's published margin is shown; a stale one is not.
	now := time.Now()
	require.NoError(t, lim.PublishMargins(ctx, []throttle.Margin{
		{Channel: "sms", Process: "host-a:41", Margin: 31 * time.Millisecond, Headroom: 0.0301, Configured: 15228 * time.Microsecond,
			Measured: 31 * time.Millisecond, Max: 50 * time.Millisecond, At: now},
		{Channel: "sms", Process: "host-b:7", Margin: 15 * time.Millisecond, At: now.Add(-time.Minute)},
	}))
	_, body = get(t, srv.URL+"/limits/data.json")
	snap = Snapshot{}
	require.NoError(t, json.Unmarshal([]byte(body), &snap))
	require.Equal(t, []MarginRow{{Channel: "sms", Process: "host-a:41", Margin: 31, Headroom: 0.0301, Configured: 15.228, Measured: 31, Max: 50}}, snap.Margins)
	_, page := get(t, srv.URL+"/limits/")
	require.Contains(t, page, `<tr data-margin="sms">`)
	require.Contains(t, page, "31.0ms")
}

// Keys, reasons and events come from tasks and providers: the page must
// render them as text.
func TestLimitsPageEscapesHostileText(t *testing.T) {
	t.Parallel()
	srv, lim, cfg := limitsServer(t, LimitsOptions{})
	ctx := context.Background()
	host := rule(t, cfg, "webhook", "host")
	const key = `webhook:host:"><script>alert(1)</script>`
	_, err := lim.Consume(ctx, throttle.Request{Key: key, Limit: host.Limit, Cost: 1})
	require.NoError(t, err)
	const reason = `<img src=x onerror="alert(2)">`
	_, err = lim.Pause(ctx, "whatsapp:paused:sender:1", throttle.PauseOptions{Wait: time.Hour, Code: 131048, Reason: reason})
	require.NoError(t, err)
	lim.Emit(ctx, throttle.EventProviderThrottled, key, time.Millisecond, "code", 4, "reason", "</td><script>alert(3)</script>")

	_, body := get(t, srv.URL+"/limits/?prefix="+`%3Cscript%3E`)
	require.NotContains(t, body, "<script>alert", "prefix echoed raw")
	_, body = get(t, srv.URL+"/limits/")
	require.NotContains(t, body, "<script>alert")
	require.NotContains(t, body, "<img src=x")
	require.Contains(t, body, "&lt;img src=x onerror=&#34;alert(2)&#34;&gt;")
	require.Contains(t, body, "&lt;script&gt;alert(1)&lt;/script&gt;")
	require.Contains(t, body, "&lt;/td&gt;&lt;script&gt;alert(3)&lt;/script&gt;")
}

func TestLimitsPageBoundsItsWork(t *testing.T) {
	t.Parallel()
	srv, lim, cfg := limitsServer(t, LimitsOptions{MaxKeys: 3, MaxEvents: 1})
	ctx := context.Background()
	daily := rule(t, cfg, "whatsapp", "daily")
	for i := range 5 {
		key := fmt.Sprintf("whatsapp:daily:+1202555010%d", i)
		_, err := lim.Consume(ctx, throttle.Request{Key: key, Limit: daily.Limit, Cost: 1})
		require.NoError(t, err)
		lim.Emit(ctx, throttle.EventExceeded, key, time.Millisecond, "name", "daily", "limit", 250)
	}
	_, body := get(t, srv.URL+"/limits/")
	require.Contains(t, body, "showing 3 of 5 keys")
	require.Equal(t, 3, strings.Count(body, "<tr data-key="))
	require.Equal(t, 1, strings.Count(body, "<tr data-event="))
	require.Contains(t, body, "whatsapp:daily:&#43;12025550104</code>", "the newest event first")

	_, body = get(t, srv.URL+"/limits/data.json?prefix=whatsapp:daily:%2B12025550104")
	var snap Snapshot
	require.NoError(t, json.Unmarshal([]byte(body), &snap))
	require.Len(t, snap.Keys, 1, "the prefix filter")
	require.Equal(t, "whatsapp:daily:+12025550104", snap.Keys[0].Key)
}

func TestLimitsRoutes(t *testing.T) {
	t.Parallel()
	srv, _, _ := limitsServer(t, LimitsOptions{})
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/limits", http.StatusMovedPermanently},
		{"GET", "/limits/", http.StatusOK},
		{"HEAD", "/limits/data.json", http.StatusOK},
		{"POST", "/limits/", http.StatusMethodNotAllowed},
		{"DELETE", "/limits/data.json", http.StatusMethodNotAllowed},
		{"GET", "/limits/other", http.StatusNotFound},
		{"GET", "/limits/?prefix=" + strings.Repeat("a", MaxPrefixBytes+1), http.StatusBadRequest},
		{"GET", "/limits/?prefix=a%20b", http.StatusBadRequest},
		{"GET", "/limits/?prefix=%00", http.StatusBadRequest},
	} {
		req, err := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		require.NoError(t, err)
		res, err := client.Do(req)
		require.NoError(t, err)
		_ = res.Body.Close()
		require.Equal(t, tc.want, res.StatusCode, "%s %s", tc.method, tc.path)
	}
}

func TestLimitsRedisDownIs503WithoutDetails(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	cfg := config.Default()
	h, err := NewLimits(LimitsOptions{Limiter: app.NewLimiter(cfg, rdb, nil), Config: cfg, Timeout: time.Second,
		Logger: slogDiscard()})
	require.NoError(t, err)
	require.NoError(t, rdb.Close())
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/limits/", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Equal(t, "redis: unavailable, see the server's log\n", rec.Body.String())
}

func TestNewLimitsNamesTheBadOption(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	lim := throttle.NewRedis(nil, throttle.Options{})
	for _, tc := range []struct {
		o    LimitsOptions
		want string
	}{
		{LimitsOptions{Config: cfg}, "Limiter is required"},
		{LimitsOptions{Limiter: lim}, "Config is required"},
		{LimitsOptions{Limiter: lim, Config: cfg, RootPath: "limits"}, `RootPath: want a path such as "/limits", got "limits"`},
		{LimitsOptions{Limiter: lim, Config: cfg, MaxKeys: -1}, "MaxKeys: want >= 0"},
		{LimitsOptions{Limiter: lim, Config: cfg, Refresh: time.Millisecond}, "Refresh: want >= 500ms"},
		{LimitsOptions{Limiter: lim, Config: cfg, Timeout: -time.Second}, "Timeout: want > 0"},
	} {
		_, err := NewLimits(tc.o)
		require.ErrorContains(t, err, tc.want)
	}
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// BenchmarkLimitsSnapshot reads a page of DefaultMaxKeys keys: half
// GCRA (Status and Backlog each), half fixed windows.
func BenchmarkLimitsSnapshot(b *testing.B) {
	rdb := redistest.Start(b).Client(b)
	cfg := config.Default()
	lim := app.NewLimiter(cfg, rdb, nil)
	ctx := context.Background()
	var pair, daily rules.Rule
	for _, r := range cfg.Channels["whatsapp"].Rules() {
		switch r.Limit.Name {
		case "pair":
			pair = r
		case "daily":
			daily = r
		}
	}
	for i := range DefaultMaxKeys / 2 {
		to := fmt.Sprintf("+1202555%04d", 1000+i)
		_, err := lim.Consume(ctx, throttle.Request{Key: "whatsapp:pair:106540352242922:" + to, Limit: pair.Limit, Cost: 1},
			throttle.Request{Key: "whatsapp:daily:" + to, Limit: daily.Limit, Cost: 1})
		require.NoError(b, err)
	}
	h, err := NewLimits(LimitsOptions{Limiter: lim, Config: cfg})
	require.NoError(b, err)
	b.ResetTimer()
	for b.Loop() {
		snap, err := h.Snapshot(ctx, "")
		require.NoError(b, err)
		require.Len(b, snap.Keys, DefaultMaxKeys)
	}
}
