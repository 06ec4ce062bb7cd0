package throttle

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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

// A call sends each limit spec once, after the head (reserve.lua's
// ARGV[8] and on), and each send's limit as its key index and spec number;
// a Distinct limit's member and a pause make specs of their own.
func TestReserveArgsSendEachSpecOnce(t *testing.T) {
	l := NewRedis(nil, Options{OverrideRefresh: -1})
	window := Limit{Name: "w", Algorithm: FixedWindow, Rate: PerSecond(10)}
	tier := Limit{Name: "t", Algorithm: Distinct, Rate: PerDay(2)}
	ra := l.newReserveArgs("reserve", time.Second, 0.01, 2)
	ra.send("t1", Bulk, false, "", "", 1, []Request{{Key: "ch:a", Limit: window}, {Key: "ch:t", Limit: tier, Member: "m1"}, PauseRequest("ch:p")}, nil)
	ra.send("t2", Bulk, false, "", "", 1, []Request{{Key: "ch:b", Limit: window}, {Key: "ch:t", Limit: tier, Member: "m2"}, PauseRequest("ch:p")}, nil)
	got := ra.argv()
	want := []any{got[0], "reserve", got[2], int64(1000000), "0.01", got[5], 2, // (now, prefetch and its span: the limiter's)
		4, // specs: the window, the tier for m1, the pause, the tier for m2
		"fixed_window", int64(10), int64(1000000), int64(0), int64(1), "",
		"distinct", int64(2), int64(86400000000), int64(0), int64(1), "m1",
		"pause", int64(0), int64(0), int64(0), int64(1), "",
		"distinct", int64(2), int64(86400000000), int64(0), int64(1), "m2",
		"t1", "bulk", "", "", "1", 3, 1, 1, 2, 2, 3, 3,
		"t2", "bulk", "", "", "1", 3, 4, 1, 2, 4, 3, 3,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ARGV =\n%v\nwant\n%v", got, want)
	}
}

// A reserve call waits for company at most half the emission interval of
// its fastest rated limit (capped by the linger), so that a batch's chain
// of reservations keeps ahead of its number's pace; a retake, or a call
// with no rated limit, waits for nothing.
func TestReserveDueKeepsABatchsChainAheadOfItsPace(t *testing.T) {
	now := time.Date(2026, 11, 28, 21, 0, 0, 0, time.UTC)
	number := Request{Key: "number", Limit: Limit{Algorithm: GCRA, Rate: PerSecond(80)}}
	pair := Request{Key: "pair", Limit: Limit{Algorithm: GCRA, Rate: Rate{Limit: 1, Period: 6 * time.Second}}}
	fast := Request{Key: "fast", Limit: Limit{Algorithm: GCRA, Rate: PerSecond(1000)}}
	slow := Request{Key: "slow", Limit: Limit{Algorithm: FixedWindow, Rate: PerSecond(10)}}
	pool := Request{Key: "pool", Limit: Limit{Algorithm: Concurrency, Burst: 5}}
	for _, tc := range []struct {
		name string
		opts ReserveOptions
		reqs []Request
		want time.Time
	}{
		{"80/s and its pair: half of 12.5 ms", ReserveOptions{}, []Request{number, pair}, now.Add(6250 * time.Microsecond)},
		{"1,000/s: half a millisecond", ReserveOptions{}, []Request{fast}, now.Add(500 * time.Microsecond)},
		{"10/s: the linger, not 50 ms", ReserveOptions{}, []Request{slow}, now.Add(reserveLinger)},
		{"a retake", ReserveOptions{Retake: true}, []Request{number}, time.Time{}},
		{"no rated limit", ReserveOptions{}, []Request{pool}, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, reserveDue(tc.opts, tc.reqs, now))
		})
	}
}
