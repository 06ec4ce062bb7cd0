package emulator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

type allowStep struct {
	at   time.Duration // since t0
	ok   bool
	wait time.Duration // when !ok
}

func runSteps(t *testing.T, g *gcra, interval, tolerance time.Duration, steps []allowStep) {
	t.Helper()
	for i, st := range steps {
		ok, _, wait := g.allow(t0.Add(st.at), tolerance, limit{key: "k", interval: interval})
		assert.Equal(t, st.ok, ok, "step %d at %s", i, st.at)
		if !st.ok {
			assert.Equal(t, st.wait, wait, "step %d at %s: wait", i, st.at)
		}
	}
}

func TestGCRAExact(t *testing.T) {
	t.Parallel()
	runSteps(t, newGCRA(), 100*time.Millisecond, 0, []allowStep{
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
	runSteps(t, newGCRA(), 100*time.Millisecond, 50*time.Millisecond, []allowStep{
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
	runSteps(t, newGCRA(), time.Second/80, 50*time.Millisecond, steps)
}

func TestGCRAAllOrNothing(t *testing.T) {
	t.Parallel()
	g := newGCRA()
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

func TestPerSecondCount(t *testing.T) {
	t.Parallel()
	g := newGCRA()
	l := limit{key: "k", perSecond: 3}
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
	for i, st := range steps {
		// Tolerance does not apply to a per-second count.
		ok, _, wait := g.allow(t0.Add(st.at), time.Hour, l)
		assert.Equal(t, st.ok, ok, "step %d at %s", i, st.at)
		if !st.ok {
			assert.Equal(t, st.wait, wait, "step %d at %s: wait", i, st.at)
		}
	}
}

func TestPerSecondAllOrNothing(t *testing.T) {
	t.Parallel()
	g := newGCRA()
	perSec := limit{key: "n", perSecond: 2}
	pair := limit{key: "n|r", interval: 6 * time.Second}

	ok, _, _ := g.allow(t0, 0, perSec, pair)
	assert.True(t, ok)
	// pair refuses, so the count must not be charged.
	ok, failed, _ := g.allow(t0, 0, perSec, pair)
	assert.False(t, ok)
	assert.Equal(t, 1, failed)
	ok, _, _ = g.allow(t0, 0, perSec)
	assert.True(t, ok, "the count was charged by a refused request")
	ok, failed, _ = g.allow(t0, 0, perSec)
	assert.False(t, ok)
	assert.Equal(t, 0, failed)
}
