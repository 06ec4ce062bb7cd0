package throttle

// Local's Concurrency (lua/concurrency.lua).

func concurrencyDecide(d *localDecision, e *entry, now int64) {
	limit := d.limit
	z := zsetOf(d, e)
	held := int64(0)
	if z != nil {
		held = z.countAbove(now)
	}
	d.remNow = max(0, limit-held)
	// Full capacity again when the last held lease expires.
	latest := now
	if held > 0 {
		if at, ok := z.kthAbove(now, held); ok {
			latest = at
		}
	}
	d.reset, d.resetAfter = latest, latest
	if held+d.cost <= limit {
		d.ok = true
		d.remAfter = limit - held - d.cost
		d.resetAfter = max(latest, now+d.period)
	} else {
		d.remAfter = d.remNow
		expiry := now
		if at, ok := z.kthAbove(now, 1); ok {
			expiry = at
		}
		d.retry = max(0, expiry-now)
	}
	d.wait = d.retry
}

func (l *Local) concurrencyCommit(d *localDecision, now int64, callID string) {
	if d.replace {
		l.delete(d.key)
	}
	e := l.put(d.key, typeZset)
	s := shape(e, newLeaseSet)
	s.trim(now)
	for i := int64(1); i <= d.cost; i++ {
		s.add(leaseID(callID, i), now+d.period, 1)
	}
	last := s.newest()
	l.setExpires(e, now+ttlUs(last-now))
	e.idleAt = last
}
