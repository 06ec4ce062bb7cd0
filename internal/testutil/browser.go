package testutil

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// Chromium returns a Chromium or Chrome binary: $SLUICE_CHROMIUM, then the
// Debian and other usual names. It skips t when there is none (.ci/run
// installs Debian's chromium).
func Chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SLUICE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium found (/usr/bin/chromium, chromium, chromium-browser, google-chrome; or set SLUICE_CHROMIUM): " +
		"apt-get install -y chromium, as .ci/run does, to run the browser tests")
	return ""
}

// Browser starts headless bin (Chromium) with a window of width × height
// px and returns a tab's context, closed when t ends. Nothing leaves the
// machine: every name but 127.0.0.1 fails to resolve (asynqmon's page asks
// Google for fonts). Every wait in the tab is bounded by deadline, which
// bounds a hang and measures nothing.
func Browser(t *testing.T, bin string, width, height int, deadline time.Duration) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.DisableGPU, chromedp.WindowSize(width, height),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	bctx, cancel := context.WithTimeout(context.Background(), deadline)
	t.Cleanup(cancel)
	actx, cancelAlloc := chromedp.NewExecAllocator(bctx, opts...)
	t.Cleanup(cancelAlloc)
	cctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(cancelTab)
	return cctx
}

// ScreenshotOf returns a PNG of the first element sel (a CSS selector)
// matches, scrolled or not. It reads the element's box in one evaluation
// and captures that clip of the page, so a page that replaces its nodes on
// a timer (the limits page's refresh) cannot make it fail between finding
// the node and measuring it, as chromedp.Screenshot can ("No node with given
// id found").
func ScreenshotOf(ctx context.Context, sel string) ([]byte, error) {
	box, err := chromedp.Run(ctx, chromedp.Evaluate[page.Viewport](fmt.Sprintf(`(() => {
		const e = document.querySelector(%q);
		if (!e) throw new Error("no element matches " + %[1]q);
		const r = e.getBoundingClientRect();
		const x = Math.round(r.left + window.scrollX), y = Math.round(r.top + window.scrollY);
		return {x, y, width: Math.round(r.right + window.scrollX) - x, height: Math.round(r.bottom + window.scrollY) - y, scale: 1};
	})()`, sel)))
	if err != nil {
		return nil, fmt.Errorf("screenshot of %s: %w", sel, err)
	}
	if box.Width <= 0 || box.Height <= 0 {
		return nil, fmt.Errorf("screenshot of %s: the element has no area (%v×%v px)", sel, box.Width, box.Height)
	}
	shot, err := chromedp.Call(ctx, page.CaptureScreenshot, page.CaptureScreenshotParams{
		Format:                page.CaptureScreenshotFormatPng,
		CaptureBeyondViewport: ptr(true),
		FromSurface:           ptr(true),
		Clip:                  &box,
	})
	if err != nil {
		return nil, fmt.Errorf("screenshot of %s: %w", sel, err)
	}
	return shot.Data, nil
}

// Click clicks the first element sel (a CSS selector) matches, found and
// clicked in one evaluation, so a refresh that replaces the node between
// the two cannot make the click fail or miss.
func Click(ctx context.Context, sel string) error {
	_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`(() => {
		const e = document.querySelector(%q);
		if (!e) throw new Error("no element matches " + %[1]q);
		e.click();
		return true;
	})()`, sel)))
	if err != nil {
		return fmt.Errorf("click %s: %w", sel, err)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
