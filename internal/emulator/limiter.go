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
type limit struct {
	key       string
	interval  time.Duration
	perSecond int
}

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

// window holds, in ascending order, the latest acceptance times of one key,
// at most the limit's N of them: the request at now is accepted iff fewer
// than N accepted requests arrived after now-1s, that is iff fewer than N are
// kept or the earliest kept one is at or before now-1s. Every 1-second span
// then holds at most N accepted requests.
//
// With a clock that only moves forward, "after now-1s" is the span
// (now-1s, now] and the kept times are the last N accepted. A clock set back
// (a test's fake clock) makes the check stricter, not looser: accepted times
// later than now still count, so the bound holds for any order of arrivals.
type window struct {
	at []time.Time
}

// check reports whether one more request fits at now under a cap of n, and
// otherwise how long until the earliest counted request leaves the window.
func (w *window) check(now time.Time, n int) (ok bool, wait time.Duration) {
	if len(w.at) < n {
		return true, 0
	}
	leaves := w.at[len(w.at)-n].Add(time.Second)
	if leaves.After(now) {
		return false, leaves.Sub(now)
	}
	return true, 0
}

// add counts an accepted request at now, keeping the latest n times.
func (w *window) add(now time.Time, n int) {
	// i is where now goes: after every time at or before it.
	i := sort.Search(len(w.at), func(i int) bool { return w.at[i].After(now) })
	if len(w.at) < n {
		w.at = append(w.at, time.Time{})
		copy(w.at[i+1:], w.at[i:])
		w.at[i] = now
		return
	}
	if i == 0 {
		return // earlier than all n kept: not among the latest n (check refuses this)
	}
	// Drop the earliest, which check found at or before now-1s.
	copy(w.at[:i-1], w.at[1:i])
	w.at[i-1] = now
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
			c := g.second[l.key]
			if c.second == now.Unix() && c.n >= l.perSecond {
				next := time.Unix(now.Unix()+1, 0)
				return false, i, next.Sub(now)
			}
		case l.perSecond > 0:
			if w := g.window[l.key]; w != nil {
				if ok, wait := w.check(now, l.perSecond); !ok {
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
			c := g.second[l.key]
			if c.second != now.Unix() {
				c = secondCount{second: now.Unix()}
			}
			c.n++
			g.second[l.key] = c
		case l.perSecond > 0:
			w := g.window[l.key]
			if w == nil {
				w = &window{}
				g.window[l.key] = w
			}
			w.add(now, l.perSecond)
		default:
			tat := g.tat[l.key]
			if tat.Before(now) {
				tat = now
			}
			g.tat[l.key] = tat.Add(l.interval)
		}
	}
	return true, -1, 0
}

// reset forgets all state.
func (g *limiter) reset() { clear(g.tat); clear(g.second); clear(g.window) }
