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
type pauseBook struct {
	mu sync.Mutex
	m  map[string]time.Time // pause key → end
}

// set records key as paused for left from now (0: ended).
func (b *pauseBook) set(key string, left time.Duration, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]time.Time{}
	}
	if left <= 0 {
		delete(b.m, key)
		return
	}
	b.m[key] = now.Add(left)
	if len(b.m) > 10000 {
		for k, u := range b.m {
			if !u.After(now) {
				delete(b.m, k)
			}
		}
	}
}

// blocked returns the pause among reqs that lasts longest after now.
func (b *pauseBook) blocked(reqs []throttle.Request, now time.Time) (key string, until time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.m) == 0 {
		return "", time.Time{}
	}
	for _, r := range reqs {
		if r.Limit.Algorithm != throttle.Pause {
			continue
		}
		if u, ok := b.m[r.Key]; ok && u.After(now) && u.After(until) {
			key, until = r.Key, u
		}
	}
	return key, until
}

// paused reports whether key is paused at now, as far as this worker knows.
func (b *pauseBook) paused(key string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	u, ok := b.m[key]
	return ok && u.After(now)
}
