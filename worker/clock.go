package worker

import (
	"sync"
	"time"
)

// redisClock maps the limiter's clock (Redis TIME, on which reservations
// are made) to this host's clock, the way NTP does: every reservation is a
// sample, offset = Redis time − the midpoint of the request's round trip,
// and the sample with the shortest round trip in the last window wins,
// since its midpoint is the least uncertain. Holding until "reply time +
// (At − Now)" instead would make every send late by its reply's latency,
// and sends whose replies were slow late relative to the others: jitter a
// strict provider counts.
type redisClock struct {
	mu        sync.Mutex
	cur, prev sample    // shortest round trips of this window and the last
	curStart  time.Time // local start of the current window
}

type sample struct {
	offset time.Duration // Redis time − local time
	rtt    time.Duration
	ok     bool
}

// clockWindow is how long a window collects samples. The reference is the
// shortest round trip of the current and the previous window, so drift is
// followed within two windows.
const clockWindow = 10 * time.Second

// observe records a round trip from sent to received (local clock) whose
// reply carried the Redis time redisNow.
func (c *redisClock) observe(sent, received, redisNow time.Time) {
	rtt := received.Sub(sent)
	s := sample{offset: redisNow.Sub(sent.Add(rtt / 2)), rtt: rtt, ok: true}
	c.mu.Lock()
	defer c.mu.Unlock()
	if age := received.Sub(c.curStart); !c.cur.ok || age > clockWindow {
		c.prev = c.cur
		if age > 2*clockWindow {
			c.prev = sample{} // no sample for a whole window: too old to trust
		}
		c.cur, c.curStart = sample{}, received
	}
	if !c.cur.ok || s.rtt <= c.cur.rtt {
		c.cur = s
	}
}

// limiter returns the time the Redis clock read at local time t.
func (c *redisClock) limiter(t time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ref := c.cur
	if c.prev.ok && (!ref.ok || c.prev.rtt < ref.rtt) {
		ref = c.prev
	}
	return t.Add(ref.offset)
}

// local returns the local time at which the Redis clock reads t.
func (c *redisClock) local(t time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ref := c.cur
	if c.prev.ok && (!ref.ok || c.prev.rtt < ref.rtt) {
		ref = c.prev
	}
	return t.Add(-ref.offset)
}
