package worker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/throttle"
)

// testNumber and testPair are a WhatsApp send's two GCRA limits, a
// number's 80/s and a pair's 1 per 6s, for the push and margin tests.
var (
	testNumber = throttle.Request{Key: "t:number:1", Limit: throttle.Limit{Name: "n", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(80), Burst: 1}}
	testPair   = throttle.Request{Key: "t:pair:1:2", Limit: throttle.Limit{Name: "p", Algorithm: throttle.GCRA, Rate: throttle.Rate{Limit: 1, Period: 6 * time.Second}, Burst: 1}}
)

// A held send goes later by the pushes made after its slot was taken for
// a send late before its slot, summed on each of its limits, the most of
// its limits'; pushes made before its reservation (its slot moved in
// Redis already), for a late send after its own slot, or on other keys do
// not move it.
func TestPushesMoveTheSendsHeldAfterTheLateOne(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	number, pair := testNumber, testPair
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
	if got := b.moved(reqs, takenAt{first: at(50)}, at(500)); got != 8*time.Millisecond {
		t.Fatalf("moved %v, want 8ms (the number's two pushes; the pair's 6ms is less)", got)
	}
	// The send held for its slot goes that much later, and its slot says so.
	h := &handler{w: &Worker{pushes: &b}, now: func() time.Time { return at(600) }}
	slot := at(500)
	if err := h.heldForPushes(context.Background(), reqs, takenAt{first: at(50)}, &slot); err != nil {
		t.Fatal(err)
	}
	if !slot.Equal(at(508)) {
		t.Fatalf("slot %v, want 8ms after the one taken", slot.Sub(t0))
	}
	// Pushes older than pushMemory are dropped as new ones come.
	b.add(throttle.Push{Key: "t:number:3", By: time.Millisecond, At: at(100).Add(pushMemory + time.Second), Slot: at(90)})
	if got := b.moved(reqs, takenAt{first: at(50)}, at(500)); got != 0 {
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
	number := testNumber
	var b pushBook
	b.add(throttle.Push{Key: number.Key, By: 7 * time.Millisecond, At: now.Add(time.Microsecond), Slot: now.Add(-time.Second)})
	h := &handler{w: &Worker{pushes: &b}, ch: Channel{Name: "t", Hold: 2 * time.Second, Headroom: 0.015}, rules: nil, now: clock}
	a := &attempt{}
	if _, err := h.reserve(context.Background(), f, Prepared{}, []throttle.Request{number}, a); err != nil {
		t.Fatal(err)
	}
	first := now.Add(time.Millisecond) // the fake's slot
	if !a.base.Equal(first) || !a.slot.Equal(first.Add(7*time.Millisecond)) || !a.taken.first.Equal(now) {
		t.Fatalf("slot %v base %v taken %v; want base %v, slot 7ms after it, taken %v", a.slot, a.base, a.taken, first, now)
	}
}

// retookReserver grants a retake a firm slot 1ms after its Now and says
// which limits it retook: those faster than one send a second.
type retookReserver struct {
	throttle.Limiter
	now time.Time
}

func (f retookReserver) Reserve(_ context.Context, o throttle.ReserveOptions, reqs ...throttle.Request) (throttle.Reservation, error) {
	d := throttle.Decision{Allowed: true, Now: f.now}
	for _, r := range reqs {
		d.Limits = append(d.Limits, throttle.LimitDecision{Key: r.Key, Name: r.Limit.Name, Allowed: true,
			Retook: o.Retake && r.Limit.Rate.Interval() < time.Second})
	}
	return throttle.Reservation{Decision: d, Firm: true, At: f.now.Add(time.Millisecond)}, nil
}

// A send that retook its slots after waking late counts, on the limits the
// retake gave new slots (its number's), only the pushes made after the
// retake: one made between the reservation and the retake has moved the
// new slot in Redis already, and holding the send for it again put it
// among the slots taken after the push (make bench-scale drew a 130429 so
// on 2026-11-28). Its slow limits (the pair's), whose slots it kept, still
// count the pushes since the first reservation, and a push after a late
// departure is asked for each group from its own time.
func TestARetakenSlotIsNotHeldAgainForAPushItIncludes(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 19, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	number, pair := testNumber, testPair
	reqs := []throttle.Request{number, pair, throttle.PauseRequest("t:paused:sender:1")}

	// The retake (at 100ms) records its time and the limits it retook.
	h := &handler{w: &Worker{}, ch: Channel{Name: "t", Hold: 2 * time.Second}, now: func() time.Time { return at(101) }}
	a := &attempt{taken: takenAt{first: at(0)}}
	if err := h.retake(context.Background(), retookReserver{now: at(100)}, reqs, a); err != nil {
		t.Fatal(err)
	}
	if !a.taken.of(number).Equal(at(100)) || !a.taken.of(pair).Equal(at(0)) {
		t.Fatalf("taken of the number %v, of the pair %v; want the retake's (100ms) and the reservation's (0)",
			a.taken.of(number).Sub(t0), a.taken.of(pair).Sub(t0))
	}

	var b pushBook
	b.add(throttle.Push{Key: number.Key, By: 30 * time.Millisecond, At: at(50), Slot: at(-200)}) // before the retake: in its slot
	if got := b.moved(reqs, a.taken, at(500)); got != 0 {
		t.Fatalf("moved %v by a push the retaken slot includes, want 0", got)
	}
	if got := b.moved(reqs, takenAt{first: at(0)}, at(500)); got != 30*time.Millisecond {
		t.Fatalf("moved %v without the retake, want the push's 30ms", got)
	}
	b.add(throttle.Push{Key: pair.Key, By: 7 * time.Millisecond, At: at(60), Slot: at(-300)}) // the pair's kept slot: moves
	b.add(throttle.Push{Key: number.Key, By: 4 * time.Millisecond, At: at(150), Slot: at(-100)})
	if got := b.moved(reqs, a.taken, at(500)); got != 7*time.Millisecond {
		t.Fatalf("moved %v, want the pair's 7ms (the number's 4ms after the retake is less)", got)
	}

	// A late departure asks for a push once per time its slots were taken.
	rec := pushRecorder{calls: make(chan pushCall, 4)}
	h = &handler{w: &Worker{opts: Options{Limiter: rec}, logger: slog.New(slog.DiscardHandler)}, ch: Channel{Name: "t", Headroom: 0.015}}
	d := &departure{h: h, slot: at(500), base: at(500), headroom: 0.015, paced: []throttle.Request{number, pair}, taken: a.taken}
	d.pushIfLate(200 * time.Millisecond)
	h.w.pushing.Wait()
	close(rec.calls)
	got := map[time.Duration][]throttle.Request{}
	for c := range rec.calls {
		got[c.taken.Sub(t0)] = c.reqs
	}
	if len(got) != 2 || len(got[100*time.Millisecond]) != 1 || got[100*time.Millisecond][0] != number || len(got[0]) != 1 || got[0][0] != pair {
		t.Fatalf("pushes by taken %v; want the number's from the retake (100ms), the pair's from the reservation (0)", got)
	}
}
