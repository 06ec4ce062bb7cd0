//go:build unix

package e2e

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/emulator"
)

// The split between invariants and timing (doc.go): `make test` runs every
// test here small, on whatever host runs it, busy or not, so it asserts
// only what holds however late the host schedules a send. Speed lower
// bounds and latencies are asserted by the full run (make e2e-full,
// SLUICE_E2E_SCALE=full) on an idle host and only logged in the small one.

// fullRun reports SLUICE_E2E_SCALE=full: the run that asserts timing.
func fullRun() bool { return os.Getenv("SLUICE_E2E_SCALE") == "full" }

// timingClaim asserts a speed or latency figure in the full run and logs
// it, with whether it held, in the small one: a busy host can make any of
// them fail without a fault in Sluice.
func timingClaim(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	switch {
	case fullRun() && !ok:
		t.Errorf("timing: %s", msg)
	case fullRun():
		t.Logf("timing: %s: holds", msg)
	case ok:
		t.Logf("timing (asserted by make e2e-full only): %s: holds", msg)
	default:
		t.Logf("timing (asserted by make e2e-full only): %s: DOES NOT HOLD on this run", msg)
	}
}

// hangBound is how long a wait for a run whose ideal (idle host, at the
// cap) length is ideal may take before the test calls it a hang: it bounds
// a stall, it measures nothing. A loaded host is slower, and a provider
// throttle drawn by a late send costs a pause of the scope.
func hangBound(ideal time.Duration) time.Duration { return 2*time.Minute + 5*ideal }

// throttleTripwire is the most provider throttle responses the small run
// allows on a channel that carried sends: a send that leaves late on a
// busy host can land closer than the cap to the next one and draw a
// strict provider's throttle (0 in 4,000 with two CPU-bound processes
// beside the workers, issue 19; a few in thousands before the measured
// margin), while a channel that is not paced draws one on most sends.
func throttleTripwire(sends int) int { return max(5, sends/100) }

// checkThrottles checks a channel's provider throttle responses, less
// those the test injected (codes in injected, counted exactly there): none
// in the full run; in the small run at most throttleTripwire(sends), with
// the count logged. Duplicates and lost sends are checked by the callers,
// strictly in both runs.
func checkThrottles(t *testing.T, channel string, st emulator.ChannelStats, sends int, injected map[string]int) {
	t.Helper()
	for code, n := range injected {
		if got := st.ThrottledByCode[code]; got != n {
			t.Errorf("%s: %d throttle responses with the injected code %s, want %d", channel, got, code, n)
		}
	}
	drawn := map[string]int{}
	total := 0
	for code, n := range st.ThrottledByCode {
		if _, ok := injected[code]; !ok && n > 0 {
			drawn[code] = n
			total += n
		}
	}
	if fullRun() {
		if total > 0 {
			t.Errorf("%s: %d provider throttle responses %v on an idle host, want 0", channel, total, drawn)
		}
		return
	}
	t.Logf("%s: %d provider throttle responses drawn %v in %d sends (small run: at most %d; 0 in make e2e-full)",
		channel, total, drawn, sends, throttleTripwire(sends))
	if total > throttleTripwire(sends) {
		t.Errorf("%s: %d provider throttle responses %v in %d sends: more than a busy host's late sends explain (at most %d): is the channel paced?",
			channel, total, drawn, sends, throttleTripwire(sends))
	}
}

// drawnThrottles is the number of a channel's throttle responses whose
// code the test did not inject.
func drawnThrottles(st emulator.ChannelStats, injected ...string) int {
	n := st.Throttled
	for _, code := range injected {
		n -= st.ThrottledByCode[code]
	}
	return n
}
