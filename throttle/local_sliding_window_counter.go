package throttle

// Local's SlidingWindowCounter (lua/sliding_window_counter.lua).

import (
	"math"
)

func slidingCounterDecide(d *localDecision, e *entry, now int64) {
	limit, period := d.limit, d.period
	start := now - now%period
	d.start = start
	h := hashOf(d, e)
	cur, prev := int64(0), int64(0)
	if h != nil && h.has&hasW != 0 {
		switch h.w {
		case start:
			d.current = true
			cur, prev = h.get(hasC, h.c), h.get(hasP, h.p)
		case start - period:
			prev = h.get(hasC, h.c)
		}
	}
	d.prev = prev
	// The Lua's float expressions, in its order; float64(x*y) keeps the
	// product rounded on its own (no fused multiply-add).
	L, P, C, V, cost := float64(limit), float64(period), float64(cur), float64(prev), float64(d.cost)
	weighted := float64(V*float64(period-(now-start))) / P
	d.remNow = max(0, int64(math.Floor(L-weighted-C+1e-9)))
	if weighted+C+cost <= L+1e-9 {
		d.ok = true
		d.remAfter = max(0, int64(math.Floor(L-weighted-C-cost+1e-9)))
		d.reset = start + 2*period
	} else {
		d.remAfter = d.remNow
		at, found := int64(0), false
		room := limit - cur - d.cost
		if room >= 0 && prev > 0 {
			// prev × (period − e) / period <= room ⇔ e >= period − room × period / prev
			if x := math.Ceil(P - float64(float64(room)*P)/V - 1e-9); x < P {
				at, found = start+int64(x), true
			}
		}
		if !found {
			x := 0.0
			if cur > 0 {
				x = math.Max(0, math.Ceil(P-float64(float64(limit-d.cost)*P)/C-1e-9))
			}
			at = start + period + int64(x)
		}
		d.retry = max(0, at-now)
		switch {
		case cur > 0:
			d.reset = start + 2*period
		case prev > 0:
			d.reset = start + period
		default:
			d.reset = now
		}
	}
	d.wait = d.retry
}

func (l *Local) slidingCounterCommit(d *localDecision, now int64) {
	if d.replace {
		l.delete(d.key)
	}
	e := l.put(d.key, typeHash)
	h := e.hash
	end := d.start + 2*d.period
	if d.current && !d.replace {
		h.c = h.get(hasC, h.c) + d.cost
		h.has |= hasC
	} else {
		h.w, h.c, h.p = d.start, d.cost, d.prev
		h.has |= hasW | hasC | hasP
		l.setExpires(e, now+ttlUs(end-now))
	}
	e.idleAt = max(e.idleAt, end)
}
