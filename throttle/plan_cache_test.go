package throttle_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/throttle"
)

// A plan call reads a number's plan hash once for all its sends (pace.lua,
// plan_fields) and a reserve call once for the sends it carries: each send
// must see what the ones before it wrote, exactly as if it were planned and
// reserved in a call of its own. Two tenants share the number (turns,
// yields, reservations), recipients repeat (the pair's tail), some sends are
// high priority, the clock moves between calls, and a number's seconds are
// swept; the places and slots of one call and of one call a send are the same.
func TestOneCallPlansAndReservesAsOneCallASend(t *testing.T) {
	sends := func() []throttle.Send {
		var out []throttle.Send
		for i := range 600 {
			tenant := "a"
			if i%3 == 0 {
				tenant = "b"
			}
			out = append(out, throttle.Send{TaskID: fmt.Sprint("s", i), Tenant: tenant, Requests: []throttle.Request{
				{Key: "wa:number:1", Limit: mps80},
				{Key: fmt.Sprintf("wa:pair:1:+1202555%04d", i%250), Limit: pair6},
			}})
		}
		return out
	}()
	type result struct {
		places []time.Time
		slots  []string
	}
	run := func(together bool) result {
		l, clock := reserveLimiter(t)
		ctx := context.Background()
		opts := throttle.ReserveOptions{Headroom: 0.015}
		var r result
		plan := func(batch []throttle.Send) {
			ps, err := l.Plan(ctx, opts, batch)
			require.NoError(t, err)
			for _, p := range ps {
				r.places = append(r.places, p.At)
			}
		}
		for _, part := range [][]throttle.Send{sends[:300], sends[300:]} {
			if together {
				plan(part)
			} else {
				for _, s := range part {
					plan([]throttle.Send{s})
				}
			}
			clock.Advance(700 * time.Millisecond) // the second campaign a little later
		}
		// The first 120 come back at their places, in order, one reserve each.
		for i, s := range sends[:120] {
			if r.places[i].After(clock.Now()) {
				clock.Set(r.places[i])
			}
			o := opts
			o.TaskID, o.Tenant = s.TaskID, s.Tenant
			res, err := l.Reserve(ctx, o, s.Requests...)
			require.NoError(t, err)
			r.slots = append(r.slots, fmt.Sprintf("%v %v %v", res.Firm, res.Planned, res.At.Sub(r.places[0])))
		}
		return r
	}
	one, each := run(true), run(false)
	require.Equal(t, each.places, one.places, "places: one call against a call a send")
	require.Equal(t, each.slots, one.slots, "slots after one plan call against after a call a send")
}

// The paths a one-call-against-one-call-a-send comparison cannot order:
// reserve calls carrying several sends (concurrent Reserves, coalesced),
// places given back (ReleasePlanned, whose yields move reservations), and a
// plan after a long idle (sweep walks the whole hash). The package's tests
// run the reserve script with PLAN_CHECK (main_internal_test.go), so a read
// of a stale copy fails the call; here every call must succeed.
func TestPlanCopyOnEveryPath(t *testing.T) {
	l, clock := reserveLimiter(t)
	ctx := context.Background()
	opts := throttle.ReserveOptions{Headroom: 0.015}
	// Tenant a plans 300 sends, then b 100: b takes places from a in the
	// seconds to come (a owes yields there and gets reservations), then c.
	send := func(i int) throttle.Send {
		tenant := "a"
		switch {
		case i >= 400:
			tenant = "c"
		case i >= 300:
			tenant = "b"
		}
		return throttle.Send{TaskID: fmt.Sprint("p", i), Tenant: tenant, Requests: []throttle.Request{
			{Key: "wa:number:1", Limit: mps80},
			{Key: fmt.Sprintf("wa:pair:1:+1202555%04d", i%150), Limit: pair6},
		}}
	}
	var sends []throttle.Send
	for i := range 500 {
		sends = append(sends, send(i))
	}
	planned, err := l.Plan(ctx, opts, sends[:300])
	require.NoError(t, err)
	_, err = l.Plan(ctx, opts, sends[300:400])
	require.NoError(t, err)
	clock.Set(planned[0].At)
	// 120 come back at once from 12 goroutines: their calls share scripts.
	var wg sync.WaitGroup
	errs := make(chan error, 120)
	for g := range 12 {
		wg.Go(func() {
			for i := g; i < 120; i += 12 {
				o := opts
				o.TaskID, o.Tenant = sends[i].TaskID, sends[i].Tenant
				_, err := l.Reserve(ctx, o, sends[i].Requests...)
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	// Some of a's and b's give their places back (a's yields move its
	// reservations), then c's sends arrive.
	for _, s := range append(sends[150:180:180], sends[300:320]...) {
		_, err := l.ReleasePlanned(ctx, s)
		require.NoError(t, err)
	}
	_, err = l.Plan(ctx, opts, sends[400:450])
	require.NoError(t, err)
	// After a long idle the plan is swept by walking its fields.
	clock.Advance(1500 * time.Second)
	_, err = l.Plan(ctx, opts, sends[450:])
	require.NoError(t, err)
	b, err := l.Backlog(ctx, "wa:number:1")
	require.NoError(t, err)
	require.Positive(t, b.Planned)
}
