package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/emulator"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
)

// artifactsDir is $SLUICE_ARTIFACTS/screenshots, by default
// <repository root>/artifacts/screenshots (gitignored).
func artifactsDir(t *testing.T) string {
	t.Helper()
	base := os.Getenv("SLUICE_ARTIFACTS")
	if base == "" {
		dir, err := os.Getwd()
		require.NoError(t, err)
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				break
			}
			parent := filepath.Dir(dir)
			require.NotEqual(t, parent, dir, "no go.mod above the test's directory")
			dir = parent
		}
		base = filepath.Join(dir, "artifacts")
	}
	dir := filepath.Join(base, "screenshots")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

// screenshot saves the viewport as a PNG artifact and logs its path.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	saveArtifact(t, name, png)
}

// screenshotOf saves the element sel matches (scrolled into view) as a PNG
// artifact: a part of the page below the viewport.
func screenshotOf(t *testing.T, ctx context.Context, sel, name string) {
	t.Helper()
	png, err := testutil.ScreenshotOf(ctx, sel)
	require.NoError(t, err)
	saveArtifact(t, name, png)
}

func saveArtifact(t *testing.T, name string, png []byte) {
	t.Helper()
	path := filepath.Join(artifactsDir(t), name)
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot: %s", path)
}

// The campaign's senders: a number that sends, and one whose first send
// draws WhatsApp's 131048 (spam rate limit), which pauses it for an hour.
const (
	numberCampaign = "106540352242922"
	numberSpam     = "106540352242977"
)

// TestBrowserShowsALiveCampaign runs a real worker against the strict
// WhatsApp emulator with 600 sends to 100 recipients (six each, so the
// 1-per-6s pair limit and a 20/s number pace them over about 35s), and
// reads the dashboards in headless Chromium while it runs, as a person
// would: the campaign's limiter keys, a daily limit's remaining falling
// between two refreshes, the spam-paused number with the provider's code
// and reason, and the queue with its counts in asynqmon.
func TestBrowserShowsALiveCampaign(t *testing.T) {
	bin := testutil.Chromium(t)
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	emu, err := emulator.Start(emulator.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })
	emu.Fault(emulator.ChannelWhatsApp, numberSpam, 131048, 1)

	cfg := config.Default()
	cfg.Channels["whatsapp"].BaseURL = emu.WhatsAppURL()
	cfg.Channels["sms"].BaseURL = emu.TwilioURL()
	cfg.Channels["webhook"].Enabled = false
	cfg.Channels["http"].Enabled = false
	// 20/s for the number, so 600 sends last about 35s, not 8: a busy host's
	// slow browser still reads the page before the last round and sees it
	// fall.
	wa := cfg.Channels["whatsapp"]
	for i, r := range wa.Limits {
		if r.Limit.Name == "throughput" {
			wa.Limits[i].Limit.Rate = throttle.PerSecond(20)
		}
	}
	secrets := map[string]string{
		"WHATSAPP_TOKEN":     emulator.DefaultWhatsAppToken,
		"TWILIO_ACCOUNT_SID": emulator.DefaultTwilioAccountSID,
		"TWILIO_AUTH_TOKEN":  emulator.DefaultTwilioAuthToken,
	}
	lim := app.NewLimiter(cfg, rdb, nil)
	w, err := app.NewWorker(cfg, rdb, lim, app.Options{
		Secrets: func(env string) (string, error) { return secrets[env], nil },
		Logger:  slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)

	// Every wait below is bounded by the deadline: it bounds a hang (a
	// browser on an idle host is done in under 20s), it measures nothing.
	cctx := testutil.Browser(t, bin, 1400, 1000, 3*time.Minute)
	// The browser is up before the campaign starts, so a slow start on a
	// loaded machine does not eat into the 35s the pages have to show it.
	require.NoError(t, chromedp.Do(cctx, chromedp.Navigate("about:blank")))

	enq, err := app.NewProducer(cfg, rdb, lim, nil)
	require.NoError(t, err)
	var batch []*asynq.Task
	add := func(number, to, key string) {
		task, err := tasks.NewWhatsAppSendTask(tasks.WhatsAppSend{PhoneNumberID: number, To: to, IdempotencyKey: key,
			Template: &tasks.Template{Name: "order_update", Language: "en_US"}})
		require.NoError(t, err)
		batch = append(batch, task)
	}
	const recipients, each = 100, 6
	for round := range each {
		for i := range recipients {
			add(numberCampaign, fmt.Sprintf("+1202555%04d", 1001+i), fmt.Sprintf("browser-%d-%d", round, i))
		}
	}
	for i := range 5 {
		add(numberSpam, fmt.Sprintf("+1415555%04d", 1001+i), fmt.Sprintf("browser-spam-%d", i))
	}
	ctx := context.Background()
	out, err := enq.Enqueue(ctx, batch)
	require.NoError(t, err)
	for _, o := range out {
		require.NoError(t, o.Err)
	}
	require.NoError(t, w.Start())
	t.Cleanup(w.Shutdown)
	started := time.Now()

	// The server `sluice serve` runs, with API keys: the browser logs in to
	// the dashboards with HTTP Basic, any user name and a key as password.
	keys, err := api.ParseKeys(operatorKey)
	require.NoError(t, err)
	h, err := Handler(Options{Config: cfg, Redis: rdb, Limiter: lim, Gatherer: app.NewRegistry(rdb), Keys: keys})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	// Without a key the browser is refused: the 401's Basic challenge,
	// which headless Chromium cannot answer, fails the page load.
	_, err = chromedp.RunResponse(cctx, chromedp.Navigate(srv.URL+"/limits/"))
	require.ErrorContains(t, err, "ERR_INVALID_AUTH_CREDENTIALS", "the limits page without a key")
	login := base64.StdEncoding.EncodeToString([]byte("operator:" + operatorKey))
	_, err = chromedp.Call(cctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": "Basic " + login}})
	require.NoError(t, err)

	// The limits page: the campaign's keys.
	require.NoError(t, chromedp.Do(cctx, chromedp.Navigate(srv.URL+"/limits/")))
	numberRow := fmt.Sprintf(`tr[data-key="whatsapp:number:%s"]`, numberCampaign)
	require.NoError(t, chromedp.Do(cctx, chromedp.WaitVisible(numberRow)), "the campaign's number")
	type row struct {
		Key       string `json:"key"`
		Remaining int64  `json:"remaining"`
		Backlog   int64  `json:"backlog"`
	}
	const readRows = `[...document.querySelectorAll("tr[data-key]")].map(r => ({key: r.dataset.key,
		remaining: +(r.querySelector("td.remaining") || {dataset: {value: -1}}).dataset.value,
		backlog: +(r.querySelector("td.backlog") || {dataset: {value: -1}}).dataset.value}))`
	// The daily keys appear as the first round of sends goes out.
	_, err = chromedp.Run(cctx, chromedp.Poll[chromedp.Void](`document.querySelectorAll('tr[data-key^="whatsapp:daily:"]').length >= 10`,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(time.Minute)))
	require.NoError(t, err, "the recipients' daily keys")
	first, err := chromedp.Run(cctx, chromedp.Evaluate[[]row](readRows))
	require.NoError(t, err)
	byPrefix := map[string]int{}
	before := map[string]int64{}
	for _, r := range first {
		scope := r.Key[:strings.LastIndexByte(r.Key, ':')+1]
		byPrefix[scope]++
		before[r.Key] = r.Remaining
	}
	t.Logf("first read (%v after start): %d keys %v", time.Since(started).Round(time.Millisecond), len(first), byPrefix)
	require.Positive(t, byPrefix["whatsapp:pair:"+numberCampaign+":"], "the campaign's pair keys")
	require.Positive(t, byPrefix["whatsapp:daily:"], "the recipients' daily keys")
	at, err := chromedp.Run(cctx, chromedp.Evaluate[string](`document.getElementById("live").dataset.at`))
	require.NoError(t, err)

	// A refresh (the page replaces its #live section) in which some daily
	// limit read before has fewer units left: the campaign's next round
	// reached that recipient.
	beforeJSON, err := json.Marshal(before)
	require.NoError(t, err)
	fell, err := chromedp.Run(cctx, chromedp.Poll[string](fmt.Sprintf(`(() => {
		const before = %s;
		if (document.getElementById("live").dataset.at === %q) return null;
		for (const r of document.querySelectorAll('tr[data-key^="whatsapp:daily:"]')) {
			const was = before[r.dataset.key], now = +r.querySelector("td.remaining").dataset.value;
			if (was !== undefined && now < was) return r.dataset.key + ": " + was + " -> " + now;
		}
		return null;
	})()`, beforeJSON, at), chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(time.Minute)))
	require.NoError(t, err, "no daily limit's remaining fell between refreshes")
	t.Logf("remaining fell between two refreshes (%v after start): %s", time.Since(started).Round(time.Millisecond), fell)

	// The spam-paused number, with the provider's code and reason.
	pauseRow := fmt.Sprintf(`tr[data-pause="whatsapp:paused:sender:%s"]`, numberSpam)
	require.NoError(t, chromedp.Do(cctx, chromedp.WaitVisible(pauseRow)), "the paused number")
	type pause struct {
		By     string `json:"by"`
		Code   string `json:"code"`
		Reason string `json:"reason"`
	}
	p, err := chromedp.Run(cctx, chromedp.Evaluate[pause](fmt.Sprintf(`(() => { const r = document.querySelector(%q);
		return {by: r.querySelector(".by").textContent, code: r.querySelector(".code").textContent, reason: r.querySelector(".reason").textContent}; })()`, pauseRow)))
	require.NoError(t, err)
	require.Equal(t, "provider", p.By)
	require.Equal(t, "131048", p.Code)
	require.NotEmpty(t, p.Reason, "the provider's message")
	t.Logf("paused scope: by %s, code %s, reason %q", p.By, p.Code, p.Reason)
	require.NoError(t, chromedp.Do(cctx, chromedp.WaitVisible(`tr[data-event="provider.paused"]`)), "the provider.paused event")
	screenshot(t, cctx, "limits.png")
	screenshotOf(t, cctx, "#events", "limits-events.png")

	// The queue dashboard: the whatsapp queue with its counts.
	require.NoError(t, chromedp.Do(cctx, chromedp.Navigate(srv.URL+"/queues/")))
	queueRow, err := chromedp.Run(cctx, chromedp.Poll[string](`(() => {
		for (const r of document.querySelectorAll("table tbody tr")) {
			const cells = [...r.querySelectorAll("th, td")].map(c => c.textContent.trim());
			if (cells[0] === "whatsapp" && cells.slice(1).some(c => /^\d+$/.test(c))) return cells.join(" | ");
		}
		return null;
	})()`, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(time.Minute)))
	require.NoError(t, err, "asynqmon shows no whatsapp queue row with counts")
	t.Logf("asynqmon's queue row: %s", queueRow)
	screenshot(t, cctx, "queues.png")

	// The injected throttle reached the provider once: the pause held the
	// number's other sends back. (Pacing itself is measured by
	// internal/e2e, alone on the machine; here Chromium and the race
	// detector share its two cores, and a throttle of another code is
	// only logged.)
	st := emu.Stats()[emulator.ChannelWhatsApp]
	require.Equal(t, 1, st.ThrottledByCode["131048"], "throttles by code: %v", st.ThrottledByCode)
	t.Logf("browser checks done %v after start; emulator: %d accepted so far of %d, throttles by code %v",
		time.Since(started).Round(time.Millisecond), st.Accepted, recipients*each, st.ThrottledByCode)
}
