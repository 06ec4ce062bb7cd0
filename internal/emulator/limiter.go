package emulator

import "time"

// limit is one rate to enforce under key: either at most one request per
// interval (GCRA, with the server's tolerance), or, when perSecond > 0, at
// most perSecond requests in any calendar second (UTC-aligned).
//
// "N messages per second" caps (WhatsApp MPS, Twilio MPS per From, webhook
// RPS) use the calendar-second count: it is how "per second" is usually
// metered, it accepts a sender that bursts N at the top of each second, and it
// refuses the (N+1)th message of a second at once. Intervals measured in
// seconds (WhatsApp's ~6 s pair limit) use GCRA.
type limit struct {
	key       string
	interval  time.Duration
	perSecond int
}

// gcra is an in-memory Generic Cell Rate Algorithm limiter with burst 1.
//
// For each key it keeps the theoretical arrival time (TAT) of the next
// request. A request at now is conforming iff
//
//	now >= TAT - tolerance - (burst-1)*interval     (burst is 1, so the last term is 0)
//
// and a conforming request moves TAT to max(TAT, now) + interval. A
// non-conforming request leaves TAT unchanged.
//
// gcra has no lock of its own: it is guarded by Server.mu, so that the rate
// check and the recording of the accepted message are one atomic step.
type gcra struct {
	tat    map[string]time.Time
	second map[string]secondCount
}

// secondCount is a calendar-second counter.
type secondCount struct {
	second int64 // Unix second
	n      int
}

func newGCRA() *gcra {
	return &gcra{tat: make(map[string]time.Time), second: make(map[string]secondCount)}
}

// allow checks every limit at now. If all conform, it commits all of them and
// returns ok. Otherwise it commits nothing and returns the index of the first
// limit that does not conform and how long until it would.
func (g *gcra) allow(now time.Time, tolerance time.Duration, limits ...limit) (ok bool, failed int, wait time.Duration) {
	for i, l := range limits {
		if l.perSecond > 0 {
			c := g.second[l.key]
			if c.second == now.Unix() && c.n >= l.perSecond {
				next := time.Unix(now.Unix()+1, 0)
				return false, i, next.Sub(now)
			}
			continue
		}
		tat, found := g.tat[l.key]
		if !found {
			continue
		}
		if at := tat.Add(-tolerance); now.Before(at) {
			return false, i, at.Sub(now)
		}
	}
	for _, l := range limits {
		if l.perSecond > 0 {
			c := g.second[l.key]
			if c.second != now.Unix() {
				c = secondCount{second: now.Unix()}
			}
			c.n++
			g.second[l.key] = c
			continue
		}
		tat := g.tat[l.key]
		if tat.Before(now) {
			tat = now
		}
		g.tat[l.key] = tat.Add(l.interval)
	}
	return true, -1, 0
}

// reset forgets all state.
func (g *gcra) reset() { clear(g.tat); clear(g.second) }
