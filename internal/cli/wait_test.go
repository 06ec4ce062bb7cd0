package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestWaitCampaignEndsWhenEverySendHasAnOutcome(t *testing.T) {
	calls := 0
	poll := func(context.Context) (campaignCounts, error) {
		calls++
		// 4 sends reach an outcome per read; one of them fails.
		return campaignCounts{Sent: int64(min(3*calls, 9)), Failed: int64(min(calls, 3)), Delivered: int64(min(2*calls, 6))}, nil
	}
	var lines bytes.Buffer
	clock := time.Unix(0, 0)
	now := func() time.Time { clock = clock.Add(10 * time.Second); return clock }
	got, err := waitCampaign(context.Background(), "q4", 12, poll, waitOptions{Every: time.Millisecond, Lines: &lines, LineEvery: 10 * time.Second, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if got.Sent != 9 || got.Failed != 3 || calls != 3 {
		t.Fatalf("got %+v after %d reads, want 9 sent and 3 failed after 3 reads", got, calls)
	}
	if !strings.Contains(lines.String(), "q4: 4 / 12 done (3 sent, 1 failed)") {
		t.Fatalf("progress lines:\n%s", lines.String())
	}
}

func TestWaitCampaignStopsOnCancelAndOnPollErrors(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	poll := func(context.Context) (campaignCounts, error) {
		cancel() // Ctrl-C while 1 of 5 is done
		return campaignCounts{Sent: 1}, nil
	}
	got, err := waitCampaign(ctx, "q4", 5, poll, waitOptions{Every: time.Hour})
	if !errors.Is(err, context.Canceled) || got.Sent != 1 {
		t.Fatalf("got %+v, %v; want 1 sent and context.Canceled", got, err)
	}
	boom := errors.New("redis: connection refused")
	_, err = waitCampaign(context.Background(), "q4", 5, func(context.Context) (campaignCounts, error) { return campaignCounts{}, boom }, waitOptions{})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the poll's", err)
	}
}

func TestWaitCampaignGivesUpWhenNothingMoves(t *testing.T) {
	clock := time.Unix(1000, 0)
	now := func() time.Time { clock = clock.Add(time.Minute); return clock }
	// 3 of 4 reach an outcome; the 4th was deleted from its queue. The
	// producers counted 4, more than this run's 3.
	poll := func(context.Context) (campaignCounts, error) { return campaignCounts{Enqueued: 4, Sent: 3}, nil }
	got, err := waitCampaign(context.Background(), "q4", 3, poll, waitOptions{Every: time.Millisecond, Stall: 5 * time.Minute, Expected: time.Unix(1000, 0), Now: now})
	if !errors.Is(err, errStalled) || !strings.Contains(err.Error(), "1 of 4 have none") {
		t.Fatalf("got %+v, %v; want errStalled naming 1 of 4", got, err)
	}
}

// A 1/s sender whose outcomes are recorded five at a time, with 30 sent
// while the file was being enqueued: the rate shown is 1/s, not the 30
// done before the wait began nor a burst of five in one read (the wait
// showed 6.3/s on a 1/s sender).
func TestWaitCampaignRateIsTheSendersPace(t *testing.T) {
	reads := 0
	poll := func(context.Context) (campaignCounts, error) {
		n := int64(30 + 5*(reads/5))
		reads++
		return campaignCounts{Sent: n}, nil
	}
	clock := time.Unix(1000, 0)
	now := func() time.Time { clock = clock.Add(time.Second); return clock } // one read a second
	var bar, lines bytes.Buffer
	_, err := waitCampaign(context.Background(), "sms", 80, poll, waitOptions{Every: time.Millisecond, Lines: &lines, LineEvery: 20 * time.Second, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(lines.String()), "\n") {
		// Read k comes k seconds after the first, with 5·⌊k/5⌋ more
		// outcomes: at most 1/s, 0.75/s at worst (the 30 done before
		// counted made it 2.25/s).
		var rate float64
		if _, err := fmt.Sscanf(l[strings.LastIndex(l, ", ")+2:], "%f/s", &rate); err != nil || rate < 0.7 || rate > 1.05 {
			t.Errorf("progress line %q: want about 1/s", l)
		}
	}
	if lines.Len() == 0 {
		t.Fatal("no progress line")
	}
	reads = 0
	_, err = waitCampaign(context.Background(), "sms", 80, poll, waitOptions{Every: time.Millisecond, Bar: &bar, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(bar.String(), " 1.0/s") {
		t.Fatalf("the bar's rate: want 1.0/s, got %q", bar.String())
	}
}
