package throttle_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

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
func replay(t *testing.T, l *throttle.Redis, clock *fakeClock, opts throttle.ReserveOptions, sends []throttle.Send, queue []comeBack, check func(i int, r throttle.Reservation)) replayed {
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
