package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"slices"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/throttle"
)

func TestHeadroomAndMarginAreInverse(t *testing.T) {
	for _, h := range []float64{0, 0.015, 0.025, 0.048, 0.1} {
		if got := marginHeadroom(headroomMargin(h)); got < h-1e-6 || got > h+1e-6 {
			t.Errorf("headroom %v → margin %v → headroom %v", h, headroomMargin(h), got)
		}
	}
	if m := headroomMargin(0.015); m < 15*time.Millisecond || m > 16*time.Millisecond {
		t.Errorf("1.5%% headroom absorbs %v, want 15.2ms", m)
	}
}

// The measured margin is the 99.9th percentile of the departures of the
// current and the previous window; an idle host's few late sends do not
// move it, a busy host's do, and two quiet windows later it is back.
func TestMarginFollowsHowLateSendsLeave(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	b := newMarginBook(0.015, DefaultMaxMargin)
	base := headroomMargin(0.015)
	at := t0
	send := func(n int, late func(i int) time.Duration) {
		for i := range n {
			b.observe(at, late(i))
			at = at.Add(10 * time.Millisecond)
		}
	}
	// Idle: 1ms late, and 1 in 1,000 at 40ms: under the quantile.
	send(1000, func(i int) time.Duration {
		if i%1000 == 7 {
			return 40 * time.Millisecond
		}
		return time.Millisecond
	})
	if m := b.margin(at); m != base {
		t.Fatalf("idle host: margin %v, want the headroom's %v", m, base)
	}
	// Busy: 2% of sends leave 30ms late.
	send(1000, func(i int) time.Duration {
		if i%50 == 0 {
			return 30 * time.Millisecond
		}
		return 3 * time.Millisecond
	})
	if m := b.margin(at); m != 31*time.Millisecond {
		t.Fatalf("busy host: margin %v, want 31ms (the 30ms bucket's end)", m)
	}
	if hr := marginHeadroom(b.margin(at)); hr < 0.03 || hr > 0.031 {
		t.Fatalf("busy host: headroom %v, want 3.0%%", hr)
	}
	// Far later than the bound: the margin stops at it.
	send(1000, func(int) time.Duration { return 200 * time.Millisecond })
	if m := b.margin(at); m != DefaultMaxMargin {
		t.Fatalf("margin %v, want the bound %v", m, DefaultMaxMargin)
	}
	// Idle again: two windows later, the headroom's margin.
	send(2100, func(int) time.Duration { return time.Millisecond })
	if m := b.margin(at); m != base {
		t.Fatalf("idle again: margin %v, want %v", m, base)
	}
}

// A throttle right after a send of its scope left later than the margin
// is jitter: the margin widens to cover it, then halves every minute.
// A scope's first throttle is jitter, even on its very first send; after
// it, without a late departure of its scope, or with the margin at its
// bound, a throttle is not jitter.
func TestThrottleAfterALateDepartureWidensTheMargin(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	b := newMarginBook(0.015, DefaultMaxMargin)
	base := headroomMargin(0.015)
	const sender, other = "sms:paused:sender:+12025550100", "sms:paused:sender:+12025550101"
	b.observe(t0, 2*time.Millisecond, sender)
	if !b.jitter(t0.Add(300*time.Millisecond), t0.Add(300*time.Millisecond), time.Second, sender, true) {
		t.Fatal("a throttle on a scope's very first send is its first throttle: jitter")
	}
	if m := b.margin(t0.Add(300 * time.Millisecond)); m != base+base/2 {
		t.Fatalf("after the first throttle: margin %v, want %v (half again)", m, base+base/2)
	}
	if b.jitter(t0.Add(600*time.Millisecond), t0.Add(600*time.Millisecond), time.Second, sender, true) {
		t.Fatal("no late departure and not the first: a throttle is about the rate")
	}
	if m := b.margin(t0.Add(600 * time.Millisecond)); m != base {
		t.Fatalf("the second throttle says the first was the rate too: margin %v, want %v (the widening given back)", m, base)
	}
	b.observe(t0.Add(time.Second), 24*time.Millisecond, sender) // over the 15ms margin
	start := t0.Add(1500 * time.Millisecond)
	// unseen false (an adapted limit): only a late departure of its own
	// scope makes the other sender's throttle jitter.
	if b.jitter(start.Add(40*time.Millisecond), start, time.Second, other, false) {
		t.Fatal("another sender's late send does not explain this sender's throttle")
	}
	if !b.jitter(start.Add(40*time.Millisecond), start, time.Second, sender, true) {
		t.Fatal("a throttle 0.5s after a send of its sender left 24ms late is jitter")
	}
	if m := b.margin(start); m != 30*time.Millisecond {
		t.Fatalf("margin %v, want 30ms (24ms and a quarter)", m)
	}
	if m := b.margin(start.Add(61 * time.Second)); m != base {
		t.Fatalf("a minute later: margin %v, want the headroom's %v (15ms of feedback is under it)", m, base)
	}
	// A throttle 3s after the late send, on a 1s span: not jitter. On a
	// pair's 6s span it is.
	late := t0.Add(5 * time.Minute)
	b.observe(late, 40*time.Millisecond, sender)
	if b.jitter(late.Add(3*time.Second), late.Add(3*time.Second), time.Second, sender, true) {
		t.Fatal("a late send 3s before does not crowd a 1s span")
	}
	if !b.jitter(late.Add(3*time.Second), late.Add(3*time.Second), 6*time.Second, sender, true) {
		t.Fatal("a late send 3s before crowds a 6s pair span")
	}
	if m := b.margin(late.Add(3 * time.Second)); m != DefaultMaxMargin {
		t.Fatalf("margin %v, want the bound %v (40ms and a quarter is over it)", m, DefaultMaxMargin)
	}
	b.observe(late.Add(4*time.Second), 80*time.Millisecond, sender)
	if b.jitter(late.Add(4500*time.Millisecond), late.Add(4500*time.Millisecond), time.Second, sender, true) {
		t.Fatal("with the margin at its bound a throttle after a late send must lower the rate")
	}
	if m := b.margin(late.Add(4500 * time.Millisecond)); m != DefaultMaxMargin {
		t.Fatalf("margin %v, want it kept at the bound %v: a late departure was seen, the margin is too narrow, not too wide", m, DefaultMaxMargin)
	}
	// At the bound, a throttle after the sender's sends held for 3s is
	// still not a reason to cut its rate; a second one right after is.
	held := late.Add(time.Minute)
	b.accepted(held, sender)
	b.observe(held.Add(4*time.Second), 80*time.Millisecond, sender)
	if !b.jitter(held.Add(4*time.Second), held.Add(4*time.Second), time.Second, sender, true) {
		t.Fatal("at the bound, a throttle after a held rate is jitter")
	}
	if b.jitter(held.Add(5*time.Second), held.Add(5*time.Second), time.Second, sender, true) {
		t.Fatal("a second throttle within 3s lowers the rate")
	}
}

func TestNilMarginBook(t *testing.T) {
	var b *marginBook
	b.observe(time.Now(), time.Second)
	if b.margin(time.Now()) != 0 || b.jitter(time.Now(), time.Time{}, time.Second, "k", true) {
		t.Fatal("a nil margin book measures nothing")
	}
	h := &handler{ch: Channel{Headroom: 0.02}}
	if h.headroom(time.Now()) != 0.02 {
		t.Fatal("without a margin book, the configured headroom")
	}
}

// A throttle with no late send, after the scope's sends went through for
// heldFor, is jitter the worker cannot see: the margin widens by half; so
// is a scope's first throttle, even soon after it began sending. A second
// one soon after, or one right after a throttle, is about the rate.
func TestThrottleAfterAHeldRateIsUnseenJitter(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	b := newMarginBook(0.015, DefaultMaxMargin)
	base := headroomMargin(0.015)
	const number, fresh = "whatsapp:paused:sender:1", "whatsapp:paused:sender:2"
	for i := range 400 {
		at := t0.Add(time.Duration(i) * 12690 * time.Microsecond)
		b.observe(at, time.Millisecond, number)
		b.accepted(at, number)
	}
	b.accepted(t0, fresh)
	now := t0.Add(5 * time.Second)
	if !b.jitter(now, now, time.Second, number, true) {
		t.Fatal("throttled after 5s of sends through at 80/s: unseen jitter")
	}
	if m := b.margin(now); m < base+base/2 || m > base+base/2+time.Millisecond {
		t.Fatalf("margin %v, want half as wide again as %v", m, base)
	}
	if !b.jitter(now, t0.Add(500*time.Millisecond), time.Second, fresh, true) {
		t.Fatal("a scope's first throttle, 0.5s after its first send: unseen jitter")
	}
	widest := b.margin(now)
	if b.jitter(now.Add(500*time.Millisecond), now.Add(500*time.Millisecond), time.Second, number, true) {
		t.Fatal("a second throttle before the rate held again is about the rate")
	}
	if m := b.margin(now.Add(500 * time.Millisecond)); m != widest {
		t.Fatalf("margin %v, want %v: the number's verdict was wrong, but the fresh sender's widened the margin since", m, widest)
	}
	b.accepted(now, fresh)
	if b.jitter(now.Add(time.Second), now.Add(time.Second), time.Second, fresh, true) {
		t.Fatal("throttled again 1s later: the rate is wrong")
	}
	if m := b.margin(now.Add(time.Second)); m < base+base/2 || m > base+base/2+time.Millisecond {
		t.Fatalf("margin %v, want the number's widening back, %v: the fresh sender's verdict is given back", m, base+base/2)
	}
	b.accepted(now, "whatsapp:paused:sender:3")
	if b.jitter(now, now, time.Second, "whatsapp:paused:sender:3", false) {
		t.Fatal("an adapted scope's throttle is about the rate")
	}
}

// A paced send's lateness is measured where it leaves: when the HTTP client
// has written its request, so that a delay between the handoff to the
// channel's Send and the wire (encoding, a dial, a busy host) counts, and
// not when the answer came; a send that writes no request is measured at
// the handoff.
func TestDepartureIsMeasuredOnTheWire(t *testing.T) {
	wrote := make(chan time.Time, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		<-wrote // answers only once the client reported the write: the answer comes after it
	}))
	defer srv.Close()
	delay := 40 * time.Millisecond
	for _, tc := range []struct {
		name string
		send func(ctx context.Context) error
	}{
		{"an HTTP request written after a delay", func(ctx context.Context) error {
			time.Sleep(delay) // the delay under measurement, not a wait for a result
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
			if err != nil {
				return err
			}
			resp, err := srv.Client().Do(req)
			if err == nil {
				resp.Body.Close()
			}
			return err
		}},
		{"no request written", func(context.Context) error { return errors.New("refused before sending") }},
	} {
		h := &handler{w: &Worker{}, ch: Channel{Name: "t"}, margin: newMarginBook(0, time.Hour)}
		// The test's own trace, called after the worker's: when it runs,
		// the worker has taken the write's time.
		var sawWrite time.Time
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { sawWrite = time.Now(); wrote <- sawWrite },
		})
		slot := time.Now()
		dep, ctx := h.departing(ctx, slot, &attempt{slot: slot}, nil, nil)
		err := tc.send(ctx)
		left := dep.done(slot)
		h.margin.mu.Lock()
		w := h.margin.cur
		h.margin.mu.Unlock()
		if w.n != 1 {
			t.Fatalf("%s: %d departures recorded, want 1", tc.name, w.n)
		}
		if err != nil { // no request written: measured at the handoff
			if !left.Equal(slot) || w.counts[0] != 1 {
				t.Errorf("%s: left at %v after the handoff, want at it", tc.name, left.Sub(slot))
			}
			continue
		}
		if left.Sub(slot) < delay || left.After(sawWrite) {
			t.Errorf("%s: left %v after the handoff, the write was seen %v after it: want the write's time, at least %v",
				tc.name, left.Sub(slot), sawWrite.Sub(slot), delay)
		}
	}
	var none *departure
	if got := none.done(time.Time{}); !got.IsZero() {
		t.Errorf("a send not paced left at %v, want its handoff", got) // and nothing is recorded
	}
}

// A send recorded once its answer came, after a later send's handoff
// marked its scope, leaves the mark at the later instant with the larger
// lateness: the margin widens for the wire's delay too.
func TestLateMarkKeepsTheLargerLateness(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	b := newMarginBook(0.015, DefaultMaxMargin)
	b.lateAtHandoff(t0.Add(12*time.Millisecond), 20*time.Millisecond, "k") // the later send, at its handoff
	b.observe(t0, 40*time.Millisecond, "k")                                // the earlier send, on the wire
	m := b.marks["k"]
	if m == nil || !m.lateAt.Equal(t0.Add(12*time.Millisecond)) || m.lateBy != 40*time.Millisecond {
		t.Fatalf("mark %+v: want the later instant with the larger lateness, 40ms", m)
	}
	if b.cur.n != 1 {
		t.Fatalf("%d departures counted, want 1: a handoff's mark is not counted", b.cur.n)
	}
}

// pushRecorder records PushAfterLate calls on calls.
type pushRecorder struct {
	throttle.Limiter
	calls chan pushCall
}

type pushCall struct {
	slot, taken time.Time
	late        time.Duration
	headroom    float64
	reqs        []throttle.Request
}

func (p pushRecorder) PushAfterLate(_ context.Context, slot, taken time.Time, late time.Duration, headroom float64, reqs ...throttle.Request) ([]time.Duration, error) {
	p.calls <- pushCall{slot, taken, late, headroom, reqs}
	return make([]time.Duration, len(reqs)), nil
}

// A send whose request is written later after its slot than the margin of
// the headroom it was paced at (15.2ms a second at 0.015) moves its GCRA
// limits' later slots on, once, counted from the slot it was first given
// (before a hold for a push) and with its reservation's time; one within
// the margin, one with no paced limit, or one paced with no headroom does
// not.
func TestLateWriteMovesTheSlotsAfterIt(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	rec := pushRecorder{calls: make(chan pushCall, 8)}
	h := &handler{w: &Worker{opts: Options{Limiter: rec}, logger: slog.New(slog.DiscardHandler)}, ch: Channel{Name: "t", Headroom: 0.015}, margin: newMarginBook(0.015, time.Hour)}
	number := testNumber
	reqs := []throttle.Request{number, throttle.PauseRequest("t:paused:sender:1")}
	taken := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	send := func(late, held time.Duration, headroom float64, reqs []throttle.Request) {
		t.Helper()
		slot := time.Now().Add(-late)
		a := &attempt{slot: slot, base: slot.Add(-held), taken: takenAt{first: taken}, headroom: headroom}
		dep, ctx := h.departing(context.Background(), slot, a, nil, reqs)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		dep.done(slot)
		h.w.pushing.Wait()
	}
	send(30*time.Millisecond, 0, 0.015, reqs)
	send(-time.Second, 0, 0.015, reqs)                          // on time, however busy the host
	send(30*time.Millisecond, 0, 0.015, reqs[1:])               // no paced limit
	send(30*time.Millisecond, 0, 0, reqs)                       // no headroom: every send would push
	send(10*time.Millisecond, 10*time.Millisecond, 0.015, reqs) // held 10ms for a push: 20ms after its first slot
	close(rec.calls)
	var got []pushCall
	for c := range rec.calls {
		got = append(got, c)
	}
	if len(got) != 2 {
		t.Fatalf("%d pushes %+v, want 2: the late send's and the held one's", len(got), got)
	}
	if c := got[0]; c.late < 30*time.Millisecond || c.headroom != 0.015 || !c.taken.Equal(taken) || len(c.reqs) != 1 || c.reqs[0] != number {
		t.Fatalf("push %+v: want the number's limit, late by 30ms or more, at headroom 0.015, taken at %v", c, taken)
	}
	if c := got[1]; c.late < 20*time.Millisecond || !c.slot.Before(time.Now().Add(-20*time.Millisecond)) {
		t.Fatalf("push %+v: want it late by its 10ms and the 10ms it was held, from the slot first given", c)
	}
}

// A push counts pushAllowance for the way to the provider: a send 11ms
// late pushes under a 15.2ms margin, one 9ms late does not. A later write
// of the same request (the transport's retry) pushes again only when it
// is later by more than a millisecond.
func TestPushCountsTheWayToTheProvider(t *testing.T) {
	rec := pushRecorder{calls: make(chan pushCall, 8)}
	h := &handler{w: &Worker{opts: Options{Limiter: rec}, logger: slog.New(slog.DiscardHandler)}, ch: Channel{Name: "t", Headroom: 0.015}}
	number := testNumber
	slot := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	dep := func() *departure {
		return &departure{h: h, slot: slot, base: slot, headroom: 0.015, paced: []throttle.Request{number}}
	}
	pushes := func() []time.Duration {
		h.w.pushing.Wait()
		var got []time.Duration
		for {
			select {
			case c := <-rec.calls:
				got = append(got, c.late)
			default:
				return got
			}
		}
	}
	dep().pushIfLate(9 * time.Millisecond)
	if got := pushes(); len(got) != 0 {
		t.Fatalf("9ms late: pushed %v, want nothing (9+5ms is within 15.2ms)", got)
	}
	d := dep()
	d.pushIfLate(11 * time.Millisecond)
	d.pushIfLate(11*time.Millisecond + 500*time.Microsecond) // written again at once
	d.pushIfLate(30 * time.Millisecond)                      // written again, later
	got := pushes()
	slices.Sort(got) // pushed from goroutines of their own
	if len(got) != 2 || got[0] != 11*time.Millisecond+pushAllowance || got[1] != 30*time.Millisecond+pushAllowance {
		t.Fatalf("pushed %v, want [%v %v]", got, 11*time.Millisecond+pushAllowance, 30*time.Millisecond+pushAllowance)
	}
}

// A full book of scopes that sent within the minute makes no mark for a
// new scope, and looks for idle marks to drop at most once a
// markSweepEvery, not at every send; a minute later the idle ones go and
// a new scope gets its mark.
func TestFullMarginBookSweepsOnceASecond(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	b := newMarginBook(0.015, DefaultMaxMargin)
	for i := range maxScopeMarks {
		b.accepted(t0, fmt.Sprintf("whatsapp:paused:pair:1:+1202555%05d", i))
	}
	for i := range 1000 {
		at := t0.Add(time.Duration(i) * time.Millisecond)
		b.accepted(at, fmt.Sprintf("whatsapp:paused:pair:1:+1303555%05d", i))
	}
	// (swept at every new scope, the last sweep would be the last send's)
	if len(b.marks) != maxScopeMarks || !b.sweptAt.Equal(t0) {
		t.Fatalf("%d marks, last swept %v after t0; want %d, swept at t0 only: a full book of busy scopes is swept once a second", len(b.marks), b.sweptAt.Sub(t0), maxScopeMarks)
	}
	const late = "whatsapp:paused:pair:1:+14155550000"
	at := t0.Add(time.Minute + 2*time.Second)
	b.accepted(at, late)
	if b.marks[late] == nil || !b.sweptAt.Equal(at) || len(b.marks) != 1 {
		t.Fatalf("a minute on: %d marks, last swept %v after t0, the new scope marked %v; want a sweep then, the idle ones dropped and it marked", len(b.marks), b.sweptAt.Sub(t0), b.marks[late] != nil)
	}
}
