package throttle

// Local's FixedWindow (lua/fixed_window.lua).

func fixedWindowDecide(d *localDecision, e *entry, now int64) {
	limit, period := d.limit, d.period
	d.start = now - now%period
	stop := d.start + period
	h := hashOf(d, e)
	used := int64(0)
	if h != nil && h.has&hasW != 0 && h.w == d.start {
		d.current = true
		used = h.get(hasC, h.c)
	}
	d.remNow = max(0, limit-used)
	d.reset = stop
	if used+d.cost <= limit {
		d.ok = true
		d.remAfter = limit - used - d.cost
	} else {
		d.retry = stop - now
		d.remAfter = d.remNow
	}
	if h != nil && h.has&hasBW != 0 && h.bw == d.start {
		d.waiting = h.get(hasB, h.b)
	}
	d.wait = d.retry
	if !d.ok {
		d.wait = d.retry + d.waiting/limit*period
	}
}

func (l *Local) fixedWindowCommit(d *localDecision, now int64) {
	if d.replace {
		l.delete(d.key)
	}
	e := l.put(d.key, typeHash)
	h := e.hash
	stop := d.start + d.period
	if d.current && !d.replace {
		h.c = h.get(hasC, h.c) + d.cost
		h.has |= hasC
	} else {
		h.w, h.c = d.start, d.cost
		h.has |= hasW | hasC
		l.setExpires(e, now+ttlUs(stop-now))
	}
	e.idleAt = max(e.idleAt, stop)
}

// fixedWindowRecord counts a blocked caller among the window's waiters.
func (l *Local) fixedWindowRecord(d *localDecision, now int64) {
	if d.replace {
		l.delete(d.key)
	}
	e := l.put(d.key, typeHash)
	stop := d.start + d.period
	e.hash.bw, e.hash.b = d.start, d.waiting+d.cost
	e.hash.has |= hasBW | hasB
	if !d.current || d.replace {
		l.setExpires(e, now+ttlUs(stop-now))
	}
	e.idleAt = max(e.idleAt, stop)
}
