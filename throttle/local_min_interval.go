package throttle

// Local's MinInterval (lua/min_interval.lua).

func minIntervalDecide(d *localDecision, e *entry, now int64) {
	interval := d.period
	var last int64
	has := false
	if e != nil {
		if e.typ == typeString {
			last, has = e.last, true
			if e.gcra != nil {
				last = e.gcra.stored() // a GCRA TAT, read as a time like the Lua does
			}
		} else {
			d.replace = true
		}
	}
	d.taken = 1
	if has && now < last+interval {
		d.retry = last + interval - now
		d.reset = last + interval
	} else {
		d.ok = true
		d.remNow = 1
		d.reset = now + interval
	}
	d.wait = d.retry
}

func (l *Local) minIntervalCommit(d *localDecision, now int64) {
	e := l.put(d.key, typeString) // SET: replaces any type
	e.gcra, e.last = nil, now
	l.setExpires(e, now+ttlUs(d.period))
	e.idleAt = now + d.period
}
