package throttle

// Local's GCRA (lua/gcra.lua).

import (
	"math"
	"math/bits"
	"time"

	"golang.org/x/time/rate"
)

// gcraParams is a GCRA limit as gcra.lua gets it: limit units per period
// (µs), a bucket of burst units.
type gcraParams struct{ limit, period, burst int64 }

// interval is the emission interval in µs, as the Lua computes it.
func (p gcraParams) interval() float64 { return float64(p.period) / float64(p.limit) }

// rate is the refill rate in tokens per second.
func (p gcraParams) rate() rate.Limit { return rate.Limit(float64(p.limit) * 1e6 / float64(p.period)) }

// depthNs is the bucket depth burst × period / limit in ns, rounded to the
// nearest, at most maxDepthNs.
func (p gcraParams) depthNs() int64 {
	hi, lo := bits.Mul64(uint64(p.period)*1000, uint64(p.burst))
	if hi >= uint64(p.limit) {
		return maxDepthNs
	}
	q, r := bits.Div64(hi, lo, uint64(p.limit))
	if r >= uint64(p.limit)-r {
		q++
	}
	if q > uint64(maxDepthNs) {
		return maxDepthNs
	}
	return int64(q)
}

// gcraBucket is one GCRA limit's state on one key: a rate.Limiter whose
// tokens encode the TAT gcra.lua would store.
type gcraBucket struct {
	p      gcraParams
	lim    *rate.Limiter
	lastNs int64 // when lim's tokens were last set (AllowN), Unix ns
}

// newGCRABucket returns a bucket for p whose Lua TAT is tat (full when
// tat <= now).
func newGCRABucket(p gcraParams, tat, now int64) *gcraBucket {
	b := &gcraBucket{p: p}
	if tat > now {
		b.anchor(tat)
	} else {
		b.lim = rate.NewLimiter(p.rate(), int(p.burst))
		b.lastNs = math.MinInt64
	}
	return b
}

// anchor makes the limiter hold exactly the TAT tat: empty at tat − depth,
// so full at tat.
func (b *gcraBucket) anchor(tat int64) {
	at := tat*1000 - b.p.depthNs()
	b.lim = rate.NewLimiter(b.p.rate(), int(b.p.burst))
	b.lim.AllowN(time.Unix(0, at), int(b.p.burst))
	b.lastNs = at
}

// tatAt returns gcra.lua's tat at now, max(stored TAT, now), from the
// tokens available at now.
func (b *gcraBucket) tatAt(now int64) int64 {
	if now*1000 < b.lastNs { // the clock went back: the limiter would report its last tokens
		return max(b.stored(), now)
	}
	tok := b.lim.TokensAt(time.UnixMicro(now))
	return now + int64(math.Round((float64(b.p.burst)-tok)*b.p.interval()))
}

// stored returns the TAT gcra.lua would have stored (possibly before now),
// from the tokens at the limiter's last update.
func (b *gcraBucket) stored() int64 {
	tok := b.lim.TokensAt(time.Unix(0, b.lastNs))
	us := b.lastNs / 1000
	if b.lastNs%1000 < 0 {
		us--
	}
	frac := float64(b.lastNs-us*1000) / 1000
	return us + int64(math.Round(frac+float64((float64(b.p.burst)-tok)*b.p.interval())))
}

// value returns the TAT as a GCRA limit with params p reads it: a bucket
// of other params (the limit was reconfigured) is read as its stored TAT,
// which the Lua reinterprets with the new params.
func (b *gcraBucket) value(now int64, p gcraParams) int64 {
	if b.p == p {
		return b.tatAt(now)
	}
	return b.stored()
}

// admit takes cost units at now with AllowN, then checks that the limiter
// encodes want, the TAT gcra.lua stores; if not (see Local), it re-anchors
// the limiter on want and reports true.
func (b *gcraBucket) admit(now, cost, want int64) (fixed bool) {
	t := time.UnixMicro(now)
	if b.lim.AllowN(t, int(cost)) {
		b.lastNs = now * 1000
		got := float64((float64(b.p.burst) - b.lim.TokensAt(t)) * b.p.interval())
		// Float noise grows with the bucket depth (about 3e-16 of it).
		if math.Abs(got-float64(want-now)) <= 1e-3+float64(b.p.depthNs())*4e-19 {
			return false
		}
	}
	b.anchor(want)
	return true
}

func gcraDecide(d *localDecision, e *entry, field string, now int64, p gcraParams) {
	d.field, d.gcra = field, p
	var stored int64
	has := false
	if e != nil {
		switch {
		case field == "" && e.typ == typeString:
			if e.gcra != nil {
				stored = e.gcra.value(now, p)
			} else {
				stored = e.last // a MinInterval time, read as a TAT like the Lua does
			}
			has = true
		case field != "" && e.typ == typeHash:
			if b := e.hash.gcra[field]; b != nil {
				stored, has = b.value(now, p), true
			}
		default:
			d.replace = true
		}
	}
	// As the Lua, relative to now: TAT − now is a small exact integer.
	interval := p.interval()
	tolerance := float64(interval * float64(p.burst))
	var ahead int64
	if has {
		ahead = max(stored-now, 0)
	}
	newAhead := float64(ahead) + float64(interval*float64(d.cost))
	d.tat = now + ahead
	d.stored = now + int64(math.Ceil(newAhead))
	d.remNow = max(0, floorUnits(tolerance-float64(ahead), interval))
	d.reset = now + ahead
	if newAhead <= tolerance {
		d.ok = true
		d.remAfter = max(0, floorUnits(tolerance-newAhead, interval))
		d.resetAfter = d.stored
	} else {
		d.retry = int64(math.Ceil(newAhead - tolerance))
		d.remAfter = d.remNow
		d.resetAfter = d.reset
	}
	d.wait = d.retry
}

func (l *Local) gcraCommit(d *localDecision, now int64) {
	if d.replace {
		l.delete(d.key)
	}
	expires := now + ttlUs(d.stored-now)
	if d.field == "" {
		e := l.put(d.key, typeString)
		e.gcra, e.last = l.admit(e.gcra, d, now), 0
		l.setExpires(e, expires)
		e.idleAt = d.stored
		return
	}
	e := l.put(d.key, typeHash)
	if e.hash.gcra == nil {
		e.hash.gcra = map[string]*gcraBucket{}
	}
	e.hash.gcra[d.field] = l.admit(e.hash.gcra[d.field], d, now)
	if e.expires == noTTL || e.expires < expires { // prelude.lua's extend
		l.setExpires(e, expires)
	}
	e.idleAt = max(e.idleAt, d.stored)
}

func (l *Local) admit(b *gcraBucket, d *localDecision, now int64) *gcraBucket {
	if b == nil || b.p != d.gcra {
		b = newGCRABucket(d.gcra, d.tat, now)
	}
	if b.admit(now, d.cost, d.stored) {
		l.fixups++
	}
	return b
}
