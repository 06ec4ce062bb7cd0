package throttle_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/throttle"
)

// senderLimit is an SMS sender's cap, as `limits set` 5/s makes it.
var senderLimit = throttle.Limit{Name: "sender", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(5), Burst: 1}

// Two limiters stand for two worker processes: a throttle seen by one
// lowers the key's rate in both, once per burst of throttles; a quiet
// period raises it in both; Reset forgets it.
func TestAdaptiveRateIsSharedByEveryProcess(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		clock := testutil.NewClock(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
		// a caches the state as a worker does; b re-reads it on every call,
		// as a worker does once its cache is older than OverrideRefresh.
		a := throttle.NewRedis(rdb, throttle.Options{Clock: clock.Now, PrefetchSpan: -1})
		b := throttle.NewRedis(rdb, throttle.Options{Clock: clock.Now, PrefetchSpan: -1, OverrideRefresh: time.Nanosecond})
		req := throttle.Request{Key: "sms:sender:+12025550100", Limit: senderLimit}
		o := throttle.AdaptOptions{Decrease: 0.25, Floor: 0.1, Increase: 0.1, Quiet: 5 * time.Second, Margin: 0.1}

		// reserveAt takes the first free slot of the key (High: not behind a
		// plan) and returns how far ahead it is.
		reserveAt := func(l *throttle.Redis, id string) time.Duration {
			t.Helper()
			r, err := l.Reserve(ctx, throttle.ReserveOptions{TaskID: id, Priority: throttle.High, Hold: 10 * time.Second}, req)
			if err != nil || !r.Firm {
				t.Fatalf("reserve %s: firm %v planned %v at %v blocked by %q err %v", id, r.Firm, r.Planned, r.At.Sub(clock.Now()), r.BlockedBy, err)
			}
			return r.At.Sub(clock.Now())
		}
		if d := reserveAt(a, "t1"); d != 0 {
			t.Fatalf("first send at +%v, want now", d)
		}
		if d := reserveAt(b, "t2"); d != 200*time.Millisecond {
			t.Fatalf("second send at +%v, want +200ms (5/s)", d)
		}

		// a's send was throttled (Twilio 20429).
		sent := clock.Now()
		ch, err := a.AdaptDown(ctx, o, throttle.AdaptSignal{Code: 20429, Reason: "Too Many Requests", Sent: sent}, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(ch) != 1 || ch[0].Effective != 1.25 || ch[0].Previous != 5 || ch[0].Configured != 5 || !ch[0].Decrease || ch[0].Code != 20429 {
			t.Fatalf("changes %+v, want 5/s → 1.25/s", ch)
		}
		// Both apply 1.25/s at once: a because it made the change, b on its
		// next read. The key's GCRA book keeps its next slot (+400ms, set at
		// 5/s: the scope's pause covers it); each slot after is 800ms on.
		if d := reserveAt(a, "t3"); d != 400*time.Millisecond {
			t.Fatalf("third send at +%v, want +400ms", d)
		}
		if d := reserveAt(b, "t4"); d != 1200*time.Millisecond {
			t.Fatalf("fourth send at +%v, want +1.2s (800ms later, 1.25/s)", d)
		}

		// The answers of b's sends that were in flight (sent before the
		// decrease), and a throttle within the reaction time, count once:
		// already counted.
		clock.Advance(100 * time.Millisecond)
		for _, s := range []time.Time{sent.Add(-time.Millisecond), clock.Now()} {
			if ch, err := b.AdaptDown(ctx, o, throttle.AdaptSignal{Code: 20429, Sent: s}, req); err != nil || len(ch) != 0 {
				t.Fatalf("throttle of a send at %v: changes %+v err %v; want none", s.Sub(sent), ch, err)
			}
		}

		// After the reaction time a send went through at 1.25/s (b records
		// it), and throttles that race from both processes lower the rate
		// once: with nothing through since the decrease they would be a
		// storm's, which lowers nothing (TestAdaptiveStormIsUndone).
		clock.Advance(2 * time.Second)
		if ch, err := b.AdaptUp(ctx, o, req); err != nil || len(ch) != 0 {
			t.Fatalf("a send through: changes %+v err %v; want none", ch, err)
		}
		var mu sync.Mutex
		var all []throttle.AdaptChange
		var wg sync.WaitGroup
		for i := range 8 {
			l := a
			if i%2 == 1 {
				l = b
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				ch, err := l.AdaptDown(ctx, o, throttle.AdaptSignal{Code: 20429, Sent: clock.Now()}, req)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				all = append(all, ch...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		if len(all) != 1 || all[0].Effective != 0.5 || all[0].Previous != 1.25 || all[0].Ceiling != 1.25 {
			t.Fatalf("racing throttles made %+v, want one change 1.25/s → 0.5/s (the floor)", all)
		}

		// Quiet: b sees its sends go through for 5s, then raises the rate
		// half way to the ceiling (0.875/s); a applies it on its next read.
		for _, step := range []time.Duration{time.Second, 5 * time.Second} {
			clock.Advance(step)
			ch, err = b.AdaptUp(ctx, o, req)
			if err != nil {
				t.Fatal(err)
			}
		}
		if len(ch) != 1 || ch[0].Effective != 0.875 || ch[0].Reason != throttle.ReasonQuiet || ch[0].Decrease {
			t.Fatalf("after a quiet period: %+v, want 0.5/s → 0.875/s", ch)
		}
		ad, err := a.Adaptations(ctx)
		if err != nil || len(ad) != 1 || ad[0].Key != req.Key || ad[0].Limit != "sender" || ad[0].Rate != 0.875 || ad[0].Ceiling != 1.25 || ad[0].Good != 0.5 {
			t.Fatalf("adaptations %+v err %v; want sender at 0.875/s under a ceiling of 1.25/s", ad, err)
		}

		// Every change is one limits.adapted event.
		evs, _, err := a.Events(ctx, "0", 100, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range evs {
			if e.Type == throttle.EventLimitsAdapted {
				got = append(got, e.Previous+" → "+e.Effective+" of "+e.Configured+" ("+e.Reason+")")
				if e.Key != req.Key || e.Name != "sender" {
					t.Fatalf("event %+v: want key %s, name sender", e, req.Key)
				}
			}
		}
		want := []string{"5/s → 1.25/s of 5/s (Too Many Requests)", "1.25/s → 0.5/s of 5/s (throttled)", "0.5/s → 0.875/s of 5/s (quiet)"}
		if len(got) != len(want) {
			t.Fatalf("events %q, want %q", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("events %q, want %q", got, want)
			}
		}

		// A runtime override below the adapted rate rules.
		if err := a.SetOverride(ctx, req.Key, throttle.Override{Rate: throttle.Rate{Limit: 1, Period: 2 * time.Second}}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		first := reserveAt(b, "o1")
		if d := reserveAt(b, "o2") - first; d != 2*time.Second {
			t.Fatalf("under an override of 1/2s: sends %v apart, want 2s", d)
		}
		if _, err := a.UnsetOverride(ctx, req.Key); err != nil {
			t.Fatal(err)
		}

		// Reset forgets the adaptation: 5/s again, in both.
		if n, err := a.Reset(ctx, req.Key); err != nil || n != 1 {
			t.Fatalf("reset: %d err %v", n, err)
		}
		if ad, err := b.Adaptations(ctx); err != nil || len(ad) != 0 {
			t.Fatalf("after reset: %+v err %v", ad, err)
		}
		clock.Advance(time.Minute)
		first = reserveAt(b, "r1")
		if d := reserveAt(b, "r2") - first; d != 200*time.Millisecond {
			t.Fatalf("after reset: sends %v apart, want 200ms (5/s)", d)
		}
	})
}

// A key that saw no throttle and no change for its ceiling's lifetime is
// forgotten by the cleanup.
func TestCleanupForgetsIdleAdaptations(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		clock := testutil.NewClock(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
		l := throttle.NewRedis(rdb, throttle.Options{Clock: clock.Now})
		req := throttle.Request{Key: "sms:sender:+12025550100", Limit: senderLimit}
		o := throttle.AdaptOptions{CeilingTTL: 10 * time.Minute}
		if ch, err := l.AdaptDown(ctx, o, throttle.AdaptSignal{Code: 20429}, req); err != nil || len(ch) != 1 {
			t.Fatalf("down: %+v err %v", ch, err)
		}
		clock.Advance(9 * time.Minute)
		if st, err := l.Cleanup(ctx); err != nil || st.ExpiredAdaptations != 0 {
			t.Fatalf("within its lifetime: %+v err %v", st, err)
		}
		clock.Advance(time.Minute)
		if st, err := l.Cleanup(ctx); err != nil || st.ExpiredAdaptations != 1 {
			t.Fatalf("after it: %+v err %v", st, err)
		}
		if ad, err := l.Adaptations(ctx); err != nil || len(ad) != 0 {
			t.Fatalf("adaptations %+v err %v; want none", ad, err)
		}
	})
}

// A provider storm (every send refused) lowers the rate once, in every
// process; the quiet period after it restores the configured rate, and
// the next one forgets the limit. Only the two rate changes are events.
func TestAdaptiveStormIsUndone(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		clock := testutil.NewClock(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
		// Two processes that re-read the state at every call, as workers do
		// once their cache is older than OverrideRefresh.
		a := throttle.NewRedis(rdb, throttle.Options{Clock: clock.Now, PrefetchSpan: -1, OverrideRefresh: time.Nanosecond})
		b := throttle.NewRedis(rdb, throttle.Options{Clock: clock.Now, PrefetchSpan: -1, OverrideRefresh: time.Nanosecond})
		req := throttle.Request{Key: "whatsapp:throughput:106540352242922", Limit: throttle.Limit{Name: "throughput", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(80), Burst: 1}}
		o := throttle.AdaptOptions{}
		sig := func() throttle.AdaptSignal {
			return throttle.AdaptSignal{Code: 130429, Reason: "Rate limit hit", Sent: clock.Now()}
		}
		ch, err := a.AdaptDown(ctx, o, sig(), req)
		if err != nil || len(ch) != 1 || ch[0].Effective != 20 {
			t.Fatalf("first throttle: changes %+v err %v; want 80/s → 20/s", ch, err)
		}
		// The pauses end, one after the other, and each send is refused:
		// the first refusal with nothing through is a storm, and undoes
		// the decrease at once; the others change nothing.
		for i, d := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second} {
			clock.Advance(d)
			l := a
			if i%2 == 1 {
				l = b
			}
			ch, err := l.AdaptDown(ctx, o, sig(), req)
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 && (len(ch) != 1 || ch[0].Effective != 80 || ch[0].Previous != 20 || ch[0].Reason != throttle.ReasonRecovered || ch[0].Ceiling != 0) {
				t.Fatalf("storm: changes %+v; want 20/s → 80/s, no ceiling", ch)
			}
			if i > 0 && len(ch) != 0 {
				t.Fatalf("throttle in the storm: changes %+v; want none", ch)
			}
		}
		ad, err := a.AdaptationOf(ctx, req.Key)
		if err != nil || len(ad) != 1 || !ad[0].Storm || ad[0].Rate != 80 || !ad[0].Restored {
			t.Fatalf("in the storm: %+v err %v; want 80/s restored, a storm", ad, err)
		}

		// The storm is over: sends go through at 80/s for a quiet period.
		clock.Advance(time.Second)
		for _, d := range []time.Duration{0, time.Second, 2 * time.Second} {
			clock.Advance(d)
			if ch, err = b.AdaptUp(ctx, o, req); err != nil || len(ch) != 0 {
				t.Fatalf("after the storm: changes %+v err %v; want none (already at 80/s)", ch, err)
			}
		}
		// Back at 80/s in a too.
		first := clock.Now()
		for _, id := range []string{"s1", "s2"} {
			if r, err := a.Reserve(ctx, throttle.ReserveOptions{TaskID: id, Priority: throttle.High, Hold: 10 * time.Second}, req); err != nil || !r.Firm {
				t.Fatalf("reserve %s: %+v err %v", id, r, err)
			} else if id == "s2" && r.At.Sub(first) > 25*time.Millisecond {
				t.Fatalf("second send at +%v, want 12.5ms on (80/s)", r.At.Sub(first))
			}
		}
		// After a quiet period at 80/s: forgotten, with no event.
		if ad, err := b.Adaptations(ctx); err != nil || len(ad) != 0 {
			t.Fatalf("after a quiet period at 80/s: %+v err %v; want none", ad, err)
		}
		evs, _, err := a.Events(ctx, "0", 100, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range evs {
			if e.Type == throttle.EventLimitsAdapted {
				got = append(got, e.Previous+" → "+e.Effective+" ("+e.Reason+")")
			}
		}
		if want := []string{"80/s → 20/s (Rate limit hit)", "20/s → 80/s (recovered)"}; !slices.Equal(got, want) {
			t.Fatalf("events %q, want %q", got, want)
		}
	})
}

// A throttle the worker blames on the send's lateness (AdaptSignal.Jitter)
// changes nothing: the worker widens its pacing margin instead.
func TestAdaptDownIgnoresJitter(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		l := throttle.NewRedis(rdb, throttle.Options{})
		req := throttle.Request{Key: "sms:sender:+12025550100", Limit: senderLimit}
		ch, err := l.AdaptDown(ctx, throttle.AdaptOptions{}, throttle.AdaptSignal{Code: 20429, Jitter: true}, req)
		if err != nil || len(ch) != 0 {
			t.Fatalf("changes %+v err %v; want none", ch, err)
		}
		if ad, err := l.Adaptations(ctx); err != nil || len(ad) != 0 {
			t.Fatalf("adaptations %+v err %v; want none", ad, err)
		}
		// The same throttle without the mark lowers the rate.
		if ch, err := l.AdaptDown(ctx, throttle.AdaptOptions{}, throttle.AdaptSignal{Code: 20429}, req); err != nil || len(ch) != 1 {
			t.Fatalf("changes %+v err %v; want one", ch, err)
		}
	})
}
