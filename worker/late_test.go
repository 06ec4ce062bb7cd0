package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/throttle"
)

// fakeReserver grants each call a firm slot 1ms after its Now.
type fakeReserver struct {
	throttle.Limiter
	now   func() time.Time
	calls []throttle.ReserveOptions
	reqs  [][]throttle.Request
}

func (f *fakeReserver) Reserve(_ context.Context, o throttle.ReserveOptions, reqs ...throttle.Request) (throttle.Reservation, error) {
	f.calls = append(f.calls, o)
	f.reqs = append(f.reqs, reqs)
	now := f.now()
	return throttle.Reservation{Decision: throttle.Decision{Allowed: true, Now: now}, Firm: true, At: now.Add(time.Millisecond)}, nil
}

// A held send that wakes up past maxLate gives up its slot and takes the
// first free one (a retake: high priority, not behind the plan) instead of
// going late; one that wakes on time goes at once.
func TestLateWakeUpTakesANewSlot(t *testing.T) {
	base := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	jump := time.Duration(0)
	clock := func() time.Time { return base.Add(jump) }
	f := &fakeReserver{now: clock}
	after := 0 // calls of now since the first reservation
	h := &handler{w: &Worker{}, ch: Channel{Name: "t", Hold: 2 * time.Second}, rules: &rules.Set{}, now: func() time.Time {
		// After the first reservation: the reply, the wait, the deadline,
		// then the wake-up, which comes 20ms late (the process was not
		// scheduled).
		if len(f.calls) == 1 {
			if after++; after == 4 {
				jump = 20 * time.Millisecond
			}
		}
		return clock()
	}}
	reqs := []throttle.Request{
		{Key: "t:k:1", Limit: throttle.Limit{Name: "k", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(80), Burst: 1}},
		{Key: "t:pair:1", Limit: throttle.Limit{Name: "pair", Algorithm: throttle.GCRA, Rate: throttle.Rate{Limit: 1, Period: 6 * time.Second}, Burst: 1}},
	}
	if _, err := h.reserve(context.Background(), f, Prepared{}, reqs, &attempt{}); err != nil {
		t.Fatal(err)
	}
	if len(f.calls) != 2 || f.calls[0].Priority != throttle.Bulk || f.calls[1].Priority != throttle.High || !f.calls[1].Retake || f.calls[1].TaskID != "" {
		t.Fatalf("reservations %+v: want a bulk one, then after the late wake-up a high-priority retake", f.calls)
	}
	if len(f.reqs[1]) != 2 {
		t.Fatalf("retake's limits %+v: want both paced limits (a new 80/s slot, the 6s pair re-spaced)", f.reqs[1])
	}
}

// plannedReserver plans every call for a slot 4.999s after its Now, late
// in its whole second, with Redis' clock 3ms ahead of this host's.
type plannedReserver struct {
	throttle.Limiter
	now func() time.Time
}

func (p plannedReserver) Reserve(context.Context, throttle.ReserveOptions, ...throttle.Request) (throttle.Reservation, error) {
	redisNow := p.now().Add(3 * time.Millisecond)
	return throttle.Reservation{Decision: throttle.Decision{Now: redisNow}, Planned: true, At: redisNow.Add(4999 * time.Millisecond)}, nil
}

// A send planned late in a second comes back at that second's start on
// the limiter's clock, even when the wait is handed to asynq later: a wait
// measured from a later local now would cross into the next second and
// bring the send back a second late.
func TestPlannedSendComesBackAtItsSlotsSecond(t *testing.T) {
	base := time.Date(2026, 11, 23, 12, 0, 20, 0, time.UTC)
	now := func() time.Time { return base }
	h := &handler{w: &Worker{}, ch: Channel{Name: "t", Hold: 2 * time.Second}, rules: &rules.Set{}, now: now}
	reqs := []throttle.Request{{Key: "t:k:1", Limit: throttle.Limit{Name: "k", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(80), Burst: 1}}}
	_, err := h.reserve(context.Background(), plannedReserver{now: now}, Prepared{}, reqs, &attempt{})
	var te *ThrottledError
	if !errors.As(err, &te) || !te.Planned {
		t.Fatalf("err %v, want a planned *ThrottledError", err)
	}
	// The slot is at Redis 12:00:25.002, second 25, which this host's
	// clock reads at 12:00:24.997: the nearest local whole second is 25.
	if want := base.Add(5 * time.Second); !te.Due.Equal(want) {
		t.Fatalf("due %v, want %v", te.Due, want)
	}
	// When asynq asks, later, the delay still ends at Due.
	due := time.Now().Add(2 * time.Second).Truncate(time.Second)
	if d := RetryDelay(0, &ThrottledError{Planned: true, Wait: time.Hour, Due: due}, nil); d > 2*time.Second || d < time.Until(due)-time.Millisecond {
		t.Fatalf("retry delay %v, want until %v", d, due)
	}
}
