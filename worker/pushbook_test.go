package worker

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/throttle"
)

// A held send goes later by the pushes made after its slot was taken for
// a send late before its slot, summed on each of its limits, the most of
// its limits'; pushes made before its reservation (its slot moved in
// Redis already), for a late send after its own slot, or on other keys do
// not move it.
func TestPushesMoveTheSendsHeldAfterTheLateOne(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	number := throttle.Request{Key: "t:number:1", Limit: throttle.Limit{Name: "n", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(80), Burst: 1}}
	pair := throttle.Request{Key: "t:pair:1:2", Limit: throttle.Limit{Name: "p", Algorithm: throttle.GCRA, Rate: throttle.Rate{Limit: 1, Period: 6 * time.Second}, Burst: 1}}
	reqs := []throttle.Request{number, pair, throttle.PauseRequest("t:paused:sender:1")}
	var b pushBook
	for _, p := range []throttle.Push{
		{Key: number.Key, By: 5 * time.Millisecond, At: at(100), Slot: at(80)},    // counts
		{Key: number.Key, By: 3 * time.Millisecond, At: at(150), Slot: at(120)},   // counts: 8ms on the number
		{Key: number.Key, By: 40 * time.Millisecond, At: at(40), Slot: at(20)},    // before the reservation
		{Key: number.Key, By: 40 * time.Millisecond, At: at(200), Slot: at(900)},  // a late send after this one
		{Key: pair.Key, By: 6 * time.Millisecond, At: at(110), Slot: at(90)},      // 6ms on the pair
		{Key: "t:number:2", By: 40 * time.Millisecond, At: at(120), Slot: at(90)}, // another number
	} {
		b.add(p)
	}
	if got := b.moved(reqs, at(50), at(500)); got != 8*time.Millisecond {
		t.Fatalf("moved %v, want 8ms (the number's two pushes; the pair's 6ms is less)", got)
	}
	// The send held for its slot goes that much later, and its slot says so.
	h := &handler{w: &Worker{pushes: &b}, now: func() time.Time { return at(600) }}
	slot := at(500)
	if err := h.heldForPushes(context.Background(), reqs, at(50), &slot); err != nil {
		t.Fatal(err)
	}
	if !slot.Equal(at(508)) {
		t.Fatalf("slot %v, want 8ms after the one taken", slot.Sub(t0))
	}
	// Pushes older than pushMemory are dropped as new ones come.
	b.add(throttle.Push{Key: "t:number:3", By: time.Millisecond, At: at(100).Add(pushMemory + time.Second), Slot: at(90)})
	if got := b.moved(reqs, at(50), at(500)); got != 0 {
		t.Fatalf("moved %v after pushMemory, want 0", got)
	}
}

// reserve holds a firm send for a push announced after its reservation:
// its slot moves, and base and taken keep what the push after it would
// count from.
func TestReserveHoldsAFirmSendForAPush(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	f := &fakeReserver{now: clock}
	number := throttle.Request{Key: "t:number:1", Limit: throttle.Limit{Name: "n", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(80), Burst: 1}}
	var b pushBook
	b.add(throttle.Push{Key: number.Key, By: 7 * time.Millisecond, At: now.Add(time.Microsecond), Slot: now.Add(-time.Second)})
	h := &handler{w: &Worker{pushes: &b}, ch: Channel{Name: "t", Hold: 2 * time.Second, Headroom: 0.015}, rules: nil, now: clock}
	a := &attempt{}
	if _, err := h.reserve(context.Background(), f, Prepared{}, []throttle.Request{number}, a); err != nil {
		t.Fatal(err)
	}
	first := now.Add(time.Millisecond) // the fake's slot
	if !a.base.Equal(first) || !a.slot.Equal(first.Add(7*time.Millisecond)) || !a.taken.Equal(now) {
		t.Fatalf("slot %v base %v taken %v; want base %v, slot 7ms after it, taken %v", a.slot, a.base, a.taken, first, now)
	}
}
