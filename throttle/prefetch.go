package throttle

import (
	"strconv"
	"strings"
	"sync"
	"time"
)

// Prefetch: a limit so fast that a millisecond holds several sends (a
// generous API limit of 10,000/s or more) costs a Redis round trip
// per send for nothing: it never blocks. When Reserve finds a new bulk send
// firm now on such limits only, the same script takes up to MaxPrefetch
// more slots of every limit of the send, and the limiter hands them out
// from memory to the next sends with the very same limits (same keys,
// settings and cost), without asking Redis.
//
// The slots are taken in Redis like any others, so no limit is ever
// exceeded, across any number of processes. What a prefetch can cost is
// capacity: slots never used are lost, and a limit prefetches at most
// PrefetchSpan's worth of its rate (1ms of a 100,000/s limit is 100 sends),
// only out of the burst or window room it has now, and only while no send
// is planned on it, so a limit near its cap never prefetches. Only GCRA and
// FixedWindow limits prefetch (beside Pause, which takes nothing); a send
// with any other limit always asks. A pause set after the prefetch reaches
// the slots in memory within PrefetchTTL.
// Prefetched slots are used within PrefetchTTL, and a fixed window's only
// within its window. A `limits reset` or `set` therefore reaches sends
// served from memory within PrefetchTTL; a pause set by this process, or
// announced by another (WatchPauses), drops them at once. A fixed window
// prefetches only if 1ms of it holds two sends (a cap of 172.8 million a
// day), so calendar caps practically never do. Sends served from memory
// raise no limits.warning events.
const (
	// DefaultPrefetchSpan is Options.PrefetchSpan's default.
	DefaultPrefetchSpan = time.Millisecond
	// MaxPrefetch bounds the slots one call prefetches.
	MaxPrefetch = 32
	// PrefetchTTL is how long prefetched slots are handed out.
	PrefetchTTL = time.Second
	// prefetchMargin keeps a fixed window's prefetched slots from being
	// used at the very end of their window (the send goes a little after
	// the take).
	prefetchMargin = 100 * time.Millisecond
	// maxPrefetchSets bounds the sets of limits holding prefetched slots.
	maxPrefetchSets = 4096
)

type prefetched struct {
	left  int64
	until time.Time // local clock
	d     Decision  // the prefetching call's, for Remaining, Reset and Limit
}

type prefetchCache struct {
	mu sync.Mutex
	m  map[string]*prefetched
}

// prefetchKey names a send's exact set of limits, or "" when the set cannot
// prefetch (a limit other than GCRA or FixedWindow).
func (l *Redis) prefetchKey(reqs []Request, fields []string) string {
	var b []byte
	for i, r := range reqs {
		lim := r.Limit
		if lim.Algorithm != GCRA && lim.Algorithm != FixedWindow && lim.Algorithm != Pause {
			return ""
		}
		b = append(b, l.Key(r.Key)...)
		b = append(b, 0)
		b = append(b, lim.Algorithm...)
		b = append(b, 0)
		b = strconv.AppendInt(b, lim.Rate.Limit, 10)
		b = append(b, '/')
		b = strconv.AppendInt(b, int64(lim.Rate.Period), 10)
		b = append(b, 0)
		b = strconv.AppendInt(b, lim.Burst, 10)
		b = append(b, 0)
		b = strconv.AppendInt(b, r.cost(), 10)
		b = append(b, 0)
		b = append(b, fieldOf(fields, i)...)
		b = append(b, 1)
	}
	return string(b)
}

// dropKey forgets the slots of every set with the limiter key full (a
// pause was set on it).
func (c *prefetchCache) dropKey(full string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.m {
		if strings.HasPrefix(k, full+"\x00") || strings.Contains(k, "\x01"+full+"\x00") {
			delete(c.m, k)
		}
	}
}

// drop forgets set k's slots.
func (c *prefetchCache) drop(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, k)
}

// take hands out one prefetched slot of set k, if one is left.
func (c *prefetchCache) take(k string, now time.Time) (Decision, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.m[k]
	if p == nil {
		return Decision{}, false
	}
	if !now.Before(p.until) {
		delete(c.m, k)
		return Decision{}, false
	}
	p.left--
	if p.left <= 0 {
		delete(c.m, k)
	}
	d := p.d
	d.Now = now
	d.Limits = make([]LimitDecision, len(p.d.Limits))
	for i, ld := range p.d.Limits {
		ld.Remaining += p.left // what the prefetching call left, plus what is still in memory
		d.Limits[i] = ld
	}
	return d, true
}

// put keeps n prefetched slots of set k until until (local clock).
func (c *prefetchCache) put(k string, n int64, until time.Time, d Decision, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*prefetched{}
	}
	if p := c.m[k]; p != nil && now.Before(p.until) {
		// Another call of the set prefetched too: keep both, for the
		// sooner expiry (the later call's limits values).
		n += p.left
		until = minTime(until, p.until)
	} else if len(c.m) >= maxPrefetchSets {
		for key, p := range c.m {
			if !now.Before(p.until) {
				delete(c.m, key)
			}
		}
		if len(c.m) >= maxPrefetchSets {
			return // the slots go unused: capacity, never a limit
		}
	}
	c.m[k] = &prefetched{left: n, until: until, d: d}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// prefetchUntil is how long slots prefetched by decision d (taken at the
// local time recv) may be handed out: PrefetchTTL, and within every fixed
// window's own window.
func prefetchUntil(d Decision, reqs []Request, recv time.Time) time.Time {
	until := recv.Add(PrefetchTTL)
	for i, r := range reqs {
		if r.Limit.Algorithm == FixedWindow {
			until = minTime(until, recv.Add(d.Limits[i].Reset.Sub(d.Now)-prefetchMargin))
		}
	}
	return until
}
