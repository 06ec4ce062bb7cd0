package throttle_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil"

	"github.com/sluice-dev/sluice/throttle"
)

// comeBack is one Reserve of a send in a replay: a dequeue by asynq, or,
// held, the worker asking again after a hold.
type comeBack struct {
	at   time.Time
	i    int // the send
	seq  int // order among come-backs at the same instant
	held bool
}

// replayed is what a replay saw.
type replayed struct {
	firm     []time.Time // by send: its firm instant
	calls    int         // Reserve calls, holds included
	dequeues []int       // by send
	planned  [][]time.Time
}

// replay plays asynq and the worker on the fake clock from queue until
// every send is firm: a send planned beyond the hold comes back at the
// whole second of its place, at a random moment of its first 100ms
// (asynq's forwarder); one blocked without a place at the whole second
// after its wait; one planned within the hold is held and asks again at
// its instant, without a dequeue. check sees every reservation.
func replay(t *testing.T, l *throttle.Redis, clock *testutil.Clock, opts throttle.ReserveOptions, sends []throttle.Send, queue []comeBack, check func(i int, r throttle.Reservation)) replayed {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 11))
	out := replayed{firm: make([]time.Time, len(sends)), dequeues: make([]int, len(sends)), planned: make([][]time.Time, len(sends))}
	jitter := func() time.Duration { return time.Duration(rng.IntN(100)) * time.Millisecond }
	for len(queue) > 0 {
		slices.SortFunc(queue, func(a, b comeBack) int {
			if c := a.at.Compare(b.at); c != 0 {
				return c
			}
			return a.seq - b.seq
		})
		e := queue[0]
		queue = queue[1:]
		if e.at.After(clock.Now()) {
			clock.Set(e.at)
		}
		if !e.held {
			out.dequeues[e.i]++
		}
		o := opts
		o.TaskID = sends[e.i].TaskID
		r, err := l.Reserve(ctx, o, sends[e.i].Requests...)
		out.calls++
		if err != nil {
			t.Fatal(err)
		}
		if check != nil {
			check(e.i, r)
		}
		if out.calls > 10*len(sends) {
			t.Fatalf("%d reserve calls for %d sends: still going", out.calls, len(sends))
		}
		switch {
		case r.Firm:
			if r.Delay() > throttle.DefaultHold {
				t.Fatalf("send %d held %v", e.i, r.Delay())
			}
			out.firm[e.i] = r.At
		case r.Planned && r.Delay() <= throttle.DefaultHold:
			out.planned[e.i] = append(out.planned[e.i], r.At)
			queue = append(queue, comeBack{r.At, e.i, 0, true})
		case r.Planned:
			out.planned[e.i] = append(out.planned[e.i], r.At)
			queue = append(queue, comeBack{r.At.Truncate(time.Second).Add(jitter()), e.i, rng.Int(), false})
		default:
			due := r.At.Truncate(time.Second)
			if due.Before(r.At) {
				due = due.Add(time.Second)
			}
			queue = append(queue, comeBack{due.Add(jitter()), e.i, rng.Int(), false})
		}
	}
	return out
}

// wholeSecondAfter is the first whole second at or after t.
func wholeSecondAfter(t time.Time) time.Time {
	s := t.Truncate(time.Second)
	if s.Before(t) {
		s = s.Add(time.Second)
	}
	return s
}

// Sends planned while their scope is paused get places from the pause's
// end, at most each second's room (78.8/s: 79), so the scope resumes at
// its cap and each send comes back once: planned at enqueue (Plan), a
// send is firm on its only dequeue; dequeued during the pause (Reserve),
// it is planned then and firm on its next.
func TestPausedScopeIsPlannedFromThePausesEnd(t *testing.T) {
	for _, tc := range []struct {
		name    string
		enqueue bool // planned by Plan; else first dequeued during the pause
		perSend float64
	}{{"planned at enqueue", true, 1.05}, {"dequeued during the pause", false, 2.05}} {
		t.Run(tc.name, func(t *testing.T) {
			l, clock := reserveLimiter(t)
			ctx := context.Background()
			opts := throttle.ReserveOptions{Headroom: 0.015}
			pause := throttle.PauseKey("wa", "sender", "1")
			clock.Advance(300 * time.Millisecond) // the pause ends inside a second
			p, err := l.Pause(ctx, pause, throttle.PauseOptions{Wait: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			resume := wholeSecondAfter(p.Until)
			const n = 1000
			sends := make([]throttle.Send, n)
			for i := range sends {
				sends[i] = throttle.Send{TaskID: fmt.Sprint("c", i), Requests: []throttle.Request{
					{Key: "wa:number:1", Limit: mps80}, throttle.PauseRequest(pause)}}
			}
			var queue []comeBack
			places := make([]time.Time, n)
			if tc.enqueue {
				plans, err := l.Plan(ctx, opts, sends)
				if err != nil {
					t.Fatal(err)
				}
				for i, pl := range plans {
					places[i] = pl.At
					queue = append(queue, comeBack{pl.At.Truncate(time.Second).Add(time.Duration(i%100) * time.Millisecond), i, i * 7919 % n, false})
				}
			} else {
				// A plain asynq client's tasks, dequeued through the pause.
				for i := range n {
					queue = append(queue, comeBack{clock.Now().Add(time.Duration(i) * 50 * time.Millisecond), i, 0, false})
				}
			}
			got := replay(t, l, clock, opts, sends, queue, func(i int, r throttle.Reservation) {
				if r.Now.Before(p.Until) && (r.Firm || !r.Planned || r.BlockedBy != throttle.PauseName || r.At.Before(resume)) {
					t.Fatalf("send %d during the pause: firm %v planned %v blocked by %q at %v; want planned from %v, blocked by the pause", i, r.Firm, r.Planned, r.BlockedBy, r.At, resume)
				}
			})
			if !tc.enqueue {
				for i := range n {
					places[i] = got.planned[i][0]
				}
			}
			// Every place is after the pause, each second holds at most its
			// room, and the places are packed at the paced rate.
			perSec := map[int64]int{}
			for i, at := range places {
				if at.Before(resume) {
					t.Fatalf("send %d planned at %v, before the pause's end %v", i, at, resume)
				}
				perSec[at.Unix()]++
			}
			for sec, k := range perSec {
				if k > 79 {
					t.Fatalf("%d sends planned in second %d, room 79", k, sec-resume.Unix())
				}
			}
			last := slices.MaxFunc(places, time.Time.Compare)
			if span := last.Sub(resume); span.Seconds() > n/78.8+1 {
				t.Fatalf("last place %v after the pause's end: not packed at 78.8/s", span)
			}
			// Replayed: the cap holds, the scope resumes at it, and each send
			// comes back once more at most.
			if m := maxInSpan(got.firm, time.Second); m > 80 {
				t.Fatalf("%d sends in one second, cap 80", m)
			}
			first := slices.MinFunc(got.firm, time.Time.Compare)
			end := slices.MaxFunc(got.firm, time.Time.Compare)
			if first.Before(p.Until) {
				t.Fatalf("a send went at %v, before the pause's end %v", first, p.Until)
			}
			rate := float64(n-1) / end.Sub(first).Seconds()
			if rate < 0.95*80 || rate > 80 {
				t.Fatalf("resumed at %.1f/s, want the cap (78.8/s paced)", rate)
			}
			most := 1
			if !tc.enqueue {
				most = 2
			}
			for i, d := range got.dequeues {
				if d > most {
					t.Fatalf("send %d dequeued %d times, want at most %d", i, d, most)
				}
			}
			t.Logf("%d sends: %d reserve calls, resumed at %.1f/s", n, got.calls, rate)
			if float64(got.calls) > tc.perSend*n {
				t.Fatalf("%d reserve calls for %d sends, want at most %.2f each", got.calls, n, tc.perSend)
			}
			if b, _ := l.Backlog(ctx, "wa:number:1"); b.Planned != 0 {
				t.Fatalf("backlog keeps %d sends", b.Planned)
			}
		})
	}
}

// Sends planned before a pause that come back during it are planned once
// more, from the pause's end, each in a place of its own: on a number, at
// its rate; on a 1/s sender, behind the sends that still hold places after
// the pause. None comes back twice during the pause.
func TestSendsBackDuringAPauseArePlannedOncePastItsEnd(t *testing.T) {
	sender1 := throttle.Limit{Name: "sender", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1), Burst: 1}
	for _, tc := range []struct {
		name  string
		key   string
		limit throttle.Limit
		n     int
		cap   int // in any 1s span
	}{{"number at 80/s", "wa:number:1", mps80, 1000, 80}, {"sender at 1/s", "sms:sender:1", sender1, 120, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			l, clock := reserveLimiter(t)
			ctx := context.Background()
			opts := throttle.ReserveOptions{Headroom: 0.015}
			scope, _, _ := strings.Cut(tc.key, ":")
			pause := throttle.PauseKey(scope, "sender", "1")
			sends := make([]throttle.Send, tc.n)
			for i := range sends {
				sends[i] = throttle.Send{TaskID: fmt.Sprint("c", i), Requests: []throttle.Request{
					{Key: tc.key, Limit: tc.limit}, throttle.PauseRequest(pause)}}
			}
			plans, err := l.Plan(ctx, opts, sends)
			if err != nil {
				t.Fatal(err)
			}
			// A provider throttle pauses the scope for a minute, 1.3s in.
			clock.Advance(1300 * time.Millisecond)
			p, err := l.Pause(ctx, pause, throttle.PauseOptions{Wait: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			resume := wholeSecondAfter(p.Until)
			var queue []comeBack
			for i, pl := range plans {
				queue = append(queue, comeBack{pl.At.Truncate(time.Second).Add(time.Duration(i%100) * time.Millisecond), i, i * 7919 % tc.n, false})
			}
			inPause := 0
			got := replay(t, l, clock, opts, sends, queue, func(i int, r throttle.Reservation) {
				if !r.Now.Before(p.Until) {
					return
				}
				inPause++
				if r.Firm || !r.Planned || r.BlockedBy != throttle.PauseName || r.At.Before(resume) {
					t.Fatalf("send %d during the pause: firm %v planned %v blocked by %q at %v; want planned from %v", i, r.Firm, r.Planned, r.BlockedBy, r.At, resume)
				}
			})
			if inPause == 0 {
				t.Fatal("no send came back during the pause")
			}
			// The places given during the pause are distinct: on the number
			// at most a second's room in a second, on the sender at most one
			// per interval.
			var again []time.Time
			for i := range tc.n {
				if got.dequeues[i] > 2 {
					t.Fatalf("send %d dequeued %d times", i, got.dequeues[i])
				}
				if len(got.planned[i]) > 0 {
					again = append(again, got.planned[i][len(got.planned[i])-1])
				}
			}
			if tc.cap == 1 {
				if m := maxInSpan(again, time.Second); m > 1 {
					t.Fatalf("%d sends planned within 1s on a 1/s sender", m)
				}
			} else {
				perSec := map[int64]int{}
				for _, at := range again {
					perSec[at.Unix()]++
				}
				for sec, k := range perSec {
					if k > 79 {
						t.Fatalf("%d sends planned in second %d, room 79", k, sec-resume.Unix())
					}
				}
			}
			if m := maxInSpan(got.firm, time.Second); m > tc.cap {
				t.Fatalf("%d sends in one second, cap %d", m, tc.cap)
			}
			for i, at := range got.firm {
				if !at.Before(p.Until) && at.Before(resume) {
					t.Fatalf("send %d went at %v, inside the pause", i, at)
				}
			}
			t.Logf("%d sends, %d back during the pause: %d reserve calls", tc.n, inPause, got.calls)
			if got.calls > tc.n+inPause+tc.n/20 {
				t.Fatalf("%d reserve calls for %d sends, %d of them back during the pause", got.calls, tc.n, inPause)
			}
		})
	}
}

// Workers were down: a 1/s sender's whole backlog comes back at once and
// cannot go within the hold. Each send gets a place of its own, in the
// order they came back, instead of all of them the firm book's next slot
// (where all but one would come back to be planned again).
func TestSlowLimitHerdGetsDistinctPlaces(t *testing.T) {
	l, clock := reserveLimiter(t)
	ctx := context.Background()
	opts := throttle.ReserveOptions{Headroom: 0.015}
	sender1 := throttle.Limit{Name: "sender", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1), Burst: 1}
	const n = 200
	sends := make([]throttle.Send, n)
	for i := range sends {
		sends[i] = throttle.Send{TaskID: fmt.Sprint("c", i), Requests: []throttle.Request{{Key: "sms:sender:1", Limit: sender1}}}
	}
	if _, err := l.Plan(ctx, opts, sends); err != nil {
		t.Fatal(err)
	}
	clock.Advance(300 * time.Second) // every place is overdue
	var queue []comeBack
	for i := range n {
		queue = append(queue, comeBack{clock.Now(), i, i, false})
	}
	var first []time.Time // each re-planned send's first new place
	got := replay(t, l, clock, opts, sends, queue, func(i int, r throttle.Reservation) {
		if !r.Firm && r.Delay() > throttle.DefaultHold {
			if !r.Planned {
				t.Fatalf("send %d: not firm and not planned", i)
			}
			first = append(first, r.At)
		}
	})
	if len(first) < n-5 {
		t.Fatalf("%d sends planned again, want all but the first few", len(first))
	}
	paced := 0.985 // 1/s less the headroom
	interval := time.Duration(float64(time.Second) / paced)
	sorted := slices.Clone(first)
	slices.SortFunc(sorted, time.Time.Compare)
	for k := 1; k < len(sorted); k++ {
		if gap := sorted[k].Sub(sorted[k-1]); gap < interval-time.Microsecond {
			t.Fatalf("places %v and %v: %v apart, want an interval (%v)", sorted[k-1], sorted[k], gap, interval)
		}
	}
	if !slices.IsSortedFunc(first, time.Time.Compare) {
		t.Fatal("places not in the order the sends came back")
	}
	if m := maxInSpan(got.firm, time.Second); m > 1 {
		t.Fatalf("%d sends within 1s", m)
	}
	t.Logf("%d overdue sends: %d reserve calls", n, got.calls)
	if got.calls > 2*n {
		t.Fatalf("%d reserve calls for %d sends, want at most 2 each", got.calls, n)
	}
}

// An operator ends a pause early (Resume): its planned sends are run at
// once (worker.RunWaiting). Each is firm within the hold or planned again
// from now, and every place it held after the pause's end is given back:
// no second there still counts a send.
func TestSendsOfAPauseEndedEarlyGiveTheirPlacesBack(t *testing.T) {
	l, clock := reserveLimiter(t)
	ctx := context.Background()
	opts := throttle.ReserveOptions{Headroom: 0.015}
	pause := throttle.PauseKey("wa", "sender", "1")
	p, err := l.Pause(ctx, pause, throttle.PauseOptions{Wait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	sends := make([]throttle.Send, n)
	for i := range sends {
		sends[i] = throttle.Send{TaskID: fmt.Sprint("c", i), Requests: []throttle.Request{
			{Key: "wa:number:1", Limit: mps80}, throttle.PauseRequest(pause)}}
	}
	if _, err := l.Plan(ctx, opts, sends); err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * time.Second)
	if ok, err := l.Resume(ctx, pause); err != nil || !ok {
		t.Fatalf("resume: %v %v", ok, err)
	}
	resumed := clock.Now()
	var queue []comeBack
	for i := range n {
		queue = append(queue, comeBack{resumed, i, i * 7919 % n, false})
	}
	got := replay(t, l, clock, opts, sends, queue, nil)
	for i, d := range got.dequeues {
		if d > 2 {
			t.Fatalf("send %d dequeued %d times", i, d)
		}
	}
	if m := maxInSpan(got.firm, time.Second); m > 80 {
		t.Fatalf("%d sends in one second, cap 80", m)
	}
	end := slices.MaxFunc(got.firm, time.Time.Compare)
	if !end.Before(p.Until) {
		t.Fatalf("the last send went at %v, not before the pause would have ended (%v)", end, p.Until)
	}
	plan, err := l.Client().HGetAll(ctx, l.Key("wa:number:1")+"|plan").Result()
	if err != nil {
		t.Fatal(err)
	}
	for f, v := range plan {
		var sec int64
		if _, err := fmt.Sscanf(f, "@%d", &sec); err == nil && !strings.HasSuffix(f, "#") && sec > end.Unix() && v != "0" {
			t.Errorf("second %d (%v after the last send) still counts %s sends", sec, time.Unix(sec, 0).Sub(end), v)
		}
	}
	t.Logf("%d sends run at once: %d reserve calls, the last %v after the resume", n, got.calls, end.Sub(resumed))
}

// Plan looks past a pause only up to MaxPlannedPause: a longer one
// (credentials refused until a probe succeeds) may end early, and the
// sends planned past it would then wait for their planned seconds, out of
// reach of a resume. They are planned as if it were not there.
func TestPlanIgnoresALongPause(t *testing.T) {
	l, clock := reserveLimiter(t)
	ctx := context.Background()
	opts := throttle.ReserveOptions{Headroom: 0.015}
	short, long := throttle.PauseKey("wa", "sender", "1"), throttle.PauseKey("wa", "sender", "2")
	for key, wait := range map[string]time.Duration{short: throttle.MaxPlannedPause, long: throttle.MaxPlannedPause + time.Second} {
		if _, err := l.Pause(ctx, key, throttle.PauseOptions{Wait: wait}); err != nil {
			t.Fatal(err)
		}
	}
	plans, err := l.Plan(ctx, opts, []throttle.Send{
		{TaskID: "s", Requests: []throttle.Request{{Key: "wa:number:1", Limit: mps80}, throttle.PauseRequest(short)}},
		{TaskID: "l", Requests: []throttle.Request{{Key: "wa:number:2", Limit: mps80}, throttle.PauseRequest(long)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := plans[0].At.Sub(clock.Now()); d < throttle.MaxPlannedPause {
		t.Errorf("a %v pause: planned in %v, want past its end", throttle.MaxPlannedPause, d)
	}
	if d := plans[1].At.Sub(clock.Now()); d > time.Second {
		t.Errorf("a longer pause: planned in %v, want now, as if it were not there", d)
	}
}

// An open pause answers in one value (reserve.lua): the decision the
// caller fills in is the one a pause that does not hold a send has
// always had, beside a paused one decided in the same call.
func TestReserveReportsOpenAndHeldPauses(t *testing.T) {
	l, clock := reserveLimiter(t)
	ctx := context.Background()
	open := throttle.PauseRequest("wa:paused:account")
	held := throttle.PauseRequest("wa:paused:sender:2")
	if _, err := l.Pause(ctx, "wa:paused:sender:2", throttle.PauseOptions{Wait: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	r, err := l.Reserve(ctx, throttle.ReserveOptions{}, throttle.Request{Key: "wa:number:1", Limit: mps80}, open)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Firm || len(r.Limits) != 2 {
		t.Fatalf("reserve with an open pause: firm %v, %d limits, want firm, 2", r.Firm, len(r.Limits))
	}
	want := throttle.LimitDecision{Name: throttle.PauseName, Key: "wa:paused:account", Allowed: true, Remaining: 1, Reset: r.Now, Limit: open.Limit.Capacity(), Window: open.Limit.Window()}
	if got := r.Limits[1]; got != want {
		t.Errorf("open pause: got %+v, want %+v", got, want)
	}
	b, err := l.Reserve(ctx, throttle.ReserveOptions{Priority: throttle.High}, throttle.Request{Key: "wa:number:2", Limit: mps80}, open, held)
	if err != nil {
		t.Fatal(err)
	}
	if b.Firm || b.BlockedBy != throttle.PauseName || b.Limits[2].Allowed || !b.Limits[1].Allowed {
		t.Fatalf("reserve with a held pause: firm %v, blocked by %q, limits %+v", b.Firm, b.BlockedBy, b.Limits)
	}
	if w := b.Limits[2].RetryAfter; w <= 29*time.Second || w > 30*time.Second || !b.Limits[2].Reset.Equal(clock.Now().Add(w)) {
		t.Errorf("held pause: retry after %v, reset %v; want the pause's 30s from %v", w, b.Limits[2].Reset, clock.Now())
	}
}
