package throttle_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/throttle"
)

// A provider throttle pauses a scope with sends planned on it: its plan
// moves past the pause's end (DeferPlanned) and the queued tasks move with
// it, so no send comes back during the pause; each is dequeued once, the
// scope resumes at its cap, the cap holds, the sends keep their order
// (whole seconds: a second's sends go in any order) and a send planned
// afterwards goes behind the moved ones. A pause extended later (a storm)
// moves them again.
func TestDeferPlannedMovesAPausedScopesPlanPastItsEnd(t *testing.T) {
	sender1 := throttle.Limit{Name: "sender", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1), Burst: 1}
	pair := throttle.Limit{Name: "pair", Algorithm: throttle.GCRA, Rate: throttle.Rate{Limit: 1, Period: 6 * time.Second}, Burst: 1}
	for _, tc := range []struct {
		name  string
		key   string
		limit throttle.Limit
		pair  bool // each send also has a pair limit of its recipient, not moved
		n     int
		cap   int // in any 1s span
	}{
		{"number at 80/s", "wa:number:1", mps80, false, 1000, 80},
		{"number at 80/s with pairs", "wa:number:1", mps80, true, 1000, 80},
		{"sender at 1/s", "sms:sender:1", sender1, false, 60, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, clock := reserveLimiter(t)
			ctx := context.Background()
			opts := throttle.ReserveOptions{Headroom: 0.015}
			scope, _, _ := strings.Cut(tc.key, ":")
			pause := throttle.PauseKey(scope, "sender", "1")
			sends := make([]throttle.Send, tc.n)
			for i := range sends {
				reqs := []throttle.Request{{Key: tc.key, Limit: tc.limit}, throttle.PauseRequest(pause)}
				if tc.pair {
					reqs = append(reqs, throttle.Request{Key: fmt.Sprintf("%s:pair:1:%d", scope, i), Limit: pair})
				}
				sends[i] = throttle.Send{TaskID: fmt.Sprint("c", i), Requests: reqs}
			}
			plans, err := l.Plan(ctx, opts, sends)
			if err != nil {
				t.Fatal(err)
			}
			// asynq's schedule: task → whole second.
			due := make([]time.Time, tc.n)
			for i, pl := range plans {
				due[i] = pl.At.Truncate(time.Second)
			}
			// Throttled 1.3s in: the pause, the plan moved past it and the
			// tasks with it; then once more in the second after it ends.
			var until []time.Time
			var throttled time.Time
			var probes []int
			for _, wait := range []time.Duration{10 * time.Second, 20 * time.Second} {
				clock.Advance(1300 * time.Millisecond)
				throttled = clock.Now()
				p, err := l.Pause(ctx, pause, throttle.PauseOptions{Wait: wait})
				if err != nil {
					t.Fatal(err)
				}
				d, err := l.DeferPlanned(ctx, p.Until, true, throttle.Request{Key: tc.key, Limit: tc.limit})
				if err != nil {
					t.Fatal(err)
				}
				if d.TooMany || d.Probe == "" || d.ProbeShift <= 0 || d.ProbeShift%time.Second != 0 || d.Shift != d.ProbeShift+time.Second || len(d.TaskIDs) == 0 {
					t.Fatalf("deferred %+v, want a shift of whole seconds and the tasks moved", d)
				}
				var pi int
				fmt.Sscanf(d.Probe, "c%d", &pi)
				due[pi] = due[pi].Add(d.ProbeShift)
				if want := wholeSecondAfter(p.Until); !due[pi].Equal(want) {
					t.Fatalf("probe due at %v, want the pause's first whole second %v", due[pi], want)
				}
				for _, id := range d.TaskIDs {
					i := 0
					fmt.Sscanf(id, "c%d", &i)
					due[i] = due[i].Add(d.Shift)
					if !due[i].After(due[pi]) {
						t.Fatalf("send %d due at %v, with the probe %v", i, due[i], due[pi])
					}
				}
				probes = append(probes, pi)
				for i, at := range due {
					if at.After(clock.Now()) && at.Before(p.Until.Truncate(time.Second)) {
						t.Fatalf("send %d still due at %v, inside the pause (until %v)", i, at, p.Until)
					}
				}
				// Once more at once: nothing left to move.
				if d2, err := l.DeferPlanned(ctx, p.Until, true, throttle.Request{Key: tc.key, Limit: tc.limit}); err != nil || d2.Shift != 0 || len(d2.TaskIDs) != 0 {
					t.Fatalf("deferred again %+v, %v; want nothing moved", d2, err)
				}
				until = append(until, p.Until)
				clock.Set(wholeSecondAfter(p.Until))
			}
			// A new send now goes behind the moved ones.
			late := throttle.Send{TaskID: "late", Requests: []throttle.Request{{Key: tc.key, Limit: tc.limit}, throttle.PauseRequest(pause)}}
			lp, err := l.Plan(ctx, opts, []throttle.Send{late})
			if err != nil {
				t.Fatal(err)
			}
			if last := slices.MaxFunc(due, time.Time.Compare); lp[0].At.Truncate(time.Second).Before(last) {
				t.Fatalf("a send planned after the move got %v, before the last moved send's second %v", lp[0].At, last)
			}
			var queue []comeBack
			before := 0
			for i, at := range due {
				if at.Before(clock.Now()) {
					// Due before the last throttle: it went then (its place
					// is left in the backlog, the replay starts now).
					if !at.Before(throttled) {
						t.Fatalf("send %d due at %v, after the last throttle at %v, was not moved", i, at, throttled)
					}
					before++
					continue
				}
				queue = append(queue, comeBack{at.Add(time.Duration(i%100) * time.Millisecond), i, i * 7919 % tc.n, false})
			}
			back := len(queue)
			got := replay(t, l, clock, opts, sends, queue, func(i int, r throttle.Reservation) {
				if r.BlockedBy == throttle.PauseName {
					t.Fatalf("send %d came back paused at %v", i, r.Now)
				}
			})
			var firm []time.Time
			for i, d := range got.dequeues {
				if d > 1 {
					t.Fatalf("send %d dequeued %d times, want once", i, d)
				}
				if d == 1 {
					firm = append(firm, got.firm[i])
					if got.firm[i].Before(until[1]) {
						t.Fatalf("send %d went at %v, before the pause's end %v", i, got.firm[i], until[1])
					}
				}
			}
			// The last probe went alone in its second.
			last := probes[len(probes)-1]
			for i, at := range got.firm {
				if i != last && got.dequeues[i] == 1 && at.Truncate(time.Second).Equal(got.firm[last].Truncate(time.Second)) {
					t.Fatalf("send %d went at %v, in the probe's second", i, at)
				}
			}
			if m := maxInSpan(firm, time.Second); m > tc.cap {
				t.Fatalf("%d sends in one second, cap %d", m, tc.cap)
			}
			// The pace after the probe's second.
			var rest []time.Time
			for _, at := range firm {
				if at.After(got.firm[last]) {
					rest = append(rest, at)
				}
			}
			first, end := slices.MinFunc(rest, time.Time.Compare), slices.MaxFunc(rest, time.Time.Compare)
			rate := float64(len(rest)-1) / end.Sub(first).Seconds()
			if rate < 0.95*float64(tc.cap) {
				t.Fatalf("resumed at %.2f/s, want the cap %d/s", rate, tc.cap)
			}
			// Order: a send goes no earlier than a send planned a second
			// before it.
			for i := 1; i < tc.n; i++ {
				if got.dequeues[i] == 1 && got.dequeues[i-1] == 1 && plans[i].At.Truncate(time.Second).After(plans[i-1].At) &&
					got.firm[i].Before(got.firm[i-1]) {
					t.Fatalf("send %d went at %v, before send %d (%v) planned before it", i, got.firm[i], i-1, got.firm[i-1])
				}
			}
			t.Logf("%d sends back after the pauses: %d reserve calls, resumed at %.2f/s", back, got.calls, rate)
			if b, _ := l.Backlog(ctx, tc.key); b.Planned != int64(before+1) {
				t.Fatalf("backlog keeps %d sends, want the late one and the %d that went before the throttles", b.Planned, before)
			}
		})
	}
}

// A backlog over MaxDeferredSends is left as it is.
func TestDeferPlannedLeavesAHugeBacklog(t *testing.T) {
	l, clock := reserveLimiter(t)
	ctx := context.Background()
	fast := throttle.Limit{Name: "throughput", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(10000), Burst: 1}
	sends := make([]throttle.Send, throttle.MaxDeferredSends+1)
	for i := range sends {
		sends[i] = throttle.Send{TaskID: fmt.Sprint("c", i), Requests: []throttle.Request{{Key: "wa:number:1", Limit: fast}}}
	}
	for i := 0; i < len(sends); i += 1000 {
		if _, err := l.Plan(ctx, throttle.ReserveOptions{}, sends[i:min(i+1000, len(sends))]); err != nil {
			t.Fatal(err)
		}
	}
	d, err := l.DeferPlanned(ctx, clock.Now().Add(time.Minute), true, throttle.Request{Key: "wa:number:1", Limit: fast})
	if err != nil {
		t.Fatal(err)
	}
	if !d.TooMany || len(d.TaskIDs) != 0 {
		t.Fatalf("deferred %+v, want TooMany and nothing moved", d)
	}
}

// Without a probe (a lone throttle), every planned send moves by the same
// whole seconds: the first due at the pause's first whole second, its
// second's sends with it.
func TestDeferPlannedWithoutAProbeMovesAllAlike(t *testing.T) {
	l, clock := reserveLimiter(t)
	ctx := context.Background()
	opts := throttle.ReserveOptions{Headroom: 0.015}
	pause := throttle.PauseKey("wa", "sender", "1")
	sends := make([]throttle.Send, 300)
	for i := range sends {
		sends[i] = throttle.Send{TaskID: fmt.Sprint("c", i), Requests: []throttle.Request{{Key: "wa:number:1", Limit: mps80}, throttle.PauseRequest(pause)}}
	}
	plans, err := l.Plan(ctx, opts, sends)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(300 * time.Millisecond)
	p, err := l.Pause(ctx, pause, throttle.PauseOptions{Wait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	d, err := l.DeferPlanned(ctx, p.Until, false, throttle.Request{Key: "wa:number:1", Limit: mps80})
	if err != nil {
		t.Fatal(err)
	}
	if d.Probe == "" || d.Shift != d.ProbeShift || d.Shift <= 0 {
		t.Fatalf("deferred %+v, want every send moved alike", d)
	}
	// The moved sends' places: planned again (already held), each its old
	// place plus the shift.
	for i, s := range sends {
		if plans[i].At.Before(clock.Now()) {
			continue
		}
		pl, err := l.Plan(ctx, opts, []throttle.Send{s})
		if err != nil {
			t.Fatal(err)
		}
		if want := plans[i].At.Add(d.Shift); !pl[0].At.Equal(want) {
			t.Fatalf("send %d now at %v, want %v (moved %v)", i, pl[0].At, want, d.Shift)
		}
		if pl[0].At.Before(p.Until.Truncate(time.Second)) {
			t.Fatalf("send %d at %v, inside the pause until %v", i, pl[0].At, p.Until)
		}
	}
}
