package testutil

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

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
