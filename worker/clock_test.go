package worker

import (
	"testing"
	"time"
)

// The shortest round trip sets the offset: a slow reply (Redis busy, the
// process descheduled) must not move the sends held after it.
func TestRedisClockTakesTheShortestRoundTrip(t *testing.T) {
	var c redisClock
	base := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	skew := 250 * time.Millisecond // Redis runs 250ms ahead of this host
	// A fast sample: 200µs round trip, Redis read its clock mid-way.
	c.observe(base, base.Add(200*time.Microsecond), base.Add(100*time.Microsecond+skew))
	// A slow one: the reply took 30ms, Redis read its clock at the start.
	sent := base.Add(time.Second)
	c.observe(sent, sent.Add(30*time.Millisecond), sent.Add(skew))
	at := base.Add(5 * time.Second) // a slot on the Redis clock
	if got, want := c.local(at), at.Add(-skew); got.Sub(want).Abs() > time.Microsecond {
		t.Fatalf("local(%v) = %v, want %v", at, got, want)
	}
	// After two windows the old best gives way to the newer window's.
	later := base.Add(3 * clockWindow)
	c.observe(later, later.Add(time.Millisecond), later.Add(500*time.Microsecond+2*skew))
	if got, want := c.local(at), at.Add(-2*skew); got.Sub(want).Abs() > time.Microsecond {
		t.Fatalf("after drift: local = %v, want %v", got, want)
	}
}
