package worker

import (
	"slices"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/throttle"
)

// A firm slot taken before its scope was paused is not used, even when
// the pause has ended by the slot's instant: it was paced at the rate of
// before the provider's throttle, which an adaptive limit lowered since.
// In the e2e run a send held for such a slot reached the provider 0.3s
// after the one before, at a 1.25/s rate, and drew a second throttle.
func TestPauseBookDropsSlotsTakenBeforeAPause(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	key := "sms:paused:account:AC1"
	reqs := []throttle.Request{
		{Key: "sms:sender:+12025550100", Limit: throttle.Limit{Name: "sender", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(5)}},
		throttle.PauseRequest(key),
	}
	var b pauseBook
	if k, _ := b.blocked(reqs, t0, t0.Add(-time.Second)); k != "" {
		t.Fatalf("empty book blocked by %q", k)
	}
	b.set(key, time.Second, t0) // a provider throttle pauses the account for 1s

	for _, c := range []struct {
		name      string
		now       time.Time
		taken     time.Time
		want      bool
		wantUntil time.Time
	}{
		{"paused now", t0.Add(500 * time.Millisecond), t0.Add(-time.Second), true, t0.Add(time.Second)},
		{"paused now, slot taken after", t0.Add(500 * time.Millisecond), t0.Add(100 * time.Millisecond), true, t0.Add(time.Second)},
		{"pause ended, slot taken before it", t0.Add(1500 * time.Millisecond), t0.Add(-200 * time.Millisecond), true, t0.Add(time.Second)},
		{"pause ended, slot taken after it began", t0.Add(1500 * time.Millisecond), t0.Add(1100 * time.Millisecond), false, time.Time{}},
		{"pause ended, no slot time (prefetched)", t0.Add(1500 * time.Millisecond), time.Time{}, false, time.Time{}},
	} {
		k, until := b.blocked(reqs, c.now, c.taken)
		if (k == key) != c.want || (k != "" && k != key) || !until.Equal(c.wantUntil) {
			t.Errorf("%s: blocked by %q until %v, want blocked %v until %v", c.name, k, until, c.want, c.wantUntil)
		}
	}

	// A resume ends the pause; a slot taken before the pause still is stale.
	b.set(key, time.Hour, t0.Add(2*time.Second))
	b.set(key, 0, t0.Add(3*time.Second))
	if b.paused(key, t0.Add(3*time.Second)) {
		t.Fatal("paused after the resume")
	}
	if k, _ := b.blocked(reqs, t0.Add(4*time.Second), t0.Add(1900*time.Millisecond)); k != key {
		t.Fatalf("slot taken before the resumed pause: blocked by %q, want %q", k, key)
	}
	if k, _ := b.blocked(reqs, t0.Add(4*time.Second), t0.Add(3500*time.Millisecond)); k != "" {
		t.Fatalf("slot taken after the resume: blocked by %q", k)
	}
}

// The first accepted send that left after a pause ended takes the pause's
// run (to end it in Redis), once; a send that left during the pause (in
// flight when it was set) takes nothing, and a new pause opens a new run.
func TestPauseBookTakesARunOnceAfterThePause(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	account, sender := "sms:paused:account:AC1", "sms:paused:sender:+12025550100"
	reqs := []throttle.Request{
		{Key: "sms:sender:+12025550100", Limit: throttle.Limit{Name: "sender", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1)}},
		throttle.PauseRequest(account), throttle.PauseRequest(sender),
	}
	var b pauseBook
	if k := b.takeRuns(reqs, t0); k != nil {
		t.Fatalf("empty book: took %v", k)
	}
	b.set(account, time.Second, t0) // a 20429: the account paused for 1s
	for _, step := range []struct {
		name string
		sent time.Time
		want []string
	}{
		{"left during the pause", t0.Add(500 * time.Millisecond), nil},
		{"left as it ended", t0.Add(time.Second), []string{account}},
		{"the run is taken once", t0.Add(2 * time.Second), nil},
	} {
		if got := b.takeRuns(reqs, step.sent); !slices.Equal(got, step.want) {
			t.Errorf("%s: took %v, want %v", step.name, got, step.want)
		}
	}
	// Paused again (an announcement from another worker), and ending the
	// run failed once: the next send that left after the pause takes it.
	b.set(account, time.Second, t0.Add(3*time.Second))
	b.set(sender, 2*time.Second, t0.Add(3*time.Second))
	if got := b.takeRuns(reqs, t0.Add(4*time.Second)); !slices.Equal(got, []string{account}) {
		t.Fatalf("after the account's pause, during the sender's: took %v, want the account", got)
	}
	b.reopenRun(account)
	if got := b.takeRuns(reqs, t0.Add(5*time.Second)); !slices.Equal(got, []string{account, sender}) {
		t.Fatalf("after both pauses: took %v, want both", got)
	}
	// A resume ends a pause: a send after it ends the run.
	b.set(sender, time.Hour, t0.Add(6*time.Second))
	b.set(sender, 0, t0.Add(7*time.Second))
	if got := b.takeRuns(reqs, t0.Add(8*time.Second)); !slices.Equal(got, []string{sender}) {
		t.Fatalf("after a resume: took %v, want the sender", got)
	}
}
