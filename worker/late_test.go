package worker

import (
	"context"
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
}

func (f *fakeReserver) Reserve(_ context.Context, o throttle.ReserveOptions, _ ...throttle.Request) (throttle.Reservation, error) {
	f.calls = append(f.calls, o)
	now := f.now()
	return throttle.Reservation{Decision: throttle.Decision{Allowed: true, Now: now}, Firm: true, At: now.Add(time.Millisecond)}, nil
}

// A held send that wakes up past maxLate gives up its slot and takes the
// first free one (high priority, not behind the plan) instead of going
// late; one that wakes on time goes at once.
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
	reqs := []throttle.Request{{Key: "t:k:1", Limit: throttle.Limit{Name: "k", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(80), Burst: 1}}}
	if _, err := h.reserve(context.Background(), f, Prepared{}, reqs); err != nil {
		t.Fatal(err)
	}
	if len(f.calls) != 2 || f.calls[0].Priority != throttle.Bulk || f.calls[1].Priority != throttle.High {
		t.Fatalf("reservations %+v: want a bulk one, then after the late wake-up a high-priority one", f.calls)
	}
}
