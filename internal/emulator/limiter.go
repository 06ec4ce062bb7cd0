package emulator

import (
	"sort"
	"time"
)

// limit is one rate to enforce under key: either at most one request per
// interval (GCRA, with the server's tolerance), or, when perSecond > 0, at
// most perSecond requests per second, counted over a sliding 1-second window
// on arrival time (the default) or per calendar second (UTC-aligned Unix
// second, Options.CalendarSeconds).
//
// "N messages per second" caps (WhatsApp MPS, Twilio MPS per From, webhook
// RPS) use the per-second count. Intervals measured in seconds (WhatsApp's
// ~6 s pair limit) use GCRA.
//
// cost is the units a request takes (0 means 1): Twilio counts a sender's
// MPS in message segments. A request of cost c fits a per-second cap n
// when the span holds at most n-c units; a request larger than the cap
// itself (a long message on a 1 MPS sender) fits only an empty span, and
// its units are then counted n to a second from now on (Twilio's queue
// sends them at the sender's rate), so the next request waits until they
// are out. An interval limit takes cost intervals.
type limit struct {
	key       string
	interval  time.Duration
	perSecond int
	cost      int
}

// units is l.cost, at least 1.
func (l limit) units() int { return max(l.cost, 1) }

// limiter enforces limits in memory.
//
// Interval limits are a Generic Cell Rate Algorithm with burst 1: for each
// key it keeps the theoretical arrival time (TAT) of the next request. A
// request at now is conforming iff
//
//	now >= TAT - tolerance - (burst-1)*interval     (burst is 1, so the last term is 0)
//
// and a conforming request moves TAT to max(TAT, now) + interval. A
// non-conforming request leaves TAT unchanged.
//
// Per-second limits are a sliding window (see window) or, with calendar set,
// a count per calendar second (see secondCount). Refused requests are never
// counted.
//
// limiter has no lock of its own: it is guarded by Server.mu, so that the
// rate check and the recording of the accepted message are one atomic step.
type limiter struct {
	calendar bool // per-second limits count per calendar second
	tat      map[string]time.Time
	second   map[string]secondCount
	window   map[string]*window
}

// secondCount is a calendar-second counter.
type secondCount struct {
	second int64 // Unix second
	n      int
}

// window holds, in ascending order, the acceptance times of one key of the
// last 2s before the latest (add): the request at now is accepted iff every
// 1-second span (y-1s, y] that holds now would hold at most N accepted
// requests with it. Every 1-second span then holds at most N, whatever the
// order in which requests are decided.
//
// With a clock that only moves forward, the one span to check is (now-1s,
// now]: accepted iff fewer than N arrived after now-1s. Requests are decided in the order they take the
// server's lock, not of their arrival (stamped before parsing and the
// lock): on a busy host a request that arrived earlier can be decided after
// later ones. Its now is then earlier than some kept times, and the spans
// ending at those (within 1s of now) hold it too. Counting every kept time
// after now-1s instead counts a span longer than 1s: it refused requests
// for which no 1-second span was full (130429s in `make bench-scale` on a
// saturated host, with at most 78 of a number's sends in any 1-second
// span). A clock set back (a test's fake clock) is the same case.
type window struct {
	at []time.Time // the accepted times of the last 2s before the latest
	// dropped is the latest time let go (zero: none). A request more than
	// 1s behind the latest (a clock set back that far) may share a span
	// with it: refused, as the span cannot be counted.
	dropped time.Time
}

// check reports whether c more units fit at now under a cap of n, and
// otherwise how long until enough counted units leave the fullest span
// that holds now: for c <= n, until at most n-c are left in it; for c > n,
// until it is empty.
func (w *window) check(now time.Time, n, c int) (ok bool, wait time.Duration) {
	room := n - c
	if c > n {
		room = 0
	}
	if !w.dropped.IsZero() && w.dropped.After(now.Add(-time.Second)) {
		return false, w.dropped.Add(time.Second).Sub(now)
	}
	after := w.after
	// The span ending at now, then those ending at each kept time within
	// 1s after now: first..end-1 are the span's kept times.
	first, end := after(now.Add(-time.Second)), after(now)
	worstFirst, worst := first, end-first
	for j := end; j < len(w.at) && w.at[j].Before(now.Add(time.Second)); j++ {
		f := after(w.at[j].Add(-time.Second))
		if in := j + 1 - f; in > worst {
			worstFirst, worst = f, in
		}
	}
	if worst <= room {
		return true, 0
	}
	// The (in-room)-th unit of the fullest span must leave.
	return false, w.at[worstFirst+worst-room-1].Add(time.Second).Sub(now)
}

// after is the index of the first kept time after t (len(w.at): none).
func (w *window) after(t time.Time) int {
	return sort.Search(len(w.at), func(i int) bool { return w.at[i].After(t) })
}

// add counts c units accepted at now: unit k (from 0) at now + k/n
// seconds, so that more than n units go out over the following seconds.
// It keeps the times of the last 2s before the latest: the spans that hold
// a request up to 1s behind the latest reach no further back (check).
func (w *window) add(now time.Time, n, c int) {
	for k := range c {
		w.at = append(w.at, now.Add(time.Duration(k/n)*time.Second))
	}
	sort.Slice(w.at, func(i, j int) bool { return w.at[i].Before(w.at[j]) })
	if k := w.after(w.at[len(w.at)-1].Add(-2 * time.Second)); k > 0 {
		w.dropped = w.at[k-1]
		w.at = append(w.at[:0], w.at[k:]...)
	}
}

func newLimiter(calendarSeconds bool) *limiter {
	return &limiter{
		calendar: calendarSeconds,
		tat:      make(map[string]time.Time),
		second:   make(map[string]secondCount),
		window:   make(map[string]*window),
	}
}

// allow checks every limit at now. If all conform, it commits all of them and
// returns ok. Otherwise it commits nothing and returns the index of the first
// limit that does not conform and how long until it would (for a per-second
// limit: until the earliest counted request leaves the sliding window, or
// until the next calendar second).
func (g *limiter) allow(now time.Time, tolerance time.Duration, limits ...limit) (ok bool, failed int, wait time.Duration) {
	for i, l := range limits {
		switch {
		case l.perSecond > 0 && g.calendar:
			// The state is the last second holding units: an earlier one
			// is full when a long request spilled over.
			c, sec := g.second[l.key], now.Unix()
			used := 0
			switch {
			case c.second > sec:
				return false, i, time.Unix(c.second, 0).Sub(now)
			case c.second == sec:
				used = c.n
			}
			if used+l.units() > l.perSecond && (used > 0 || l.units() <= l.perSecond) {
				next := time.Unix(sec+1, 0)
				return false, i, next.Sub(now)
			}
		case l.perSecond > 0:
			if w := g.window[l.key]; w != nil {
				if ok, wait := w.check(now, l.perSecond, l.units()); !ok {
					return false, i, wait
				}
			}
		default:
			tat, found := g.tat[l.key]
			if !found {
				continue
			}
			if at := tat.Add(-tolerance); now.Before(at) {
				return false, i, at.Sub(now)
			}
		}
	}
	for _, l := range limits {
		switch {
		case l.perSecond > 0 && g.calendar:
			c, u := g.second[l.key], l.units()
			if c.second != now.Unix() {
				c = secondCount{second: now.Unix()}
			}
			if c.n+u <= l.perSecond {
				c.n += u
			} else {
				// Only into an empty second (checked): n to a second.
				spill := (u - 1) / l.perSecond
				c = secondCount{second: now.Unix() + int64(spill), n: u - spill*l.perSecond}
			}
			g.second[l.key] = c
		case l.perSecond > 0:
			w := g.window[l.key]
			if w == nil {
				w = &window{}
				g.window[l.key] = w
			}
			w.add(now, l.perSecond, l.units())
		default:
			tat := g.tat[l.key]
			if tat.Before(now) {
				tat = now
			}
			g.tat[l.key] = tat.Add(l.interval * time.Duration(l.units()))
		}
	}
	return true, -1, 0
}

// reset forgets all state.
func (g *limiter) reset() { clear(g.tat); clear(g.second); clear(g.window) }
