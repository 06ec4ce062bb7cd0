package throttle

import (
	"slices"
	"testing"
	"time"
)

// A key that one send of a batch uses for a GCRA limit and another for a
// window gets an entry for each, so that the GCRA limit's plan and backlog
// follow its state key in KEYS (reserve.lua reads them at i+1 and i+2).
func TestReserveArgsKeepAGCRALimitsBooksAfterItsKey(t *testing.T) {
	l := NewRedis(nil, Options{OverrideRefresh: -1})
	window := Limit{Name: "w", Algorithm: FixedWindow, Rate: PerSecond(10)}
	paced := Limit{Name: "p", Algorithm: GCRA, Rate: PerSecond(10), Burst: 1}
	ra := l.newReserveArgs("plan", time.Second, 0, 2)
	ra.send("t1", Bulk, false, "c1", "", 1, []Request{{Key: "ch:k:1", Limit: window}}, nil)
	ra.send("t2", Bulk, false, "c2", "", 1, []Request{{Key: "ch:k:1", Limit: paced}, {Key: "ch:k:2", Limit: window}}, nil)
	full := l.Key("ch:k:1")
	want := []string{full, full, planKey(full), backlogKey(full), l.Key("ch:k:2")}
	if !slices.Equal(ra.keys, want) {
		t.Fatalf("KEYS = %q, want %q", ra.keys, want)
	}
	if gi := ra.index[reserveKey{full, true}]; gi != 2 {
		t.Fatalf("the GCRA entry starts at KEYS[%d], want KEYS[2]", gi)
	}
}
