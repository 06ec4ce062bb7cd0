package throttle

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// A call that finds the adaptive and override snapshots stale while
// another call is re-reading them uses a snapshot only if it is recent
// (under two refreshes old); an older one, kept by a process that was idle
// while the rate was lowered, would pace at the old rate. In the e2e run a
// burst of dequeues used a 3-second-old 1.25/s three seconds after the rate
// was cut to 0.3125/s, and the send after it reached the provider 0.3s
// later: a throttle that was Sluice's fault.
func TestStaleSnapshotWaitsForTheReadUnderWay(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	l := NewRedis(rdb, Options{PrefetchSpan: -1, OverrideRefresh: 100 * time.Millisecond})
	req := Request{Key: "sms:sender:+12025550100", Limit: Limit{Name: "sender", Algorithm: GCRA, Rate: PerSecond(5), Burst: 1}}

	// The process read the state long ago: nothing adapted, no override.
	old := time.Now().Add(-time.Hour)
	l.adaptive.snap.Store(&snapshot[adaptSnapshot]{at: old, v: &adaptSnapshot{entries: map[string]adaptEntry{}}})
	l.overrides.snap.Store(&snapshot[overrideSnapshot]{at: old, v: &overrideSnapshot{exact: map[string]Override{}, byPrefix: map[string]Override{}}})
	// Since then another process lowered the rate to 1.25/s.
	other := NewRedis(rdb, Options{PrefetchSpan: -1})
	if _, err := other.AdaptDown(ctx, AdaptOptions{}, AdaptSignal{Code: 20429}, req); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name   string
		lock   func()
		unlock func()
		read   func() bool // reports whether the call saw the change
	}{
		{"adaptive", l.adaptive.loading.Lock, l.adaptive.loading.Unlock, func() bool {
			return l.adaptive.apply(ctx, []Request{req})[0].Limit.Rate.Period == 4*time.Second
		}},
		{"overrides", l.overrides.loading.Lock, l.overrides.loading.Unlock, func() bool {
			return len(l.overrides.current(ctx).exact) == 1
		}},
	} {
		if c.name == "overrides" {
			if err := other.SetOverride(ctx, req.Key, Override{Rate: Rate{Limit: 2, Period: time.Second}}); err != nil {
				t.Fatal(err)
			}
		}
		c.lock() // a read under way
		saw := make(chan bool, 1)
		go func() { saw <- c.read() }()
		select {
		case v := <-saw:
			t.Fatalf("%s: returned during the read under way (saw the change: %v), want it to wait for the read", c.name, v)
		case <-time.After(50 * time.Millisecond): // a bound on a wait that must not end, not a sleep for a condition
		}
		c.unlock()
		if !<-saw {
			t.Fatalf("%s: the call after the read under way did not see the change", c.name)
		}
	}
}
