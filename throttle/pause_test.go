package throttle_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/throttle"
)

func TestPauseBlocksEveryProcessUntilItEnds(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		clock := testutil.NewClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
		a := throttle.NewRedis(rdb, throttle.Options{Clock: clock.Now, OverrideRefresh: -1})
		b := throttle.NewRedis(rdb, throttle.Options{Clock: clock.Now, OverrideRefresh: -1})
		ctx := context.Background()
		pause := throttle.PauseKey("wa", "sender", "1")
		reqs := []throttle.Request{{Key: "wa:number:1", Limit: mps80}, throttle.PauseRequest(pause)}
		if r, err := a.Reserve(ctx, throttle.ReserveOptions{TaskID: "t0"}, reqs...); err != nil || !r.Firm {
			t.Fatalf("before the pause: firm %v, err %v", r.Firm, err)
		}
		// Process a got 131048 for number 1.
		p, err := a.Pause(ctx, pause, throttle.PauseOptions{Wait: time.Hour, Code: 131048, Reason: "spam rate limit"})
		if err != nil {
			t.Fatal(err)
		}
		if !p.New || p.InARow != 1 || !p.Until.Equal(clock.Now().Add(time.Hour)) {
			t.Fatalf("pause %+v, want new, 1 in a row, until +1h", p)
		}
		clock.Advance(time.Second)
		// Process b's next send is blocked until the pause ends. An hour is
		// over MaxPlannedPause (the pause may end early, at a resume), so
		// it is not planned: it comes back at the pause's end.
		r, err := b.Reserve(ctx, throttle.ReserveOptions{TaskID: "t1"}, reqs...)
		if err != nil {
			t.Fatal(err)
		}
		if r.Firm || r.Planned || r.BlockedBy != throttle.PauseName || !r.At.Equal(p.Until) {
			t.Fatalf("paused: firm %v planned %v blocked by %q at %v; want blocked by %q until %v, not planned", r.Firm, r.Planned, r.BlockedBy, r.At, throttle.PauseName, p.Until)
		}
		// A high-priority send is not planned: it comes back when the pause
		// ends and takes the first free slot then.
		r, err = b.Reserve(ctx, throttle.ReserveOptions{TaskID: "urgent", Priority: throttle.High}, reqs...)
		if err != nil || r.Firm || r.Planned || r.BlockedBy != throttle.PauseName || !r.At.Equal(p.Until) {
			t.Fatalf("paused, high priority: %+v %v; want blocked by %q until %v, not planned", r, err, throttle.PauseName, p.Until)
		}
		d, err := b.Consume(ctx, throttle.PauseRequest(pause))
		if err != nil || d.Allowed || d.RetryAfter != time.Hour-time.Second {
			t.Fatalf("consume while paused: allowed %v retry %v err %v; want blocked for 59m59s", d.Allowed, d.RetryAfter, err)
		}
		// Another number is not paused.
		other := []throttle.Request{{Key: "wa:number:2", Limit: mps80}, throttle.PauseRequest(throttle.PauseKey("wa", "sender", "2"))}
		if r, err := b.Reserve(ctx, throttle.ReserveOptions{TaskID: "o"}, other...); err != nil || !r.Firm {
			t.Fatalf("another number: firm %v, err %v", r.Firm, err)
		}
		got, err := b.Pauses(ctx, "wa:")
		if err != nil || len(got) != 1 || got[0].Key != pause || got[0].Code != 131048 || got[0].Reason != "spam rate limit" {
			t.Fatalf("pauses %+v, err %v; want the one of number 1", got, err)
		}
		clock.Set(p.Until)
		if r, err := b.Reserve(ctx, throttle.ReserveOptions{TaskID: "t1"}, reqs...); err != nil || !r.Firm {
			t.Fatalf("at the pause's end: firm %v, err %v", r.Firm, err)
		}
		if got, _ := b.Pauses(ctx, "wa:"); len(got) != 0 {
			t.Fatalf("pauses after the end: %+v", got)
		}
	})
}

func TestPausesInARowGrow(t *testing.T) {
	l, clock := reserveLimiter(t)
	ctx := context.Background()
	key := throttle.PauseKey("wa", "pair", "1:+12025550100")
	o := throttle.PauseOptions{Wait: 6 * time.Second, Growth: 4, Code: 131056}
	var waits []time.Duration
	for i := range 4 {
		p, err := l.Pause(ctx, key, o)
		if err != nil {
			t.Fatal(err)
		}
		if p.InARow != i+1 || !p.New {
			t.Fatalf("pause %d: %+v, want new and %d in a row", i, p, i+1)
		}
		waits = append(waits, p.Until.Sub(clock.Now()))
		// An answer to a send already in flight: extends, does not repeat.
		again, err := l.Pause(ctx, key, o)
		if err != nil || again.New || again.InARow != i+1 || !again.Until.Equal(p.Until) {
			t.Fatalf("pause %d again while paused: %+v, err %v; want the same pause", i, again, err)
		}
		clock.Set(p.Until.Add(time.Second))
	}
	want := []time.Duration{6 * time.Second, 24 * time.Second, 96 * time.Second, 384 * time.Second}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits %v, want %v", waits, want)
		}
	}
	// Quiet for longer than the memory: the next pause starts over.
	clock.Advance(11 * time.Minute)
	p, err := l.Pause(ctx, key, o)
	if err != nil || p.InARow != 1 || p.Until.Sub(clock.Now()) != 6*time.Second {
		t.Fatalf("after a quiet 11m: %+v, err %v; want 1 in a row, 6s", p, err)
	}
	if ok, err := l.Resume(ctx, key); err != nil || !ok {
		t.Fatalf("resume: %v, %v; want true", ok, err)
	}
	if p, err := l.PauseOf(ctx, key); err != nil || p != nil {
		t.Fatalf("after resume: %+v, %v; want no pause", p, err)
	}
}

// A run of pauses grows only while no send on the scope is accepted: the
// first accepted send after a pause ended (EndPauseRun) brings the next
// pause back to its first wait; while a pause is on, EndPauseRun changes
// nothing.
func TestAcceptedSendEndsAPauseRun(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		clock := testutil.NewClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
		l := throttle.NewRedis(rdb, throttle.Options{Clock: clock.Now, OverrideRefresh: -1})
		ctx := context.Background()
		key := throttle.PauseKey("sms", "account", "AC1")
		o := throttle.PauseOptions{Wait: time.Second, Growth: 2, Max: 30 * time.Second, Code: 20429}
		var until time.Time
		for i, step := range []struct {
			name     string
			advance  time.Duration // from the last pause's end (0: now)
			accepted bool          // a send accepted: EndPauseRun, then Pause
			wantEnd  bool          // EndPauseRun's answer
			wantRow  int
			wantWait time.Duration
		}{
			{"first throttle", 0, false, false, 1, time.Second},
			{"throttled again, nothing accepted between", 100 * time.Millisecond, false, false, 2, 2 * time.Second},
			{"and again", 100 * time.Millisecond, false, false, 3, 4 * time.Second},
			{"a send accepted, then a throttle", time.Second, true, true, 1, time.Second},
			{"nothing accepted since", 0, false, false, 2, 2 * time.Second},
			{"accepted a minute later", time.Minute, true, true, 1, time.Second},
		} {
			if !until.IsZero() {
				clock.Set(until.Add(step.advance))
			}
			if step.accepted {
				ended, err := l.EndPauseRun(ctx, key)
				if err != nil || ended != step.wantEnd {
					t.Fatalf("step %d (%s): EndPauseRun %v, %v; want %v", i, step.name, ended, err, step.wantEnd)
				}
				if again, err := l.EndPauseRun(ctx, key); err != nil || again {
					t.Fatalf("step %d (%s): a second EndPauseRun ended a run (%v, %v)", i, step.name, again, err)
				}
			}
			p, err := l.Pause(ctx, key, o)
			if err != nil {
				t.Fatal(err)
			}
			if p.InARow != step.wantRow || p.Until.Sub(clock.Now()) != step.wantWait {
				t.Fatalf("step %d (%s): %d in a row for %v, want %d for %v", i, step.name, p.InARow, p.Until.Sub(clock.Now()), step.wantRow, step.wantWait)
			}
			// While the pause is on, an accepted send (one in flight when
			// it was set) ends nothing.
			if ended, err := l.EndPauseRun(ctx, key); err != nil || ended {
				t.Fatalf("step %d (%s): EndPauseRun during the pause: %v, %v; want false", i, step.name, ended, err)
			}
			until = p.Until
		}
		if ended, err := l.EndPauseRun(ctx, throttle.PauseKey("sms", "account", "AC2")); err != nil || ended {
			t.Fatalf("a scope never paused: %v, %v; want false", ended, err)
		}
		if _, err := l.EndPauseRun(ctx, "sms:{x}"); err == nil {
			t.Fatal("a bad key was accepted")
		}
	})
}

func TestPauseErrors(t *testing.T) {
	l, _ := reserveLimiter(t)
	ctx := context.Background()
	for _, k := range []string{"", "wa:{x}", "_sys:paused:1"} {
		if _, err := l.Pause(ctx, k, throttle.PauseOptions{Wait: time.Second}); err == nil {
			t.Fatalf("key %q was paused", k)
		}
	}
	if _, err := l.Pause(ctx, "wa:paused:sender:1", throttle.PauseOptions{}); err == nil {
		t.Fatal("a pause without a wait was set")
	}
}

// PausesOf reads the pause keys it is given and lists those on now, as
// Pauses lists the channel's: a key not paused, or whose pause ended, is
// left out, a key named twice counts once, and nothing else is read.
func TestPausesOfReadsTheKeysGiven(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		clock := testutil.NewClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
		l := throttle.NewRedis(rdb, throttle.Options{Clock: clock.Now, OverrideRefresh: -1})
		ctx := context.Background()
		sender, pair := throttle.PauseKey("wa", "sender", "1"), throttle.PauseKey("wa", "pair", "1:+15550100")
		ended, channel := throttle.PauseKey("wa", "sender", "2"), throttle.PauseKey("wa", "channel", "")
		for _, k := range []string{pair, sender, ended} {
			if _, err := l.Pause(ctx, k, throttle.PauseOptions{Wait: time.Hour, Code: 131048, Reason: "spam rate limit"}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := l.Resume(ctx, ended); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
		got, err := l.PausesOf(ctx, []string{pair, ended, channel, sender, pair, throttle.PauseKey("wa", "sender", "3")})
		if err != nil {
			t.Fatal(err)
		}
		all, err := l.Pauses(ctx, "wa:")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].Key != pair || got[1].Key != sender || got[1].Code != 131048 || got[1].Reason != "spam rate limit" ||
			!got[1].Until.Equal(clock.Now().Add(time.Hour-time.Second)) {
			t.Fatalf("pauses of the keys %+v; want the pair's and number 1's, on for 59m59s", got)
		}
		if len(all) != len(got) || all[0] != got[0] || all[1] != got[1] {
			t.Fatalf("PausesOf %+v, Pauses %+v; want the same pauses", got, all)
		}
		if got, err := l.PausesOf(ctx, nil); err != nil || len(got) != 0 {
			t.Fatalf("pauses of no keys: %+v, %v", got, err)
		}
		for _, k := range []string{"wa:number:1", "", "wa:{x}:paused"} {
			if _, err := l.PausesOf(ctx, []string{sender, k}); !errors.Is(err, throttle.ErrBadRequest) {
				t.Fatalf("pauses of %q: %v, want ErrBadRequest", k, err)
			}
		}
	})
}

func TestPauseDropsPrefetchedSlots(t *testing.T) {
	l, _, clock, _ := prefetchLimiter(t, 0)
	ctx := context.Background()
	pause := throttle.PauseKey("api", "sender", "1")
	reqs := []throttle.Request{{Key: "api:global", Limit: huge}, throttle.PauseRequest(pause)}
	if _, err := l.Reserve(ctx, throttle.ReserveOptions{}, reqs...); err != nil {
		t.Fatal(err)
	}
	if r, err := l.Reserve(ctx, throttle.ReserveOptions{}, reqs...); err != nil || !r.Local {
		t.Fatalf("before the pause: local %v, err %v; want a prefetched slot", r.Local, err)
	}
	if _, err := l.Pause(ctx, pause, throttle.PauseOptions{Wait: time.Minute}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Millisecond)
	r, err := l.Reserve(ctx, throttle.ReserveOptions{}, reqs...)
	if err != nil || r.Local || r.Firm {
		t.Fatalf("after the pause: local %v firm %v, err %v; want blocked by Redis", r.Local, r.Firm, err)
	}
}

// PausesOf asks once a channel whether any of its keys is there: a
// channel with none is skipped, the others read key by key, and the
// pauses come sorted by key whatever channels they are in.
func TestPausesOfSkipsChannelsWithoutPauses(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		l := throttle.NewRedis(rdb, throttle.Options{OverrideRefresh: -1})
		ctx := context.Background()
		sms, wa := throttle.PauseKey("sms", "sender", "9"), throttle.PauseKey("wa", "pair", "1:+15550100")
		for _, k := range []string{sms, wa} {
			if _, err := l.Pause(ctx, k, throttle.PauseOptions{Wait: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
		keys := []string{wa, throttle.PauseKey("zz", "channel", ""), throttle.PauseKey("wa", "sender", "1"), sms,
			throttle.PauseKey("sms", "sender", "8"), throttle.PauseKey("zz", "sender", "1")}
		got, err := l.PausesOf(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].Key != sms || got[1].Key != wa {
			t.Fatalf("pauses %+v; want %s's and %s's, in that order", got, sms, wa)
		}
	})
}
