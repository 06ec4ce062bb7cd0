package throttle

// Local's Distinct (lua/distinct.lua).

func distinctDecide(d *localDecision, e *entry, now int64) {
	limit, period := d.limit, d.period
	lo := now - period
	z := zsetOf(d, e)
	var score, used int64
	has := false
	if z != nil {
		score, has = z.score(d.member)
		used = z.countAbove(lo)
	}
	d.remNow = max(0, limit-used)
	switch {
	case has && score > lo:
		d.ok, d.taken = true, 0
		d.remAfter = d.remNow
		d.reset = now + period
	case used+1 <= limit:
		d.ok, d.taken = true, 1
		d.remAfter = limit - used - 1
		d.reset = now + period
	default:
		d.taken = 0
		d.remAfter = d.remNow
		at, _ := z.kthAbove(lo, used+1-limit)
		d.retry = max(0, at+period-now)
		d.reset = z.newest() + period
	}
	d.wait = d.retry
}

func (l *Local) distinctCommit(d *localDecision, now int64) {
	if d.replace {
		l.delete(d.key)
	}
	e := l.put(d.key, typeZset)
	s := shape(e, newDistinctSet)
	s.trim(now - d.period)
	s.add(d.member, now, 1)
	l.setExpires(e, now+ttlUs(d.period))
	e.idleAt = s.newest() + d.period
}
