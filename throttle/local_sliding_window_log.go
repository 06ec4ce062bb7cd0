package throttle

// Local's SlidingWindowLog (lua/sliding_window_log.lua).

func slidingLogDecide(d *localDecision, e *entry, now int64) {
	limit, period := d.limit, d.period
	lo := now - period
	z := zsetOf(d, e)
	used := int64(0)
	if z != nil {
		used = z.countAbove(lo)
	}
	d.remNow = max(0, limit-used)
	newest := now
	if used > 0 {
		newest = z.newest()
	}
	if used+d.cost <= limit {
		d.ok = true
		d.remAfter = limit - used - d.cost
		d.reset = now + period
	} else {
		d.remAfter = d.remNow
		at, _ := z.kthAbove(lo, used+d.cost-limit)
		d.retry = max(0, at+period-now)
		d.reset = newest + period
	}
	d.wait = d.retry
}

func (l *Local) slidingLogCommit(d *localDecision, now int64) {
	if d.replace {
		l.delete(d.key)
	}
	e := l.put(d.key, typeZset)
	s := shape(e, newLogSet)
	s.trim(now - d.period)
	s.add("", now, d.cost) // members "<call id>:<i>", never read by name
	l.setExpires(e, now+ttlUs(d.period))
	e.idleAt = s.newest() + d.period
}
