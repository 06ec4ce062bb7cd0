package worker

import (
	"sync"
	"time"

	"github.com/sluice-dev/sluice/throttle"
)

// pauseBook is a worker's view of the scopes paused now, local clock: its
// own pauses and those every other worker announces
// (throttle.Redis.WatchPauses). A send held for a firm slot taken before a
// pause checks it just before going, so a pause set meanwhile stops it
// without a round trip. The limiter's scripts stay the authority.
//
// It also remembers when each scope was last paused (since): a firm slot
// taken before that was paced before the provider refused a send, at a
// rate an adaptive limit may have lowered since, and is not used even if
// the pause has ended by its instant (see since).
//
// And it remembers whether each pause's run is still open here: the first
// send on the scope that the provider accepts after the pause ended ends
// the run in Redis (worker/pauserun.go), once per pause and worker.
type pauseBook struct {
	mu sync.Mutex
	m  map[string]pauseMark // pause key → its last pause
}

type pauseMark struct {
	since time.Time // when it was last paused or extended (local clock)
	until time.Time // end; not after since once it ended
	// run: no send accepted after this pause has ended its run yet
	// (takeRuns); set by every pause or extension.
	run bool
}

// set records key as paused for left from now (0: ended).
func (b *pauseBook) set(key string, left time.Duration, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]pauseMark{}
	}
	if left <= 0 {
		// Ended (resumed): no longer paused, but slots taken before the
		// pause still were paced before it.
		if p, ok := b.m[key]; ok {
			p.until = now
			b.m[key] = p
		}
		return
	}
	b.m[key] = pauseMark{since: now, until: now.Add(left), run: true}
	if len(b.m) > 10000 {
		for k, p := range b.m {
			// (a slot is held at most the hold, seconds: a mark a minute
			// past its end can no longer concern one; an open run only
			// matters within the pause memory)
			if age := now.Sub(p.until); age > time.Minute && (!p.run || age > throttle.DefaultPauseMemory) {
				delete(b.m, k)
			}
		}
	}
}

// blocked returns the pause among reqs that lasts longest after now, or,
// when none lasts and taken is not zero, one paused at or after taken
// (until is then its end, not after now).
func (b *pauseBook) blocked(reqs []throttle.Request, now, taken time.Time) (key string, until time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.m) == 0 {
		return "", time.Time{}
	}
	for _, r := range reqs {
		if r.Limit.Algorithm != throttle.Pause {
			continue
		}
		if p, ok := b.m[r.Key]; ok && p.until.After(now) && p.until.After(until) {
			key, until = r.Key, p.until
		}
	}
	if key != "" || taken.IsZero() {
		return key, until
	}
	for _, r := range reqs {
		if r.Limit.Algorithm != throttle.Pause {
			continue
		}
		if p, ok := b.m[r.Key]; ok && !p.since.Before(taken) {
			return r.Key, p.until
		}
	}
	return "", time.Time{}
}

// paused reports whether key is paused at now, as far as this worker knows.
func (b *pauseBook) paused(key string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.m[key]
	return ok && p.until.After(now)
}

// takeRuns returns the pause keys among reqs whose pause had ended when a
// send with reqs left (sent), and whose run is still open, and closes
// them: the caller ends those runs (throttle.Redis.EndPauseRun). A send
// that left before a pause ended (in flight when it was set, or meanwhile
// paused again) ends nothing. nil when there are none, which is the
// common path: one lock, no allocation.
func (b *pauseBook) takeRuns(reqs []throttle.Request, sent time.Time) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.m) == 0 {
		return nil
	}
	var keys []string
	for _, r := range reqs {
		if r.Limit.Algorithm != throttle.Pause {
			continue
		}
		if p, ok := b.m[r.Key]; ok && p.run && !p.until.After(sent) {
			p.run = false
			b.m[r.Key] = p
			keys = append(keys, r.Key)
		}
	}
	return keys
}

// reopenRun marks key's run open again, when ending it failed, so that the
// next accepted send tries again.
func (b *pauseBook) reopenRun(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.m[key]; ok {
		p.run = true
		b.m[key] = p
	}
}
