package throttle_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/throttle"
)

var (
	mps80 = throttle.Limit{Name: "throughput", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(80), Burst: 1}
	pair6 = throttle.Limit{Name: "pair", Algorithm: throttle.GCRA, Rate: throttle.Rate{Limit: 1, Period: 6 * time.Second}, Burst: 1}
	daily = throttle.Limit{Name: "daily", Algorithm: throttle.FixedWindow, Rate: throttle.PerDay(2)}
)

func reserveLimiter(t *testing.T) (*throttle.Redis, *testutil.Clock) {
	t.Helper()
	clock := testutil.NewClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	l := throttle.NewRedis(redistest.Start(t).Client(t), throttle.Options{Clock: clock.Now, OverrideRefresh: -1})
	return l, clock
}

// numberCampaign is n bulk sends c0, c1, … on one WhatsApp number at 80/s
// (mps80, key wa:number:1).
func numberCampaign(n int) []throttle.Send {
	sends := make([]throttle.Send, n)
	for i := range sends {
		sends[i] = throttle.Send{TaskID: fmt.Sprint("c", i), Requests: []throttle.Request{{Key: "wa:number:1", Limit: mps80}}}
	}
	return sends
}

// maxInSpan is the most instants within any half-open span of length w.
func maxInSpan(ts []time.Time, w time.Duration) int {
	s := slices.Clone(ts)
	slices.SortFunc(s, func(a, b time.Time) int { return a.Compare(b) })
	best, lo := 0, 0
	for hi := range s {
		for s[hi].Sub(s[lo]) >= w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

func TestReserveSpacesSendsAtTheWidenedInterval(t *testing.T) {
	l, clock := reserveLimiter(t)
	ctx := context.Background()
	opts := throttle.ReserveOptions{Headroom: 0.01}
	start := clock.Now()
	var firm []time.Time
	for i := range 200 {
		opts.TaskID = fmt.Sprint("t", i)
		r, err := l.Reserve(ctx, opts, throttle.Request{Key: "wa:number:1", Limit: mps80})
		if err != nil {
			t.Fatal(err)
		}
		if !r.Firm {
			// The current second is full: the send is planned for the next.
			if !r.Planned || !r.At.Equal(start.Add(time.Second)) {
				t.Fatalf("send %d: not firm, planned %v, at +%v: want planned at +1s", i, r.Planned, r.At.Sub(start))
			}
			break
		}
		firm = append(firm, r.At)
	}
	perSec := 80 * 0.99
	interval := time.Duration(float64(time.Second) / perSec)
	// A second holds 79 or 80 sends: 79.2 on average.
	if len(firm) != 79 && len(firm) != 80 {
		t.Fatalf("%d firm reservations in the first second, want 79 or 80", len(firm))
	}
	for i := 1; i < len(firm); i++ {
		if gap := firm[i].Sub(firm[i-1]); gap < interval-time.Microsecond || gap > interval+time.Microsecond {
			t.Fatalf("gap %d = %v, want %v", i, gap, interval)
		}
	}
	if n := maxInSpan(firm, time.Second); n > 80 {
		t.Fatalf("%d sends in one second, cap 80", n)
	}
}

// TestBacklogComesBackOncePerSend plans a campaign, then plays asynq: each
// send comes back at the whole second of its planned instant and reserves
// once. Every send must be firm on its first return, the firm instants must
// never put more than the cap in any 1-second span, and the achieved rate
// must be the widened interval's.
func TestBacklogComesBackOncePerSend(t *testing.T) {
	// Distinct recipients: the number's 80/s binds.
	t.Run("campaign", func(t *testing.T) { backlogComesBack(t, 2000, 2000, 0.98) })
	// 100 recipients, 8 messages each: their pairs (one per 6s) bind, and the
	// number idles between rounds.
	t.Run("pairs", func(t *testing.T) { backlogComesBack(t, 800, 100, 0) })
}

func backlogComesBack(t *testing.T, n, recipients int, wantRatio float64) {
	l, clock := reserveLimiter(t)
	ctx := context.Background()
	opts := throttle.ReserveOptions{Headroom: 0.01}
	sends := make([]throttle.Send, n)
	for i := range sends {
		sends[i] = throttle.Send{TaskID: fmt.Sprint("c", i), Requests: []throttle.Request{
			{Key: "wa:number:1", Limit: mps80},
			{Key: fmt.Sprintf("wa:pair:1:%d", i%recipients), Limit: pair6},
		}}
	}
	start := clock.Now()
	plans, err := l.Plan(ctx, opts, sends)
	if err != nil {
		t.Fatal(err)
	}
	planned := make([]time.Time, n)
	for i, p := range plans {
		planned[i] = p.At
	}
	// Planning again keeps every place.
	again, err := l.Plan(ctx, opts, sends[:10])
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range again {
		if p.New || !p.At.Equal(planned[i]) {
			t.Fatalf("send %d planned again: %+v, want its place %v kept", i, p, planned[i])
		}
	}
	b, err := l.Backlog(ctx, "wa:number:1")
	if err != nil {
		t.Fatal(err)
	}
	if b.Planned != int64(n) || !b.Drains.Equal(slices.MaxFunc(planned, time.Time.Compare)) {
		t.Fatalf("backlog %+v, want %d planned draining at the last plan", b, n)
	}
	// Events in time order: each send comes back at the whole second of
	// its plan (asynq), in random order within the second; one held back
	// within the hold asks again at its instant.
	type event struct {
		at  time.Time
		i   int
		seq int
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var queue []event
	for i := range n {
		queue = append(queue, event{planned[i].Truncate(time.Second).Add(50 * time.Millisecond), i, rng.Int()})
	}
	var firm []time.Time
	calls, deferred := 0, 0
	pairs := map[string][]time.Time{}
	for len(queue) > 0 {
		slices.SortFunc(queue, func(a, b event) int {
			if c := a.at.Compare(b.at); c != 0 {
				return c
			}
			return a.seq - b.seq
		})
		e := queue[0]
		queue = queue[1:]
		clock.Set(e.at)
		o := opts
		o.TaskID = sends[e.i].TaskID
		r, err := l.Reserve(ctx, o, sends[e.i].Requests...)
		calls++
		if err != nil {
			t.Fatal(err)
		}
		if !r.Firm {
			if r.Delay() > throttle.DefaultHold || deferred > n {
				t.Fatalf("send %d (planned +%v) not firm at +%v: at +%v", e.i, planned[e.i].Sub(start), clock.Now().Sub(start), r.At.Sub(start))
			}
			deferred++
			queue = append(queue, event{r.At, e.i, 0})
			continue
		}
		if r.Delay() > throttle.DefaultHold {
			t.Fatalf("send %d held %v", e.i, r.Delay())
		}
		firm = append(firm, r.At)
		if os.Getenv("TRACE") != "" && e.i%recipients == 29 {
			t.Logf("send %d planned +%v firm +%v (now +%v)", e.i, planned[e.i].Sub(start), r.At.Sub(start), clock.Now().Sub(start))
		}
		k := sends[e.i].Requests[1].Key
		pairs[k] = append(pairs[k], r.At)
	}
	if m := maxInSpan(firm, time.Second); m > 80 {
		t.Fatalf("%d sends within one second, cap 80", m)
	}
	for k, ts := range pairs {
		if m := maxInSpan(ts, 6*time.Second); m > 1 {
			t.Fatalf("pair %s: %d sends within 6s", k, m)
		}
	}
	first, last := slices.MinFunc(firm, time.Time.Compare), slices.MaxFunc(firm, time.Time.Compare)
	rate := float64(n-1) / last.Sub(first).Seconds()
	if rate < wantRatio*80 || rate > 80 {
		t.Fatalf("achieved %.2f/s, want within [%.1f, 80]", rate, wantRatio*80)
	}
	if b, _ := l.Backlog(ctx, "wa:number:1"); b.Planned != 0 {
		t.Fatalf("backlog keeps %d sends after all were sent", b.Planned)
	}
	t.Logf("%d sends: %d reserve calls (%d held back by their pair), %.2f/s", n, calls, deferred, rate)
	if float64(calls) > 1.1*float64(n) {
		t.Fatalf("%d calls for %d sends", calls, n)
	}
}

func TestHighPriorityOvertakesTheBacklog(t *testing.T) {
	l, clock := reserveLimiter(t)
	ctx := context.Background()
	opts := throttle.ReserveOptions{Headroom: 0.01}
	sends := make([]throttle.Send, 2000)
	for i := range sends {
		sends[i] = throttle.Send{TaskID: fmt.Sprint("bulk", i), Requests: []throttle.Request{{Key: "wa:number:1", Limit: mps80}}}
	}
	if _, err := l.Plan(ctx, opts, sends); err != nil {
		t.Fatal(err)
	}
	// The first second's bulk sends take their firm slots.
	for i := range 80 {
		o := opts
		o.TaskID = sends[i].TaskID
		if r, err := l.Reserve(ctx, o, sends[i].Requests...); err != nil || !r.Firm {
			t.Fatalf("bulk %d: %+v %v", i, r, err)
		}
	}
	// A new bulk send queues behind the 2,000.
	o := opts
	o.TaskID = "late-bulk"
	r, err := l.Reserve(ctx, o, throttle.Request{Key: "wa:number:1", Limit: mps80})
	if err != nil || r.Firm || r.Delay() < 20*time.Second {
		t.Fatalf("late bulk send: firm %v delay %v err %v: want planned ~25s out", r.Firm, r.Delay(), err)
	}
	o.TaskID, o.Priority = "urgent", throttle.High
	r, err = l.Reserve(ctx, o, throttle.Request{Key: "wa:number:1", Limit: mps80})
	if err != nil || !r.Firm || r.Delay() > throttle.DefaultHold {
		t.Fatalf("high priority: firm %v delay %v err %v: want firm within the hold", r.Firm, r.Delay(), err)
	}
	// Its slot is taken from the plan: bulk send 80 is not given the same one.
	clock.Set(clock.Now().Add(2 * time.Second))
	o = opts
	o.TaskID = sends[80].TaskID
	r2, err := l.Reserve(ctx, o, sends[80].Requests...)
	if err != nil || !r2.Firm || !r2.At.After(r.At) {
		t.Fatalf("bulk 80 after the urgent send: %+v %v", r2, err)
	}
}

func TestReserveBlockedByAWindowComesBackAfterIt(t *testing.T) {
	l, clock := reserveLimiter(t)
	ctx := context.Background()
	reqs := []throttle.Request{{Key: "wa:number:1", Limit: mps80}, {Key: "wa:daily:+1", Limit: daily}}
	for i := range 2 {
		clock.Set(clock.Now().Add(time.Second))
		if r, err := l.Reserve(ctx, throttle.ReserveOptions{TaskID: fmt.Sprint(i)}, reqs...); err != nil || !r.Firm {
			t.Fatalf("send %d: %+v %v", i, r, err)
		}
	}
	r, err := l.Reserve(ctx, throttle.ReserveOptions{TaskID: "3"}, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	midnight := clock.Now().Truncate(24 * time.Hour).Add(24 * time.Hour)
	if r.Firm || r.Planned || !r.At.Equal(midnight) || r.BlockedBy != "daily" {
		t.Fatalf("third send today: firm %v planned %v at %v blocked by %q; want a wait until %v by daily", r.Firm, r.Planned, r.At, r.BlockedBy, midnight)
	}
	// Nothing was taken from the GCRA limit: the next send for another
	// recipient is not pushed back.
	r, err = l.Reserve(ctx, throttle.ReserveOptions{}, throttle.Request{Key: "wa:number:1", Limit: mps80})
	if err != nil || !r.Firm || r.Delay() != 12500*time.Microsecond {
		t.Fatalf("next send: %+v %v; want firm one interval after the second send", r, err)
	}
}

func TestReleasePlannedGivesTheLastPlaceBack(t *testing.T) {
	l, _ := reserveLimiter(t)
	ctx := context.Background()
	opts := throttle.ReserveOptions{}
	req := throttle.Request{Key: "wa:number:1", Limit: throttle.Limit{Name: "t", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1), Burst: 1}}
	sends := []throttle.Send{{TaskID: "a", Requests: []throttle.Request{req}}, {TaskID: "b", Requests: []throttle.Request{req}}, {TaskID: "c", Requests: []throttle.Request{req}}}
	planned, err := l.Plan(ctx, opts, sends)
	if err != nil {
		t.Fatal(err)
	}
	if !planned[2].New {
		t.Fatal("c not new")
	}
	if ok, err := l.ReleasePlanned(ctx, throttle.Send{TaskID: "c", Requests: []throttle.Request{req}}); err != nil || !ok {
		t.Fatalf("release c: %v %v", ok, err)
	}
	if ok, _ := l.ReleasePlanned(ctx, throttle.Send{TaskID: "c", Requests: []throttle.Request{req}}); ok {
		t.Fatal("released c twice")
	}
	again, err := l.Plan(ctx, opts, []throttle.Send{{TaskID: "d", Requests: []throttle.Request{req}}})
	if err != nil {
		t.Fatal(err)
	}
	if !again[0].At.Equal(planned[2].At) {
		t.Fatalf("d planned at %v, want c's released place %v", again[0], planned[2])
	}
	b, _ := l.Backlog(ctx, "wa:number:1")
	if b.Planned != 3 {
		t.Fatalf("backlog %d, want a, b, d", b.Planned)
	}
	// Reset clears the plan and the backlog with the state.
	if _, err := l.Reset(ctx, "wa:number:1"); err != nil {
		t.Fatal(err)
	}
	if b, _ := l.Backlog(ctx, "wa:number:1"); b.Planned != 0 {
		t.Fatalf("backlog %d after reset", b.Planned)
	}
	keys, _, err := l.List(ctx, "", 0, 100)
	if err != nil || len(keys) != 0 {
		t.Fatalf("list after reset: %v %v", keys, err)
	}
}

// A pair (1 per 6 s) beside its number's 80/s keeps no backlog: the
// number's holds the place. Released, the last send planned to a
// recipient still gives its place back to the next one.
func TestAPairKeepsNoBacklogAndGivesItsLastPlaceBack(t *testing.T) {
	l, _ := reserveLimiter(t)
	ctx := context.Background()
	opts := throttle.ReserveOptions{}
	number := throttle.Request{Key: "wa:number:1", Limit: throttle.Limit{Name: "n", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(80), Burst: 1}}
	pair := throttle.Request{Key: "wa:pair:1:x", Limit: throttle.Limit{Name: "p", Algorithm: throttle.GCRA, Rate: throttle.Rate{Limit: 1, Period: 6 * time.Second}, Burst: 1}}
	send := func(id string) throttle.Send {
		return throttle.Send{TaskID: id, Requests: []throttle.Request{number, pair}}
	}
	planned, err := l.Plan(ctx, opts, []throttle.Send{send("a"), send("b")})
	if err != nil {
		t.Fatal(err)
	}
	if gap := planned[1].At.Sub(planned[0].At); gap < 6*time.Second {
		t.Fatalf("b planned %v after a, want 6s at least", gap)
	}
	if b, _ := l.Backlog(ctx, "wa:pair:1:x"); b.Planned != 0 {
		t.Fatalf("pair backlog %d, want none", b.Planned)
	}
	if b, _ := l.Backlog(ctx, "wa:number:1"); b.Planned != 2 {
		t.Fatalf("number backlog %d, want a and b", b.Planned)
	}
	// The pair's tail says a send is planned: an interval past b's second.
	tail, err := l.PlanTail(ctx, "wa:pair:1:x")
	if err != nil || tail.Sub(planned[1].At.Truncate(time.Second)) < 7*time.Second || tail.Sub(planned[1].At) > 8*time.Second {
		t.Fatalf("pair's tail %v (%v), want an interval after b's second %v", tail, err, planned[1].At)
	}
	if tail, err := l.PlanTail(ctx, "wa:pair:1:nobody"); err != nil || !tail.IsZero() {
		t.Fatalf("tail of a pair with nothing planned: %v %v", tail, err)
	}
	if ok, err := l.ReleasePlanned(ctx, send("b")); err != nil || !ok {
		t.Fatalf("release b: %v %v", ok, err)
	}
	again, err := l.Plan(ctx, opts, []throttle.Send{send("c")})
	if err != nil {
		t.Fatal(err)
	}
	if again[0].At.After(planned[1].At) {
		t.Fatalf("c planned at %v, want no later than b's released place %v", again[0].At, planned[1].At)
	}
	if gap := again[0].At.Sub(planned[0].At); gap < 6*time.Second {
		t.Fatalf("c planned %v after a, want 6s at least", gap)
	}
}

func TestReserveErrors(t *testing.T) {
	l, _ := reserveLimiter(t)
	ctx := context.Background()
	req := throttle.Request{Key: "wa:number:1", Limit: mps80}
	for name, tc := range map[string]struct {
		opts throttle.ReserveOptions
		reqs []throttle.Request
	}{
		"two scopes":    {throttle.ReserveOptions{}, []throttle.Request{req, {Key: "sms:sender:1", Limit: mps80}}},
		"headroom":      {throttle.ReserveOptions{Headroom: 0.9}, []throttle.Request{req}},
		"priority":      {throttle.ReserveOptions{Priority: "urgent"}, []throttle.Request{req}},
		"negative hold": {throttle.ReserveOptions{Hold: -time.Second}, []throttle.Request{req}},
	} {
		if _, err := l.Reserve(ctx, tc.opts, tc.reqs...); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestSweepBacklogsReleasesTasksThatAreGone(t *testing.T) {
	l, clock := reserveLimiter(t)
	ctx := context.Background()
	req := throttle.Request{Key: "wa:number:1", Limit: mps80}
	var sends []throttle.Send
	for i := range 300 {
		sends = append(sends, throttle.Send{TaskID: fmt.Sprint("t", i), Requests: []throttle.Request{req}})
	}
	if _, err := l.Plan(ctx, throttle.ReserveOptions{}, sends); err != nil {
		t.Fatal(err)
	}
	// 10s later every place is overdue; t0..t99 were deleted.
	clock.Set(clock.Now().Add(10 * time.Second))
	var asked []string
	n, err := l.SweepBacklogs(ctx, 5*time.Second, func(scope, id string) (bool, error) {
		if scope != "wa" {
			t.Errorf("scope %q", scope)
		}
		asked = append(asked, id)
		var i int
		fmt.Sscanf(id, "t%d", &i)
		return i < 100, nil
	})
	if err != nil || n != 100 || len(asked) != 300 {
		t.Fatalf("swept %d (asked %d), %v: want 100 of 300", n, len(asked), err)
	}
	if b, _ := l.Backlog(ctx, "wa:number:1"); b.Planned != 200 {
		t.Fatalf("backlog %d, want 200", b.Planned)
	}
	// Within the grace nothing is asked.
	n, err = l.SweepBacklogs(ctx, time.Hour, func(string, string) (bool, error) { t.Error("asked"); return true, nil })
	if err != nil || n != 0 {
		t.Fatalf("%d %v", n, err)
	}
}

// Concurrent Reserve calls are coalesced into shared scripts; each send
// still gets its own slot, its own lease and its own reply.
func TestConcurrentReservesEachGetTheirOwnSlotAndLease(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	l := throttle.NewRedis(rdb, throttle.Options{OverrideRefresh: -1})
	ctx := context.Background()
	conc := throttle.Limit{Name: "concurrency", Algorithm: throttle.Concurrency, Max: 1000, Lease: time.Minute}
	const n = 300
	type got struct {
		r   throttle.Reservation
		err error
	}
	out := make(chan got, n)
	for i := range n {
		go func() {
			// High priority: firm within the (long) hold, not planned.
			r, err := l.Reserve(ctx, throttle.ReserveOptions{TaskID: fmt.Sprint("c", i), Priority: throttle.High, Hold: time.Hour, Headroom: 0.015},
				throttle.Request{Key: "sms:sender:1", Limit: mps80}, throttle.Request{Key: "sms:account:1", Limit: conc})
			out <- got{r, err}
		}()
	}
	var ats []time.Time
	leases := map[string]bool{}
	for range n {
		g := <-out
		if g.err != nil || !g.r.Firm || len(g.r.Leases) != 1 {
			t.Fatalf("%+v %v", g.r, g.err)
		}
		ats = append(ats, g.r.At)
		leases[g.r.Leases[0].ID] = true
	}
	slices.SortFunc(ats, time.Time.Compare)
	perSec := 80 * 0.985
	interval := time.Duration(float64(time.Second) / perSec)
	for i := 1; i < n; i++ {
		if gap := ats[i].Sub(ats[i-1]); gap < interval-time.Microsecond {
			t.Fatalf("slots %d and %d %v apart, interval %v", i-1, i, gap, interval)
		}
	}
	held, err := rdb.ZCard(ctx, "sluice:{sms}:account:1").Result()
	if err != nil || held != n || len(leases) != n {
		t.Fatalf("%d leases held in Redis, %d distinct returned, want %d: %v", held, len(leases), n, err)
	}
}

// Workers were down for a minute: a planned campaign comes back all at once.
// Sends that cannot go within the hold get a new place in order, not a
// retry a second later: each is asked at most twice.
func TestOverdueBacklogIsPlannedAgainNotPolled(t *testing.T) {
	l, clock := reserveLimiter(t)
	ctx := context.Background()
	opts := throttle.ReserveOptions{Headroom: 0.015}
	const n = 800
	sends := numberCampaign(n)
	if _, err := l.Plan(ctx, opts, sends); err != nil {
		t.Fatal(err)
	}
	clock.Set(clock.Now().Add(time.Minute))
	type back struct {
		at time.Time
		i  int
	}
	var queue []back
	for i := range n {
		queue = append(queue, back{clock.Now(), i})
	}
	calls := 0
	var firm []time.Time
	for len(queue) > 0 {
		slices.SortStableFunc(queue, func(a, b back) int { return a.at.Compare(b.at) })
		e := queue[0]
		queue = queue[1:]
		if e.at.After(clock.Now()) {
			clock.Set(e.at)
		}
		o := opts
		o.TaskID = sends[e.i].TaskID
		r, err := l.Reserve(ctx, o, sends[e.i].Requests...)
		calls++
		if err != nil {
			t.Fatal(err)
		}
		if r.Firm {
			firm = append(firm, r.At)
			continue
		}
		if !r.Planned {
			t.Fatalf("send %d: not firm and not planned (%v)", e.i, r.Delay())
		}
		if r.Delay() <= throttle.DefaultHold {
			queue = append(queue, back{r.At, e.i}) // the worker holds it and asks again
		} else {
			queue = append(queue, back{r.At.Truncate(time.Second), e.i}) // asynq: the slot's whole second
		}
	}
	if calls > 2*n {
		t.Fatalf("%d calls for %d sends", calls, n)
	}
	if m := maxInSpan(firm, time.Second); m > 80 {
		t.Fatalf("%d in one second", m)
	}
	t.Logf("%d overdue sends: %d calls", n, calls)
}

// TestTenantsShareALimitByWeight: tenant A plans a campaign, then tenant B
// plans one on the same number 1.3s later, and asynq is played on the fake
// clock (each send comes back at the whole second of its place, within
// 100ms). While both are backlogged, every 10s window must give each its
// weight's share of the sends, within 5% of that share; the cap holds in
// every 1-second span, every send goes exactly once, and a send whose
// place was taken comes back at most once more.
func TestTenantsShareALimitByWeight(t *testing.T) {
	for _, tc := range []struct {
		name   string
		wa, wb float64
	}{{"1:1", 1, 1}, {"3:1", 3, 1}, {"1:3", 1, 3}} {
		t.Run(tc.name, func(t *testing.T) { tenantsShare(t, tc.wa, tc.wb) })
	}
}

func tenantsShare(t *testing.T, wa, wb float64) {
	l, clock := reserveLimiter(t)
	ctx := context.Background()
	opts := throttle.ReserveOptions{Headroom: 0.01}
	each := 2000
	if n, _ := strconv.Atoi(os.Getenv("EACH")); n > 0 {
		each = n
	}
	type send struct {
		throttle.Send
		b bool // tenant B's
	}
	var sends []send
	planned := map[int]time.Time{}
	plan := func(tenant string, w float64) {
		batch := make([]throttle.Send, each)
		for i := range batch {
			batch[i] = throttle.Send{TaskID: fmt.Sprint(tenant, i), Tenant: tenant, Weight: w,
				Requests: []throttle.Request{{Key: "wa:number:1", Limit: mps80}}}
		}
		ps, err := l.Plan(ctx, opts, batch)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range ps {
			planned[len(sends)] = p.At
			sends = append(sends, send{batch[i], tenant == "B"})
		}
	}
	start := clock.Now()
	plan("A", wa)

	type event struct {
		at  time.Time
		i   int
		seq int
	}
	rng := rand.New(rand.NewPCG(3, 4))
	back := func(at time.Time) time.Time {
		return at.Truncate(time.Second).Add(time.Duration(rng.IntN(100)) * time.Millisecond)
	}
	var queue []event
	for i := range sends {
		queue = append(queue, event{back(planned[i]), i, rng.Int()})
	}
	// B plans 1.3s in, while A's sends come back.
	bAt, bPlanned := start.Add(1300*time.Millisecond), false
	type sent struct {
		at time.Time
		b  bool
	}
	var out []sent
	calls, replanned := 0, 0
	done := map[string]bool{}
	again := map[string]int{} // non-firm answers per send
	for len(queue) > 0 {
		slices.SortFunc(queue, func(a, b event) int {
			if c := a.at.Compare(b.at); c != 0 {
				return c
			}
			return a.seq - b.seq
		})
		if !bPlanned && !queue[0].at.Before(bAt) {
			bPlanned = true
			clock.Set(bAt)
			n := len(sends)
			plan("B", wb)
			for i := n; i < len(sends); i++ {
				queue = append(queue, event{back(planned[i]), i, rng.Int()})
			}
			continue
		}
		e := queue[0]
		queue = queue[1:]
		if e.at.After(clock.Now()) {
			clock.Set(e.at)
		}
		s := sends[e.i]
		o := opts
		o.TaskID, o.Tenant, o.Weight = s.TaskID, s.Tenant, s.Weight
		r, err := l.Reserve(ctx, o, s.Requests...)
		calls++
		if err != nil {
			t.Fatal(err)
		}
		if !r.Firm {
			if !r.Planned {
				t.Fatalf("send %s not firm and not planned: %+v", s.TaskID, r)
			}
			replanned++
			// A displaced send takes its tenant's reservation: it comes
			// back once more, never twice.
			if again[s.TaskID]++; again[s.TaskID] > 1 {
				t.Fatalf("send %s planned again %d times", s.TaskID, again[s.TaskID])
			}
			// asynq brings a planned send back at its slot's whole second.
			next := back(r.At)
			if r.Delay() <= throttle.DefaultHold {
				next = r.At
			}
			queue = append(queue, event{next, e.i, rng.Int()})
			continue
		}
		if done[s.TaskID] {
			t.Fatalf("send %s went twice", s.TaskID)
		}
		done[s.TaskID] = true
		out = append(out, sent{r.At, s.b})
	}
	if len(out) != len(sends) {
		t.Fatalf("%d of %d sends went", len(out), len(sends))
	}
	all := make([]time.Time, len(out))
	var lastA, lastB, firstB time.Time
	for i, s := range out {
		all[i] = s.at
		switch {
		case s.b:
			if firstB.IsZero() || s.at.Before(firstB) {
				firstB = s.at
			}
			if s.at.After(lastB) {
				lastB = s.at
			}
		case s.at.After(lastA):
			lastA = s.at
		}
	}
	if m := maxInSpan(all, time.Second); m > 80 {
		t.Fatalf("%d sends within one second, cap 80", m)
	}
	// Every 10s window, in 1s steps, from the second after B's first send
	// while both are backlogged: each has a send a second after it ends.
	end := lastA
	if lastB.Before(end) {
		end = lastB
	}
	end = end.Add(-time.Second)
	wantB := wb / (wa + wb)
	windows := 0
	for from := firstB.Truncate(time.Second).Add(time.Second); !from.Add(10 * time.Second).After(end); from = from.Add(time.Second) {
		to := from.Add(10 * time.Second)
		na, nb := 0, 0
		for _, s := range out {
			if !s.at.Before(from) && s.at.Before(to) {
				if s.b {
					nb++
				} else {
					na++
				}
			}
		}
		share := float64(nb) / float64(na+nb)
		if os.Getenv("TRACE") != "" {
			t.Logf("window +%v: A %d B %d", from.Sub(start), na, nb)
		}
		if share < wantB*0.95 || share > wantB*1.05 || 1-share < (1-wantB)*0.95 || 1-share > (1-wantB)*1.05 {
			if os.Getenv("TRACE") != "" {
				per := map[int64][2]int{}
				for _, s := range out {
					k := s.at.Unix() - start.Unix()
					v := per[k]
					if s.b {
						v[1]++
					} else {
						v[0]++
					}
					per[k] = v
				}
				for k := int64(0); k < 70; k++ {
					t.Logf("sec %d: A %d B %d", k, per[k][0], per[k][1])
				}
			}
			t.Fatalf("window +%v: A %d, B %d sends: B's share %.3f, want %.3f ±5%%", from.Sub(start), na, nb, share, wantB)
		}
		windows++
	}
	if windows < 10 {
		t.Fatalf("only %d windows with both tenants backlogged", windows)
	}
	for _, k := range []string{"wa:number:1"} {
		if b, _ := l.Backlog(ctx, k); b.Planned != 0 {
			t.Fatalf("backlog keeps %d sends after all were sent", b.Planned)
		}
	}
	t.Logf("weights %v:%v: %d windows of 10s within 5%% of B's share %.3f; %d reserve calls for %d sends (%d planned again)",
		wa, wb, windows, wantB, calls, len(sends), replanned)
}

// TestTenantPlacesOnBothBackends: a tenant that plans behind another's
// campaign gets places from the next second on, at its share, and a
// released place pays the yield it caused, on redis-server and on
// miniredis (the demo's embedded Redis, whose Lua JSON is another library).
func TestTenantPlacesOnBothBackends(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		clock := testutil.NewClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
		l := throttle.NewRedis(rdb, throttle.Options{Clock: clock.Now, OverrideRefresh: -1})
		ctx := context.Background()
		opts := throttle.ReserveOptions{}
		req := []throttle.Request{{Key: "wa:number:1", Limit: mps80}}
		batch := func(tenant string, n int) []throttle.Send {
			s := make([]throttle.Send, n)
			for i := range s {
				s[i] = throttle.Send{TaskID: fmt.Sprint(tenant, i), Tenant: tenant, Requests: req}
			}
			return s
		}
		start := clock.Now()
		a, err := l.Plan(ctx, opts, batch("A", 800))
		if err != nil {
			t.Fatal(err)
		}
		b, err := l.Plan(ctx, opts, batch("B", 80))
		if err != nil {
			t.Fatal(err)
		}
		// 80/s split 1:1: B's 80 take 40 places in each of seconds 1 and 2.
		for i, p := range b {
			if want := start.Add(time.Duration(1+i/40) * time.Second); !p.At.Truncate(time.Second).Equal(want) {
				t.Fatalf("B's send %d planned at +%v, want in second +%v", i, p.At.Sub(start), want.Sub(start))
			}
		}
		// A's first send back in second 1 pays the yield: planned again.
		clock.Set(start.Add(time.Second))
		first := slices.IndexFunc(a, func(p throttle.Planned) bool { return !p.At.Before(start.Add(time.Second)) })
		r, err := l.Reserve(ctx, throttle.ReserveOptions{TaskID: fmt.Sprint("A", first), Tenant: "A"}, req...)
		if err != nil {
			t.Fatal(err)
		}
		// A's 800 fill seconds 0-9; the 80 places B took left A 80
		// reservations in second 10, and this send takes the first.
		if r.Firm || !r.Planned || !r.At.Equal(start.Add(10*time.Second)) {
			t.Fatalf("A's displaced send: %+v, want planned again on A's reservation at +10s", r)
		}
		// Releasing B's places gives them back to A, whose next send in
		// second 1 then takes its slot. A new tenant C gets its share of
		// the next full second at once.
		for i := range 80 {
			if ok, err := l.ReleasePlanned(ctx, throttle.Send{TaskID: fmt.Sprint("B", i), Tenant: "B", Requests: req}); err != nil || !ok {
				t.Fatalf("release B%d: %v %v", i, ok, err)
			}
		}
		r, err = l.Reserve(ctx, throttle.ReserveOptions{TaskID: fmt.Sprint("A", first+1), Tenant: "A"}, req...)
		if err != nil || !r.Firm {
			t.Fatalf("A's next send in second 1 after B's release: %+v, %v: want firm", r, err)
		}
		c, err := l.Plan(ctx, opts, batch("C", 2))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range c {
			if !p.At.Truncate(time.Second).Equal(start.Add(2 * time.Second)) {
				t.Fatalf("C planned at +%v, want in second +2 (second +1 is full and under way)", p.At.Sub(start))
			}
		}
		// The yields B's release cancelled dropped A's reservations: second
		// 10 holds only the claimed one, and a new send of A goes there.
		a2, err := l.Plan(ctx, opts, []throttle.Send{{TaskID: "A-more", Tenant: "A", Requests: req}})
		if err != nil {
			t.Fatal(err)
		}
		if !a2[0].At.Truncate(time.Second).Equal(start.Add(10 * time.Second)) {
			t.Fatalf("A's next send planned at +%v, want in second +10 (its dropped reservations' room)", a2[0].At.Sub(start))
		}
	})
}

// TestRetakeIsNotCountedTwice: a late send's re-take of a slot goes first
// like a High send but, unlike one, adds nothing to its second's plan count
// (the send was counted when it was planned).
func TestRetakeIsNotCountedTwice(t *testing.T) {
	clock := testutil.NewClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	rdb := redistest.Start(t).Client(t)
	l := throttle.NewRedis(rdb, throttle.Options{Clock: clock.Now, OverrideRefresh: -1})
	ctx := context.Background()
	req := throttle.Request{Key: "wa:number:1", Limit: mps80}
	sends := make([]throttle.Send, 200)
	for i := range sends {
		sends[i] = throttle.Send{TaskID: fmt.Sprint("c", i), Requests: []throttle.Request{req}}
	}
	if _, err := l.Plan(ctx, throttle.ReserveOptions{}, sends); err != nil {
		t.Fatal(err)
	}
	count := func() string {
		v, _ := rdb.HGet(ctx, l.Key("wa:number:1")+"|plan", fmt.Sprint("@", clock.Now().Unix())).Result()
		return v
	}
	before := count()
	r, err := l.Reserve(ctx, throttle.ReserveOptions{Priority: throttle.High, Retake: true}, req)
	if err != nil || !r.Firm {
		t.Fatalf("retake: %+v %v, want firm", r, err)
	}
	if got := count(); got != before {
		t.Fatalf("this second's plan count %s after a retake, want %s", got, before)
	}
	if r, err = l.Reserve(ctx, throttle.ReserveOptions{Priority: throttle.High}, req); err != nil || !r.Firm {
		t.Fatalf("high: %+v %v, want firm", r, err)
	}
	if got, want := count(), fmt.Sprint(mustAtoi(t, before)+1); got != want {
		t.Fatalf("this second's plan count %s after a high-priority send, want %s", got, want)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRetakeRespacesSlowLimits: a send that took its pair slot and then
// woke up 200ms late retakes; the pair's next send is then spaced one
// interval from the late send, not from the slot it missed.
func TestRetakeRespacesSlowLimits(t *testing.T) {
	l, clock := reserveLimiter(t)
	ctx := context.Background()
	opts := throttle.ReserveOptions{Headroom: 0.01}
	reqs := []throttle.Request{{Key: "wa:number:1", Limit: mps80}, {Key: "wa:pair:1:x", Limit: pair6}}
	start := clock.Now()
	r, err := l.Reserve(ctx, opts, reqs...)
	if err != nil || !r.Firm {
		t.Fatalf("first send: %+v %v", r, err)
	}
	clock.Set(start.Add(200 * time.Millisecond))
	late := opts
	late.Priority, late.Retake = throttle.High, true
	r, err = l.Reserve(ctx, late, reqs...)
	if err != nil || !r.Firm || r.At.Sub(start) > 250*time.Millisecond {
		t.Fatalf("retake: %+v %v, want firm at about +200ms (the pair does not hold it back)", r, err)
	}
	sent := r.At
	interval := 6060606 * time.Microsecond // 6s widened by 1%
	clock.Set(start.Add(interval))
	r, err = l.Reserve(ctx, throttle.ReserveOptions{Headroom: 0.01, Priority: throttle.High}, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.At.Sub(sent); got < interval-time.Millisecond {
		t.Fatalf("the pair's next send %v after the late one, want at least %v", got, interval)
	}
}

// A worker that starts behind a backlog takes many overdue sends at once:
// those the number's firm slots hold back past the hold are planned again
// from the second their slot comes within the hold, not from now, so that
// none of them comes back before it can go.
func TestSendsHeldBackByTheFirmBookComeBackWhenTheyCanGo(t *testing.T) {
	l, clock := reserveLimiter(t)
	ctx := context.Background()
	opts := throttle.ReserveOptions{Headroom: 0.015}
	const n = 400
	sends := numberCampaign(n)
	plans, err := l.Plan(ctx, opts, sends)
	if err != nil {
		t.Fatal(err)
	}
	// The workers start 3s into the plan: the first 3s's sends (about 240)
	// are due or overdue and come back at once, with the 4th's.
	clock.Set(plans[0].At.Add(3 * time.Second))
	back := 0
	for _, p := range plans {
		if p.At.Before(clock.Now().Truncate(time.Second).Add(time.Second)) {
			back++
		}
	}
	sends = sends[:back]
	var wg sync.WaitGroup
	res := make([]throttle.Reservation, back)
	for i := range sends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := opts
			o.TaskID = sends[i].TaskID
			r, err := l.Reserve(ctx, o, sends[i].Requests...)
			if err != nil {
				t.Error(err)
			}
			res[i] = r
		}()
	}
	wg.Wait()
	firm, early := 0, 0
	var last time.Time
	for _, r := range res {
		if r.Firm {
			firm++
			if r.At.After(last) {
				last = r.At
			}
			continue
		}
		if !r.Planned {
			t.Fatalf("neither firm nor planned: %+v", r)
		}
	}
	for _, r := range res {
		// Back at its place's whole second, its slot must be within the
		// hold: no earlier than the firm book's end less the hold.
		if !r.Firm && r.At.Truncate(time.Second).Before(last.Add(-throttle.DefaultHold).Truncate(time.Second)) {
			early++
		}
	}
	secs := map[int64]int{}
	for _, r := range res {
		if !r.Firm {
			secs[r.At.Unix()-clock.Now().Unix()]++
		}
	}
	t.Logf("%d back, %d firm (the last %v from now); held back, by their place's second from now: %v", back, firm, last.Sub(clock.Now()), secs)
	if firm < 150 || firm > 170 {
		t.Fatalf("%d firm, want the hold's worth at 80/s (about 160)", firm)
	}
	if early > 0 {
		t.Fatalf("%d of %d held-back sends come back before their slot can be within the hold (firm book ends %v after now)", early, back-firm, last.Sub(clock.Now()))
	}
}

// A call's limit specs carry a Distinct limit's member (reserve.lua reads
// a send's limit as its key and spec): each member is its own spec, and
// the window counts each member once.
func TestReserveCountsDistinctMembersBySpec(t *testing.T) {
	l, _ := reserveLimiter(t)
	ctx := context.Background()
	tier := throttle.Limit{Name: "tier", Algorithm: throttle.Distinct, Rate: throttle.PerDay(2)}
	reserve := func(member string) throttle.Reservation {
		t.Helper()
		r, err := l.Reserve(ctx, throttle.ReserveOptions{Priority: throttle.High},
			throttle.Request{Key: "wa:number:9", Limit: mps80},
			throttle.Request{Key: "wa:tier:9", Limit: tier, Member: member})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for i, c := range []struct {
		member string
		firm   bool
	}{{"+1202", true}, {"+1303", true}, {"+1202", true}, {"+1404", false}} {
		if r := reserve(c.member); r.Firm != c.firm || (!c.firm && r.BlockedBy != "tier") {
			t.Fatalf("send %d to %s: firm %v, blocked by %q; want firm %v", i, c.member, r.Firm, r.BlockedBy, c.firm)
		}
	}
}

// TestRetookNamesTheLimitsARetakeGaveNewSlots: a firm retake reports, limit
// by limit, whether it took a new slot (paced faster than one send a
// second) or kept the send's (slower), as the script decides it: after a
// send on each, a retake is held back by the 2/s limit's next slot and not
// by the 1/s one's, at the boundary itself (headroom 0: exactly 1s, slow)
// and just over it (1.5%: 1.015s). A reservation that is not a retake
// reports none.
func TestRetookNamesTheLimitsARetakeGaveNewSlots(t *testing.T) {
	for _, headroom := range []float64{0, 0.015} {
		t.Run(fmt.Sprint(headroom), func(t *testing.T) {
			clock := testutil.NewClock(time.Date(2026, 11, 28, 19, 0, 0, 0, time.UTC))
			rdb := redistest.Start(t).Client(t)
			l := throttle.NewRedis(rdb, throttle.Options{Clock: clock.Now, OverrideRefresh: -1})
			ctx := context.Background()
			one := func(key string, rate throttle.Rate) throttle.Request {
				return throttle.Request{Key: key, Limit: throttle.Limit{Name: key, Algorithm: throttle.GCRA, Rate: rate, Burst: 1}}
			}
			fast, slow := one("t:fast", throttle.Rate{Limit: 2, Period: time.Second}), one("t:slow", throttle.PerSecond(1))
			pause := throttle.PauseRequest("t:paused")
			for _, req := range [][]throttle.Request{{fast, pause}, {slow, pause}} {
				r, err := l.Reserve(ctx, throttle.ReserveOptions{Priority: throttle.High, Headroom: headroom}, req...)
				if err != nil || !r.Firm {
					t.Fatalf("first send on %s: %+v %v, want firm", req[0].Key, r, err)
				}
				for _, d := range r.Limits {
					if d.Retook {
						t.Fatalf("a reservation that is not a retake reports Retook on %s", d.Key)
					}
				}
				r, err = l.Reserve(ctx, throttle.ReserveOptions{Priority: throttle.High, Retake: true, Headroom: headroom}, req...)
				if err != nil || !r.Firm {
					t.Fatalf("retake on %s: %+v %v, want firm", req[0].Key, r, err)
				}
				isFast := req[0].Key == fast.Key
				if r.Limits[0].Retook != isFast || r.Limits[1].Retook {
					t.Fatalf("retake on %s: Retook %v, %v; want %v, false", req[0].Key, r.Limits[0].Retook, r.Limits[1].Retook, isFast)
				}
				// The script agrees: a new slot is behind the first send's;
				// a kept one goes now.
				if held := r.At.After(r.Now); held != isFast {
					t.Fatalf("retake on %s: at now+%v; want held back %v", req[0].Key, r.At.Sub(r.Now), isFast)
				}
			}
		})
	}
}
