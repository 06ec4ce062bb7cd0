package throttle

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// snapCache is a process's copy of state that every process shares in
// Redis (the runtime overrides, the adaptive rates), re-read at most every
// refresh by the call that finds it stale. Calls meanwhile use the copy
// while it is under two refreshes old; an older one (kept by a process that
// was idle while the state changed, say a rate lowered since) is not used:
// the call waits for the read under way, since a send paced at a stale
// rate leaves its spacing in the limit's GCRA book. A failed read keeps the
// last copy and is reported through failed; the next try comes a refresh
// later.
type snapCache[T any] struct {
	refresh time.Duration
	snap    atomic.Pointer[snapshot[T]]
	loading sync.Mutex
	// load reads the state; prev is the copy held (nil: none), which load
	// returns as is when the state did not change.
	load func(ctx context.Context, prev *T) (*T, error)
	// failed reports a read that failed (not one whose caller gave up).
	failed func(ctx context.Context, err error)
}

// snapshot is a copy and when it was read.
type snapshot[T any] struct {
	at time.Time
	v  *T
}

func newSnapCache[T any](refresh time.Duration, load func(context.Context, *T) (*T, error), failed func(context.Context, error)) *snapCache[T] {
	if refresh <= 0 {
		refresh = DefaultOverrideRefresh
	}
	return &snapCache[T]{refresh: refresh, load: load, failed: failed}
}

// current returns the copy, re-read when stale; nil when none was ever read.
func (c *snapCache[T]) current(ctx context.Context) *T {
	s := c.snap.Load()
	if s != nil && time.Since(s.at) < c.refresh {
		return s.v
	}
	if !c.loading.TryLock() {
		if s != nil && time.Since(s.at) < 2*c.refresh {
			return s.v // another call is re-reading a recent copy
		}
		c.loading.Lock()
		if s = c.snap.Load(); s != nil && time.Since(s.at) < c.refresh {
			c.loading.Unlock()
			return s.v
		}
	}
	defer c.loading.Unlock()
	var prev *T
	if s != nil {
		prev = s.v
	}
	at := time.Now()
	n, err := c.load(ctx, prev)
	if err != nil {
		if ctx.Err() == nil { // the caller gave up: not the server's fault
			c.failed(ctx, err)
		}
		if prev != nil {
			c.snap.Store(&snapshot[T]{at: time.Now(), v: prev})
		}
		return prev
	}
	c.snap.Store(&snapshot[T]{at: at, v: n})
	return n
}

// update replaces the copy with fn(old) (old nil when none), keeping when
// it was read: a change this process made itself goes in at once.
func (c *snapCache[T]) update(fn func(old *T) *T) {
	c.loading.Lock()
	defer c.loading.Unlock()
	n := &snapshot[T]{}
	if s := c.snap.Load(); s != nil {
		n.at, n.v = s.at, fn(s.v)
	} else {
		n.v = fn(nil)
	}
	c.snap.Store(n)
}
