package throttle_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testutil"
	"github.com/sluice-dev/sluice/throttle"
)

// A send that left later than its limit's margin moves the slots taken
// after it on by the excess; within the margin, or on a slower limit whose
// margin is wider, nothing moves.
func TestPushAfterLateMovesLaterSlots(t *testing.T) {
	l, clock := lateLimiter(t)
	ctx := context.Background()
	h := 0.015
	T := time.Duration(float64(time.Second) / 80 / (1 - h)) // 12.69ms
	M := marginOf(h)                                        // 15.23ms
	reqs := []throttle.Request{{Key: "wa:number:1", Limit: mps80}, {Key: "wa:pair:1:2", Limit: pair6}}
	reserve := func() time.Time { return reserveFirm(t, l, h, reqs[:1]...).At }
	first := reserve()
	second := reserve()
	if d := second.Sub(first); d < T-time.Microsecond || d > T+time.Microsecond {
		t.Fatalf("slots %v apart, want %v", d, T)
	}
	// Within the margin: nothing moves.
	moved, err := l.PushAfterLate(ctx, first, time.Time{}, M-time.Millisecond, h, reqs...)
	if err != nil || moved[0] != 0 || moved[1] != 0 {
		t.Fatalf("late by %v: moved %v, %v; want nothing", M-time.Millisecond, moved, err)
	}
	// 20ms late: the number's later slots move on by 20ms - M; the pair's
	// margin (91ms over 6s) covers it.
	moved, err = l.PushAfterLate(ctx, first, time.Time{}, 20*time.Millisecond, h, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	want := 20*time.Millisecond - M
	if moved[0] < want || moved[0] > want+time.Microsecond || moved[1] != 0 {
		t.Fatalf("moved %v, want [%v 0]", moved, want)
	}
	third := reserve()
	if d := third.Sub(second); d < T+want-time.Microsecond || d > T+want+2*time.Microsecond {
		t.Fatalf("next slot %v after the one before, want %v", d, T+want)
	}
	// A firm book that expired: the push counts from the late send's own
	// slot.
	clock.Set(third.Add(time.Minute))
	late := clock.Now()
	moved, err = l.PushAfterLate(ctx, late, time.Time{}, 30*time.Millisecond, h, reqs[:1]...)
	if err != nil || moved[0] == 0 {
		t.Fatalf("moved %v, %v", moved, err)
	}
	if next := reserve(); next.Before(late.Add(T + 30*time.Millisecond - M)) {
		t.Fatalf("slot %v after the late send's, want at least %v", next.Sub(late), T+30*time.Millisecond-M)
	}
}

// Sends paced at 80/s leave at their slots plus a lateness of 0 to 2ms;
// every 37th and the one after it are 25 and 20ms late (a host's hiccup),
// more than the 15ms margin, and push the slots after them (each send's
// slot is taken 300ms ahead, as a batch's). No 1-second span of the
// arrivals holds more than 80. Without the push the late pair and the 79
// sends after them are 81 in a second: one late send alone cannot do it
// at 80/s, where the margin (15.2ms) is wider than the interval (12.7ms),
// but the next one late too can (make bench-scale's throttles).
func TestPushAfterLateKeepsEverySpanAtTheCap(t *testing.T) {
	for _, push := range []bool{true, false} {
		l, clock := lateLimiter(t)
		ctx := context.Background()
		const lead, n = 300 * time.Millisecond, 1000
		h := 0.015
		M := marginOf(h)
		reqs := []throttle.Request{{Key: "wa:number:1", Limit: mps80}}
		type pending struct{ slot, taken, arr time.Time }
		var queue []pending
		var arrivals []time.Time
		var last time.Time
		for reserved := 0; reserved < n || len(queue) > 0; {
			// The next event: a reservation lead before the last slot, or
			// the first pending send's departure.
			nextRes := last.Add(-lead)
			if reserved < n && (len(queue) == 0 || !queue[0].arr.Before(nextRes)) {
				if nextRes.After(clock.Now()) {
					clock.Set(nextRes)
				}
				r := reserveFirm(t, l, h, reqs...)
				late := time.Duration(reserved*7%3) * time.Millisecond
				switch {
				case reserved%37 == 36:
					late = 25 * time.Millisecond
				case reserved%37 == 0 && reserved > 0:
					late = 20 * time.Millisecond
				}
				queue = append(queue, pending{r.At, r.Now, r.At.Add(late)})
				sort.Slice(queue, func(i, j int) bool { return queue[i].arr.Before(queue[j].arr) })
				last = r.At
				reserved++
				continue
			}
			p := queue[0]
			queue = queue[1:]
			if p.arr.After(clock.Now()) {
				clock.Set(p.arr)
			}
			arrivals = append(arrivals, p.arr)
			if late := p.arr.Sub(p.slot); push && late > M {
				if _, err := l.PushAfterLate(ctx, p.slot, p.taken, late, h, reqs...); err != nil {
					t.Fatal(err)
				}
			}
		}
		most := 0
		for i, y := range arrivals {
			k := 0
			for _, a := range arrivals[:i+1] {
				if a.After(y.Add(-time.Second)) {
					k++
				}
			}
			most = max(most, k)
		}
		switch {
		case push && most > 80:
			t.Fatalf("with the push: %d arrivals in one second, cap 80", most)
		case !push && most <= 80:
			t.Fatalf("without the push: at most %d in a second; the test no longer sees what the push prevents", most)
		}
	}
}

// A push that moves a slot is announced to every process that watches:
// the key, how far, when (the limiter's clock) and the late send's slot;
// one within the margin moves nothing and says nothing.
func TestWatchPushesHearsAPush(t *testing.T) {
	l, clock := lateLimiter(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rdb, ch := l.Client(), l.PushesChannel()
	heard := make(chan throttle.Push, 4)
	go func() { _ = l.WatchPushes(ctx, func(p throttle.Push) { heard <- p }) }()
	for deadline := time.Now().Add(5 * time.Second); ; {
		n, err := rdb.PubSubNumSub(ctx, ch).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n[ch] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("WatchPushes never subscribed")
		}
		time.Sleep(time.Millisecond) // polling PUBSUB NUMSUB: the subscription has no signal of its own
	}
	reqs := []throttle.Request{{Key: "wa:number:1", Limit: mps80}}
	slot := clock.Now().Add(-time.Second)
	if _, err := l.PushAfterLate(ctx, slot, time.Time{}, 5*time.Millisecond, 0.015, reqs...); err != nil {
		t.Fatal(err)
	}
	if _, err := l.PushAfterLate(ctx, slot, time.Time{}, 25*time.Millisecond, 0.015, reqs...); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-heard:
		h := 0.015
		want := 25*time.Millisecond - marginOf(h)
		if p.Key != "wa:number:1" || p.By < want || p.By > want+time.Microsecond || !p.At.Equal(clock.Now()) || !p.Slot.Equal(slot) {
			t.Fatalf("heard %+v, want wa:number:1 by %v at %v for slot %v", p, want, clock.Now(), slot)
		}
	case <-time.After(5 * time.Second): // a bound on a hang
		t.Fatal("no push heard")
	}
	select {
	case p := <-heard:
		t.Fatalf("heard %+v too: the push within the margin moved nothing", p)
	default:
	}
}

// The sends of one stall are late together: the first pushes its whole
// excess, and the later ones only what it did not cover, as the slots a
// limit's worth after them moved with it. A 40ms stall at 80/s moves the
// slots 24.8ms, not 24.8 + 12.1.
func TestPushesOfOneStallDoNotAddUp(t *testing.T) {
	l, clock := lateLimiter(t)
	ctx := context.Background()
	h := 0.015
	M := marginOf(h)
	reqs := []throttle.Request{{Key: "wa:number:1", Limit: mps80}}
	var slots []time.Time
	var taken time.Time
	for range 4 {
		r := reserveFirm(t, l, h, reqs...)
		slots, taken = append(slots, r.At), r.Now
	}
	// The stall ends 40ms after the first slot: the three sends due in it
	// leave together.
	end := slots[0].Add(40 * time.Millisecond)
	clock.Set(end)
	var moved []time.Duration
	for _, s := range slots[:3] {
		m, err := l.PushAfterLate(ctx, s, taken, end.Sub(s), h, reqs...)
		if err != nil {
			t.Fatal(err)
		}
		moved = append(moved, m[0])
	}
	want := 40*time.Millisecond - M
	if moved[0] < want || moved[0] > want+time.Microsecond || moved[1] != 0 || moved[2] != 0 {
		t.Fatalf("moved %v, want [%v 0 0]", moved, want)
	}
	// A send whose slot was taken after the push (it moved with the TAT) and
	// that leaves late by more than that pushes again.
	r := reserveFirm(t, l, h, reqs...)
	clock.Set(r.At.Add(20 * time.Millisecond))
	m, err := l.PushAfterLate(ctx, r.At, r.Now, 20*time.Millisecond, h, reqs...)
	if err != nil || m[0] < 20*time.Millisecond-M || m[0] > 20*time.Millisecond-M+time.Microsecond {
		t.Fatalf("moved %v, %v; want %v", m, err, 20*time.Millisecond-M)
	}
}

// Two GCRA limits that share a key (as hash fields) keep their pushes
// apart: a later send's push deducts only its own limit's. (Deducting the
// other's too left a push of 2.3ms where 10ms was needed.)
func TestPushesOfLimitsSharingAKeyStayApart(t *testing.T) {
	l, clock := lateLimiter(t)
	ctx := context.Background()
	h := 0.015
	M := marginOf(h)
	reqs := []throttle.Request{
		{Key: "wa:number:1", Limit: mps80},
		{Key: "wa:number:1", Limit: throttle.Limit{Name: "ten", Algorithm: throttle.GCRA, Rate: throttle.Rate{Limit: 700, Period: 10 * time.Second}, Burst: 1}},
	}
	var slots []time.Time
	var taken time.Time
	for range 2 {
		r := reserveFirm(t, l, h, reqs...)
		slots, taken = append(slots, r.At), r.Now
	}
	clock.Set(slots[0].Add(160 * time.Millisecond))
	a, err := l.PushAfterLate(ctx, slots[0], taken, 160*time.Millisecond, h, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	late := 170 * time.Millisecond // the second, held in the same stall
	clock.Set(slots[1].Add(late))
	b, err := l.PushAfterLate(ctx, slots[1], taken, late, h, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	// On the 1-second limit the second needs late - M, less the first's push.
	want := late - M - a[0]
	if want <= 0 || b[0] < want-time.Microsecond || b[0] > want+time.Microsecond {
		t.Fatalf("pushes %v then %v: the second on the 1-second limit moved %v, want %v", a, b, b[0], want)
	}
}

// lateLimiter is a limiter on a redis-server of the test's own, on a fake
// clock from 2026-11-27 12:00 UTC.
func lateLimiter(t *testing.T) (*throttle.Redis, *testutil.Clock) {
	t.Helper()
	clock := testutil.NewClock(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	return throttle.NewRedis(redistest.Start(t).Client(t), throttle.Options{Clock: clock.Now, OverrideRefresh: -1}), clock
}

// marginOf is the margin of headroom h on a 1-second period, h/(1-h)
// seconds: 15.23ms at 0.015.
func marginOf(h float64) time.Duration { return time.Duration(float64(time.Second) * h / (1 - h)) }

// reserveFirm takes the next free slot of reqs (high priority, headroom
// h), which must be firm.
func reserveFirm(t *testing.T, l *throttle.Redis, h float64, reqs ...throttle.Request) throttle.Reservation {
	t.Helper()
	r, err := l.Reserve(context.Background(), throttle.ReserveOptions{Headroom: h, Priority: throttle.High}, reqs...)
	if err != nil || !r.Firm {
		t.Fatalf("reserve: %+v, %v", r, err)
	}
	return r
}
