package dashboard

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/throttle"
)

// screenshotsDir is $SLUICE_SCREENSHOTS (created), else the test's temp dir.
func screenshotsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SLUICE_SCREENSHOTS")
	if dir == "" {
		return t.TempDir()
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

// layout is what the page's layout check reads in the browser.
type layout struct {
	PageOverflow bool               `json:"pageOverflow"` // the page scrolls sideways
	Overflowing  []string           `json:"overflowing"`  // tables wider than their box
	KeyColumn    map[string]float64 `json:"keyColumn"`    // px, by group, for the open groups
	Top          map[string]float64 `json:"top"`          // px from the page's top: pauses, events, keys
	Groups       map[string]int     `json:"groups"`       // keys per group
	Open         map[string]bool    `json:"open"`
}

const readLayout = `(() => {
	const top = el => el ? el.getBoundingClientRect().top + window.scrollY : -1;
	const out = {pageOverflow: document.documentElement.scrollWidth > document.documentElement.clientWidth,
		overflowing: [], keyColumn: {}, groups: {}, open: {},
		top: {pauses: top(document.getElementById("pauses")), events: top(document.getElementById("events")), keys: top(document.getElementById("keys"))}};
	for (const t of document.querySelectorAll("table")) {
		if (t.offsetParent !== null && t.scrollWidth > t.clientWidth) out.overflowing.push(t.id || t.closest("[data-group]").dataset.group);
	}
	for (const d of document.querySelectorAll("details[data-group]")) {
		out.groups[d.dataset.group] = +d.dataset.count;
		out.open[d.dataset.group] = d.open;
		if (d.open) out.keyColumn[d.dataset.group] = d.querySelector("th").getBoundingClientRect().width;
	}
	return out;
})()`

// At 1,280 px with 200 keys (one number with a backlog and an adapted
// rate, 100 pairs and 99 daily caps, one key per recipient), one paused
// scope and 20 events, /limits/ reads well: nothing wider than the window,
// the key column wide enough to read a key, the paused scope and the
// events above the keys, and the per-recipient keys folded per limit with
// their count. An adapted note used to shrink the key column to three
// characters and push backlog and drains off-screen, and the events sat
// below every key. A group opened stays open across the page's refreshes.
// Screenshots go to $SLUICE_SCREENSHOTS (default: the test's temp dir).
func TestBrowserLimitsPageAt1280(t *testing.T) {
	bin := testutil.Chromium(t)
	t.Parallel()
	srv, lim, cfg := limitsServer(t, LimitsOptions{Refresh: 500 * time.Millisecond})
	ctx := context.Background()
	const number = "106540352242922"
	numberKey := "whatsapp:number:" + number
	headroom := throttle.ReserveOptions{Headroom: cfg.Channels["whatsapp"].Headroom}
	var sends []throttle.Send
	for i := range 300 {
		sends = append(sends, throttle.Send{TaskID: fmt.Sprintf("n%d", i),
			Requests: []throttle.Request{{Key: numberKey, Limit: rule(t, cfg, "whatsapp", "throughput").Limit, Cost: 1}}})
	}
	for i := range 100 {
		sends = append(sends, throttle.Send{TaskID: fmt.Sprintf("p%d", i),
			Requests: []throttle.Request{{Key: fmt.Sprintf("whatsapp:pair:%s:+1202555%04d", number, i), Limit: rule(t, cfg, "whatsapp", "pair").Limit, Cost: 1}}})
	}
	_, err := lim.Plan(ctx, headroom, sends)
	require.NoError(t, err)
	daily := rule(t, cfg, "whatsapp", "daily")
	for i := range 99 {
		_, err := lim.Consume(ctx, throttle.Request{Key: fmt.Sprintf("whatsapp:daily:+1202555%04d", i), Limit: daily.Limit, Cost: 1})
		require.NoError(t, err)
	}
	_, err = lim.AdaptDown(ctx, throttle.AdaptOptions{}, throttle.AdaptSignal{Code: 130429, Reason: "Rate limit hit"},
		throttle.Request{Key: numberKey, Limit: rule(t, cfg, "whatsapp", "throughput").Limit})
	require.NoError(t, err)
	_, err = lim.Pause(ctx, "whatsapp:paused:sender:"+number, throttle.PauseOptions{Wait: 10 * time.Minute, Code: 130429,
		Reason: "Rate limit hit: (#130429) Cloud API message throughput has been reached"})
	require.NoError(t, err)
	for i := range 20 {
		typ := []string{throttle.EventExceeded, throttle.EventWarning, throttle.EventProviderThrottled, throttle.EventProviderPaused}[i%4]
		lim.Emit(ctx, typ, fmt.Sprintf("whatsapp:pair:%s:+1202555%04d", number, i), time.Millisecond, "name", "pair", "limit", 1, "code", 131056)
	}

	cctx := testutil.Browser(t, bin, 1280, 900, 2*time.Minute)
	require.NoError(t, chromedp.Do(cctx, chromedp.Navigate(srv.URL+"/limits/")))
	require.NoError(t, chromedp.Do(cctx, chromedp.WaitVisible(`#keys`)))
	width, err := chromedp.Run(cctx, chromedp.Evaluate[int](`document.documentElement.clientWidth`))
	require.NoError(t, err)
	require.LessOrEqual(t, width, 1280)
	require.Greater(t, width, 1200, "a 1,280 px window (less a scroll bar)")

	l, err := chromedp.Run(cctx, chromedp.Evaluate[layout](readLayout))
	require.NoError(t, err)
	t.Logf("layout: %+v", l)
	require.False(t, l.PageOverflow, "the page scrolls sideways")
	require.Empty(t, l.Overflowing, "tables wider than the page")
	require.Equal(t, map[string]int{"whatsapp/throughput": 1, "whatsapp/pair": 100, "whatsapp/daily": 99}, l.Groups)
	require.Equal(t, map[string]bool{"whatsapp/throughput": true, "whatsapp/pair": false, "whatsapp/daily": false}, l.Open,
		"the per-recipient keys folded")
	require.GreaterOrEqual(t, l.KeyColumn["whatsapp/throughput"], 200.0, "the key column beside an adapted note")
	require.Positive(t, l.Top["pauses"])
	require.Less(t, l.Top["pauses"], l.Top["events"], "paused scopes above the events")
	require.Less(t, l.Top["events"], l.Top["keys"], "events above the keys")

	// The number's row says it is adapted and held by the pause, and each
	// of its cells is on screen.
	row := fmt.Sprintf(`tr[data-key=%q]`, numberKey)
	cells, err := chromedp.Run(cctx, chromedp.Evaluate[[]float64](fmt.Sprintf(`[...document.querySelector(%q).cells].map(c => c.getBoundingClientRect().right)`, row)))
	require.NoError(t, err)
	require.Len(t, cells, 8)
	for i, right := range cells {
		require.LessOrEqual(t, right, float64(width), "cell %d ends off-screen", i)
	}
	text, err := chromedp.Run(cctx, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector(%q).innerText`, row)))
	require.NoError(t, err)
	require.Contains(t, text, "adapted, last lowered after provider code 130429")
	require.Regexp(t, `held by a pause until \d\d:\d\d:\d\d`, text)
	note, err := chromedp.Run(cctx, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector(%q).querySelector("td.drains .held").title`, row)))
	require.NoError(t, err)
	require.Regexp(t, `^held by whatsapp:paused:sender:`+number+` until \S+, then 300 sends at [\d.]+/s; planned `, note)
	summary, err := chromedp.Run(cctx, chromedp.Evaluate[string](`document.querySelector('details[data-group="whatsapp/pair"] > summary').innerText`))
	require.NoError(t, err)
	require.Contains(t, summary, "100 keys · backlog 100 · 100 held by a pause")

	dir := screenshotsDir(t)
	save := func(name string, png []byte) {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, png, 0o644))
		t.Logf("screenshot: %s", path)
	}
	png, err := chromedp.Run(cctx, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	save("limits-1280-viewport.png", png)
	png, err = chromedp.Run(cctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	save("limits-1280-full.png", png)

	// A person opens the pairs; the page refreshes (its #live section is
	// replaced) and they stay open, 100 rows that fit the width.
	at, err := chromedp.Run(cctx, chromedp.Evaluate[string](`document.getElementById("live").dataset.at`))
	require.NoError(t, err)
	require.NoError(t, testutil.Click(cctx, `details[data-group="whatsapp/pair"] > summary`))
	_, err = chromedp.Run(cctx, chromedp.Poll[chromedp.Void](fmt.Sprintf(`document.getElementById("live").dataset.at !== %q`, at),
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second)))
	require.NoError(t, err, "no refresh")
	l, err = chromedp.Run(cctx, chromedp.Evaluate[layout](readLayout))
	require.NoError(t, err)
	require.True(t, l.Open["whatsapp/pair"], "the opened group folded itself at the refresh")
	require.False(t, l.PageOverflow)
	require.Empty(t, l.Overflowing)
	require.GreaterOrEqual(t, l.KeyColumn["whatsapp/pair"], 200.0)
	png, err = testutil.ScreenshotOf(cctx, `details[data-group="whatsapp/pair"]`)
	require.NoError(t, err)
	save("limits-1280-pairs-open.png", png)
}
