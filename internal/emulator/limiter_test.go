package emulator

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type allowStep struct {
	at   time.Duration // since t0
	ok   bool
	wait time.Duration // when !ok
}

func runSteps(t *testing.T, g *limiter, l limit, tolerance time.Duration, steps []allowStep) {
	t.Helper()
	for i, st := range steps {
		ok, _, wait := g.allow(t0.Add(st.at), tolerance, l)
		assert.Equal(t, st.ok, ok, "step %d at %s", i, st.at)
		if !st.ok {
			assert.Equal(t, st.wait, wait, "step %d at %s: wait", i, st.at)
		}
	}
}

func interval(d time.Duration) limit { return limit{key: "k", interval: d} }

func TestGCRAExact(t *testing.T) {
	t.Parallel()
	runSteps(t, newLimiter(false), interval(100*time.Millisecond), 0, []allowStep{
		{at: 0, ok: true},
		{at: 0, ok: false, wait: ms(100)},
		{at: ms(99), ok: false, wait: ms(1)},
		{at: ms(100), ok: true},
		{at: ms(250), ok: true}, // idle: TAT restarts from now
		{at: ms(349), ok: false, wait: ms(1)},
		{at: ms(350), ok: true},
	})
}

func TestGCRATolerance(t *testing.T) {
	t.Parallel()
	// T = 100ms, tolerance 50ms: a request may be up to 50ms early.
	runSteps(t, newLimiter(false), interval(100*time.Millisecond), 50*time.Millisecond, []allowStep{
		{at: 0, ok: true},                    // TAT 100
		{at: 0, ok: false, wait: ms(50)},     // 0 < 100-50
		{at: ms(49), ok: false, wait: ms(1)}, //
		{at: ms(50), ok: true},               // TAT 200
		{at: ms(150), ok: true},              // TAT 300
		{at: ms(240), ok: false, wait: ms(10)},
		{at: ms(250), ok: true}, // TAT 400: early arrivals do not add up
	})
}

func TestGCRABurstAtOneInstant(t *testing.T) {
	t.Parallel()
	// At one instant 1 + tolerance/T requests conform: 5 at 80/s with 50ms.
	steps := []allowStep{}
	for range 5 {
		steps = append(steps, allowStep{at: 0, ok: true})
	}
	steps = append(steps, allowStep{at: 0, ok: false, wait: ms(12.5)})
	runSteps(t, newLimiter(false), interval(time.Second/80), 50*time.Millisecond, steps)
}

func TestGCRAAllOrNothing(t *testing.T) {
	t.Parallel()
	g := newLimiter(false)
	a := limit{key: "a", interval: time.Second}
	b := limit{key: "b", interval: 10 * time.Second}

	ok, failed, _ := g.allow(t0, 0, a, b)
	assert.True(t, ok)
	assert.Equal(t, -1, failed)

	// b refuses at +1s, so a must not be charged either.
	ok, failed, wait := g.allow(t0.Add(time.Second), 0, a, b)
	assert.False(t, ok)
	assert.Equal(t, 1, failed)
	assert.Equal(t, 9*time.Second, wait)

	ok, _, _ = g.allow(t0.Add(time.Second), 0, a)
	assert.True(t, ok, "a was charged by a refused request")

	g.reset()
	ok, _, _ = g.allow(t0.Add(time.Second), 0, a, b)
	assert.True(t, ok, "reset keeps state")
}

func TestPerSecondCalendar(t *testing.T) {
	t.Parallel()
	steps := []allowStep{
		{at: ms(250), ok: true},
		{at: ms(250), ok: true},
		{at: ms(900), ok: true},
		{at: ms(900), ok: false, wait: ms(100)}, // 4th in second 0: wait for second 1
		{at: time.Second - 1, ok: false, wait: 1},
		{at: time.Second, ok: true}, // the count starts over
		{at: time.Second, ok: true},
		{at: time.Second, ok: true},
		{at: time.Second, ok: false, wait: time.Second},
		{at: ms(2999), ok: true}, // second 2: refusals in second 1 were not counted
	}
	// Tolerance does not apply to a per-second count.
	runSteps(t, newLimiter(true), limit{key: "k", perSecond: 3}, time.Hour, steps)
}

func TestPerSecondSliding(t *testing.T) {
	t.Parallel()
	steps := []allowStep{
		{at: ms(250), ok: true},
		{at: ms(250), ok: true},
		{at: ms(900), ok: true},
		{at: ms(900), ok: false, wait: ms(350)}, // until the first at 250 leaves
		{at: time.Second, ok: false, wait: ms(250)},
		{at: ms(1250) - 1, ok: false, wait: 1},
		{at: ms(1250), ok: true}, // (250, 1250]: both at 250 have left
		{at: ms(1250), ok: true}, // 900, 1250, 1250
		{at: ms(1250), ok: false, wait: ms(650)},
		{at: ms(1900), ok: true}, // 900 has left: 1250, 1250, 1900
		{at: ms(2249), ok: false, wait: ms(1)},
		{at: ms(2250), ok: true}, // both at 1250 have left; refusals were not counted
		{at: ms(2250), ok: true},
		{at: ms(2250), ok: false, wait: ms(650)},
	}
	// Tolerance does not apply to a per-second count.
	runSteps(t, newLimiter(false), limit{key: "k", perSecond: 3}, time.Hour, steps)
}

// TestPerSecondModes is a burst that straddles a whole second: N at s.999
// then one at s+1.001 is refused in the strict mode, accepted in the calendar
// mode.
func TestPerSecondModes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		calendar bool
		ok       bool
	}{
		{name: "sliding", calendar: false, ok: false},
		{name: "calendar", calendar: true, ok: true},
	} {
		g := newLimiter(tc.calendar)
		l := limit{key: "k", perSecond: 80}
		for i := range 80 {
			ok, _, _ := g.allow(t0.Add(ms(999)), 0, l)
			require.True(t, ok, "%s: %d", tc.name, i)
		}
		ok, _, wait := g.allow(t0.Add(ms(1001)), 0, l)
		assert.Equal(t, tc.ok, ok, tc.name)
		if !ok {
			assert.Equal(t, ms(998), wait, tc.name)
		}
	}
}

func TestPerSecondAllOrNothing(t *testing.T) {
	t.Parallel()
	for _, calendar := range []bool{false, true} {
		g := newLimiter(calendar)
		perSec := limit{key: "n", perSecond: 2}
		pair := limit{key: "n|r", interval: 6 * time.Second}

		ok, _, _ := g.allow(t0, 0, perSec, pair)
		assert.True(t, ok)
		// pair refuses, so the count must not be charged.
		ok, failed, _ := g.allow(t0, 0, perSec, pair)
		assert.False(t, ok)
		assert.Equal(t, 1, failed)
		ok, _, _ = g.allow(t0, 0, perSec)
		assert.True(t, ok, "calendar %v: the count was charged by a refused request", calendar)
		ok, failed, _ = g.allow(t0, 0, perSec)
		assert.False(t, ok)
		assert.Equal(t, 0, failed)

		g.reset()
		ok, _, _ = g.allow(t0, 0, perSec)
		assert.True(t, ok, "calendar %v: reset keeps state", calendar)
	}
}

func TestWindowKeepsTheLast2s(t *testing.T) {
	t.Parallel()
	var w window
	for i := range 1000 {
		now := t0.Add(time.Duration(i) * ms(12.5))
		ok, _ := w.check(now, 80, 1)
		require.True(t, ok, "arrival %d", i)
		w.add(now, 80, 1)
		require.LessOrEqual(t, len(w.at), 160)
	}
	assert.Len(t, w.at, 160) // (latest-2s, latest] at 12.5ms
	assert.Equal(t, t0.Add(999*ms(12.5)), w.at[159])
	assert.True(t, slices.IsSortedFunc(w.at, func(a, b time.Time) int { return a.Compare(b) }))
}

// TestPerSecondClockSetBack: a request decided after later ones (a clock
// set back, or a request that took the lock late) is refused iff a
// 1-second span holding it would be over the cap: the spans ending at the
// accepted times after it count too.
func TestPerSecondClockSetBack(t *testing.T) {
	t.Parallel()
	runSteps(t, newLimiter(false), limit{key: "k", perSecond: 2}, 0, []allowStep{
		{at: ms(1500), ok: true},
		{at: ms(1200), ok: true},                 // (500, 1500] holds it and 1500
		{at: ms(600), ok: false, wait: ms(1600)}, // (500, 1500] would hold 600, 1200, 1500
		{at: ms(100), ok: true},                  // no span holds it with 1200 and 1500
		{at: ms(2199), ok: false, wait: ms(1)},   // (1199, 2199] holds 1200, 1500
		{at: ms(2200), ok: true},                 // 1200 has left
	})
}

// TestPerSecondOutOfOrder decides requests as a busy server takes them:
// arrivals a few ms apart, each decided up to 300ms after later ones. The
// accepted ones never exceed the cap in any 1-second span, and each refused
// one would have (no false refusal). In any order at all (a clock set back
// by seconds), the cap still holds.
func TestPerSecondOutOfOrder(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 11))
	const n = 5
	for round := range 300 {
		g := newLimiter(false)
		l := limit{key: "k", perSecond: n}
		var arrivals []time.Duration
		for i := range 60 {
			arrivals = append(arrivals, time.Duration(i)*ms(90)+time.Duration(rng.IntN(60))*time.Millisecond)
		}
		slices.Sort(arrivals)
		// Decided in the order of arrival plus up to 300ms of delay each.
		decided := slices.Clone(arrivals)
		delay := map[time.Duration]time.Duration{}
		for _, a := range arrivals {
			delay[a] = time.Duration(rng.IntN(300)) * time.Millisecond
		}
		slices.SortStableFunc(decided, func(a, b time.Duration) int { return int(a + delay[a] - b - delay[b]) })
		var accepted []time.Duration
		for _, at := range decided {
			ok, _, _ := g.allow(t0.Add(at), 0, l)
			with := append(slices.Clone(accepted), at)
			fits := maxInAnySpanOracle(with, time.Second) <= n
			require.Equal(t, fits, ok, "round %d: request at %s after %v", round, at, accepted)
			if ok {
				accepted = with
			}
		}
	}
	for round := range 300 {
		g := newLimiter(false)
		l := limit{key: "k", perSecond: n}
		var accepted []time.Duration
		for range 40 {
			at := time.Duration(rng.IntN(5000)) * time.Millisecond
			if ok, _, _ := g.allow(t0.Add(at), 0, l); ok {
				accepted = append(accepted, at)
			}
		}
		require.LessOrEqual(t, maxInAnySpanOracle(accepted, time.Second), n, "round %d: accepted %v", round, accepted)
	}
}

// maxInAnySpanOracle is the brute-force count: for every accepted time as a
// span's start, the accepted times in [start, start+span).
func maxInAnySpanOracle(at []time.Duration, span time.Duration) int {
	best := 0
	for _, start := range at {
		n := 0
		for _, a := range at {
			if a >= start && a < start+span {
				n++
			}
		}
		best = max(best, n)
	}
	return best
}

// checkSlidingBound feeds arrivals (in the given order) to a sliding
// limiter of cap n and checks the accepted set against brute force: no 1-s
// span holds more than n, and, for arrivals in time order, a request was
// refused only if (t-1s, t] already held n accepted.
func checkSlidingBound(t *testing.T, arrivals []time.Duration, n int) {
	t.Helper()
	g := newLimiter(false)
	l := limit{key: "k", perSecond: n}
	var accepted []time.Duration
	sorted := slices.IsSorted(arrivals)
	for _, at := range arrivals {
		ok, _, wait := g.allow(t0.Add(at), 0, l)
		inWindow := 0
		for _, a := range accepted {
			if a > at-time.Second && a <= at {
				inWindow++
			}
		}
		if sorted {
			require.Equal(t, inWindow < n, ok, "arrival at %s with %d in (t-1s, t]", at, inWindow)
		}
		if ok {
			accepted = append(accepted, at)
		} else {
			require.Positive(t, wait)
		}
	}
	require.LessOrEqual(t, maxInAnySpanOracle(accepted, time.Second), n, "accepted %v", accepted)
}

func TestPerSecondSlidingProperty(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		n := 1 + r.IntN(10)
		arrivals := make([]time.Duration, r.IntN(200))
		for i := range arrivals {
			// Millisecond grid over 5s, so that ties and exact 1s gaps occur.
			arrivals[i] = time.Duration(r.IntN(5000)) * time.Millisecond
		}
		if r.IntN(2) == 0 {
			slices.Sort(arrivals)
		}
		checkSlidingBound(t, arrivals, n)
	}
}

func FuzzPerSecondSliding(f *testing.F) {
	f.Add(uint8(3), []byte{0, 0, 0, 0, 250, 250, 1, 0})
	f.Add(uint8(1), []byte{10, 10, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, n uint8, gaps []byte) {
		if n == 0 || n > 20 || len(gaps) > 500 {
			t.Skip()
		}
		// Each byte is a gap of 0..255 ms, 4ms a step: arrivals in time order.
		var arrivals []time.Duration
		var at time.Duration
		for _, g := range gaps {
			at += time.Duration(g) * 4 * time.Millisecond
			arrivals = append(arrivals, at)
		}
		checkSlidingBound(t, arrivals, int(n))
	})
}

// costStep is an allowStep with the request's cost (Twilio's segments).
type costStep struct {
	at   time.Duration
	cost int
	ok   bool
	wait time.Duration
}

func runCostSteps(t *testing.T, g *limiter, perSecond int, steps []costStep) {
	t.Helper()
	for i, st := range steps {
		ok, _, wait := g.allow(t0.Add(st.at), time.Hour, limit{key: "k", perSecond: perSecond, cost: st.cost})
		assert.Equal(t, st.ok, ok, "step %d at %s cost %d", i, st.at, st.cost)
		if !st.ok {
			assert.Equal(t, st.wait, wait, "step %d at %s cost %d: wait", i, st.at, st.cost)
		}
	}
}

// TestPerSecondCostSliding: a per-second cap counts units (segments); a
// request over the cap fits only an empty span and its units go out n a
// second, so the next request waits for them.
func TestPerSecondCostSliding(t *testing.T) {
	t.Parallel()
	runCostSteps(t, newLimiter(false), 3, []costStep{
		{at: 0, cost: 2, ok: true},
		{at: ms(100), cost: 2, ok: false, wait: ms(900)}, // 2 + 2 > 3
		{at: ms(100), cost: 1, ok: true},                 // 2 + 1 = 3
		{at: ms(1000), cost: 1, ok: true},                // both at 0 have left: 100 and 1000
		{at: ms(1000), cost: 2, ok: false, wait: ms(100)},
		{at: ms(1100), cost: 2, ok: true}, // 1000, 1100, 1100
		// 7 units on a cap of 3: only into an empty span, then 3 a second.
		{at: ms(2099), cost: 7, ok: false, wait: ms(1)},
		{at: ms(2100), cost: 7, ok: true}, // units at 2100 ×3, 3100 ×3, 4100
		{at: ms(4000), cost: 1, ok: false, wait: ms(100)},
		{at: ms(4099), cost: 1, ok: false, wait: ms(1)},
		{at: ms(4100), cost: 1, ok: true}, // (3100, 4100] holds 4100 and this one
		{at: ms(4100), cost: 2, ok: false, wait: ms(1000)},
	})
	// One MPS: a 3-segment message takes 3 seconds of the sender.
	runCostSteps(t, newLimiter(false), 1, []costStep{
		{at: 0, cost: 3, ok: true},
		{at: ms(2999), cost: 1, ok: false, wait: ms(1)},
		{at: ms(3000), cost: 1, ok: true},
	})
}

func TestPerSecondCostCalendar(t *testing.T) {
	t.Parallel()
	runCostSteps(t, newLimiter(true), 3, []costStep{
		{at: 0, cost: 2, ok: true},
		{at: ms(100), cost: 2, ok: false, wait: ms(900)},
		{at: ms(100), cost: 1, ok: true},
		{at: ms(1000), cost: 3, ok: true},
		{at: ms(1500), cost: 4, ok: false, wait: ms(500)}, // over the cap: only into an empty second
		{at: ms(2500), cost: 4, ok: true},                 // second 2 full, 1 in second 3
		{at: ms(2999), cost: 1, ok: false, wait: ms(1)},
		{at: ms(3000), cost: 2, ok: true},
		{at: ms(3000), cost: 1, ok: false, wait: time.Second},
		{at: ms(4000), cost: 7, ok: true}, // seconds 4 and 5 full, 1 in second 6
		{at: ms(5999), cost: 1, ok: false, wait: ms(1)},
		{at: ms(6000), cost: 2, ok: true},
		{at: ms(6000), cost: 1, ok: false, wait: time.Second},
	})
}
