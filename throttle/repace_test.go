package throttle_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testutil"
	"github.com/sluice-dev/sluice/throttle"
)

// Sends planned while a provider held a sender down (1/s adapted to
// 0.25/s: places 4 s apart) keep their places when the rate climbs back;
// NextTooLate names the next one once a send took its slot, so that the
// caller runs it at the pace of now, and names none while the places are
// at that pace, the limit is not adapted, or nothing is planned.
func TestNextTooLateNamesTheSendPlannedAtTheRateOfBefore(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	clock := testutil.NewClock(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	l := throttle.NewRedis(rdb, throttle.Options{Clock: clock.Now, PrefetchSpan: -1})
	sender := throttle.Limit{Name: "sender", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1), Burst: 1}
	req := throttle.Request{Key: "sms:sender:+12025550100", Limit: sender}
	reqs := []throttle.Request{req}
	const hold = 2 * time.Second

	if id, err := l.NextTooLate(ctx, reqs, clock.Now(), hold); err != nil || id != "" {
		t.Fatalf("not adapted: NextTooLate = %q, %v; want none", id, err)
	}
	o := throttle.AdaptOptions{Decrease: 0.25, Floor: 0.1, Increase: 0.5, Quiet: 5 * time.Second, Margin: 0.1}
	if ch, err := l.AdaptDown(ctx, o, throttle.AdaptSignal{Code: 20429, Sent: clock.Now()}, req); err != nil || len(ch) != 1 {
		t.Fatalf("adapt down: %+v %v", ch, err)
	}
	planned, err := l.Plan(ctx, throttle.ReserveOptions{Hold: hold}, []throttle.Send{
		{TaskID: "p1", Requests: reqs}, {TaskID: "p2", Requests: reqs}, {TaskID: "p3", Requests: reqs}, {TaskID: "p4", Requests: reqs}})
	if err != nil {
		t.Fatal(err)
	}
	if gap := planned[3].At.Sub(planned[2].At); gap != 4*time.Second {
		t.Fatalf("planned %v apart at 0.25/s, want 4s", gap)
	}
	// take reserves task id at its place and returns its slot.
	take := func(id string, place time.Time) time.Time {
		t.Helper()
		if place.After(clock.Now()) {
			clock.Set(place)
		}
		r, err := l.Reserve(ctx, throttle.ReserveOptions{TaskID: id, Hold: hold}, reqs...)
		if err != nil || !r.Firm {
			t.Fatalf("%s: firm %v at %v, %v", id, r.Firm, r.At, err)
		}
		return r.At
	}
	// The first sends go through for a quiet period: the rate climbs.
	take("p1", planned[0].At)
	clock.Advance(2 * time.Second)
	if _, err := l.AdaptUp(ctx, o, req); err != nil {
		t.Fatal(err)
	}
	p2 := take("p2", planned[1].At)
	if id, err := l.NextTooLate(ctx, reqs, p2, hold); err != nil || id != "" {
		t.Fatalf("at 0.25/s still: NextTooLate = %q, %v; want none", id, err)
	}
	clock.Advance(o.Quiet)
	ch, err := l.AdaptUp(ctx, o, req)
	if err != nil || len(ch) != 1 || ch[0].Effective < 0.5 {
		t.Fatalf("adapt up: %+v %v; want 0.25/s raised to 0.5/s or more", ch, err)
	}
	p3 := take("p3", planned[2].At)
	if id, err := l.NextTooLate(ctx, reqs, p3, hold); err != nil || id != "p4" {
		t.Fatalf("after p3: NextTooLate = %q, %v; want p4 (planned 4s on, at most 2s at %v/s)", id, err, ch[0].Effective)
	}
	// p4 run at once comes back before its place and takes the next slot.
	p4 := take("p4", time.Time{})
	if gap := p4.Sub(p3); gap > time.Duration(float64(time.Second)/ch[0].Effective)+10*time.Millisecond {
		t.Fatalf("p4 run early went %v after p3, want the interval of %v/s", gap, ch[0].Effective)
	}
	if id, err := l.NextTooLate(ctx, reqs, p4, hold); err != nil || id != "" {
		t.Fatalf("nothing left planned: NextTooLate = %q, %v", id, err)
	}
	// A send planned now still goes behind the plan's tail, set at the
	// rate of before (the tail of a slow limit only moves on): it is named
	// too.
	if _, err := l.Plan(ctx, throttle.ReserveOptions{Hold: hold}, []throttle.Send{{TaskID: "p5", Requests: reqs}}); err != nil {
		t.Fatal(err)
	}
	if id, err := l.NextTooLate(ctx, reqs, p4, hold); err != nil || id != "p5" {
		t.Fatalf("p5 planned behind the old tail: NextTooLate = %q, %v; want p5", id, err)
	}
}
