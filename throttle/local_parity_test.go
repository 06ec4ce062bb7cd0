package throttle

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/redistest"
)

// The differential tests below run random call sequences (consume, check,
// status, release; times that hit the reported resets and retries to the
// microsecond) against Redis and Local side by side, and require the same
// Decision, field for field, at every step.

// parityScenario is a family of calls drawn at random.
type parityScenario struct {
	name  string
	calls [][]Request // call templates; costs and members are drawn per step
	// members is the pool Distinct members are drawn from.
	members []string
	// integer: every GCRA emission interval is a whole number of µs, so the
	// rate.Limiter must never need re-anchoring.
	integer bool
	// ttl: keys change algorithm, so decisions may depend on Redis expiry:
	// run only on miniredis, whose TTLs follow the test clock.
	ttl bool
	// jitter: the clock sometimes steps back a little (redis-server only);
	// the rate.Limiter is then re-anchored.
	jitter bool
}

func parityGCRA(name string, n int64, per time.Duration, burst int64) Limit {
	return Limit{Name: name, Algorithm: GCRA, Rate: Rate{Limit: n, Period: per}, Burst: burst}
}

func parityWindow(name string, a Algorithm, n int64, per time.Duration) Limit {
	return Limit{Name: name, Algorithm: a, Rate: Rate{Limit: n, Period: per}}
}

func parityOne(key string, lim Limit) []Request { return []Request{{Key: key, Limit: lim}} }

func parityScenarios() []parityScenario {
	g10 := parityGCRA("g10", 10, time.Second, 3)
	g80 := parityGCRA("g80", 80, time.Second, 1)
	pair := parityGCRA("pair", 1, 6*time.Second, 1)
	g5m := parityGCRA("g5m", 5, time.Minute, 5)
	gday := parityGCRA("gday", 250, 24*time.Hour, 10)
	gms := parityGCRA("gms", 1, time.Millisecond, 1)
	g100 := parityGCRA("g100", 100, time.Second, 100)

	g3 := parityGCRA("g3", 3, time.Second, 1)
	g7 := parityGCRA("g7", 7, time.Second, 5)
	g13 := parityGCRA("g13", 13, 7*time.Second, 4)
	g7ms := parityGCRA("g7ms", 7, time.Millisecond, 3)
	g3d := parityGCRA("g3d", 3, 24*time.Hour, 2)
	g1000 := parityGCRA("g1000", 1000, 7*time.Second, 50)

	fw1s := parityWindow("fw1s", FixedWindow, 3, time.Second)
	fw1m := parityWindow("fw1m", FixedWindow, 5, time.Minute)
	fw1d := parityWindow("fw1d", FixedWindow, 2, 24*time.Hour)
	log1m := parityWindow("log1m", SlidingWindowLog, 3, time.Minute)
	log1s := parityWindow("log1s", SlidingWindowLog, 10, time.Second)
	log30 := parityWindow("log30", SlidingWindowLog, 5, 30*time.Second)
	swc1m := parityWindow("swc1m", SlidingWindowCounter, 10, time.Minute)
	swc1s := parityWindow("swc1s", SlidingWindowCounter, 7, time.Second)
	swc30 := parityWindow("swc30", SlidingWindowCounter, 3, 30*time.Second)
	swc5m := parityWindow("swc5m", SlidingWindowCounter, 100, 5*time.Minute)
	mi5 := Limit{Name: "mi5", Algorithm: MinInterval, Interval: 5 * time.Second}
	mi1 := Limit{Name: "mi1", Algorithm: MinInterval, Interval: time.Millisecond}
	mi333 := Limit{Name: "mi333", Algorithm: MinInterval, Interval: 333 * time.Millisecond}
	c3 := Limit{Name: "c3", Algorithm: Concurrency, Max: 3, Lease: 10 * time.Second}
	c1 := Limit{Name: "c1", Algorithm: Concurrency, Max: 1, Lease: time.Second}
	c5 := Limit{Name: "c5", Algorithm: Concurrency, Max: 5, Lease: time.Second}
	d3 := parityWindow("d3", Distinct, 3, time.Minute)
	d2 := parityWindow("d2", Distinct, 2, 24*time.Hour)
	d5 := parityWindow("d5", Distinct, 5, time.Second)
	members := []string{"+1", "+2", "+3", "+4", "+5", "+6", "+7"}

	mixed := []Request{
		{Key: "m:g", Limit: g10}, {Key: "m:f", Limit: fw1s}, {Key: "m:l", Limit: log1s},
		{Key: "m:s", Limit: swc1s}, {Key: "m:i", Limit: mi333}, {Key: "m:c", Limit: c5}, {Key: "m:d", Limit: d5},
	}
	return []parityScenario{
		{name: "gcra", integer: true, calls: [][]Request{
			parityOne("g:a", g10), parityOne("g:b", g80), parityOne("g:c", pair), parityOne("g:d", g5m), parityOne("g:e", gday), parityOne("g:f", gms), parityOne("g:g", g100),
			{{Key: "g:a", Limit: g10}, {Key: "g:b", Limit: g80}, {Key: "g:c", Limit: pair}},
			{{Key: "g:g", Limit: g100}, {Key: "g:d", Limit: g5m}},
		}},
		{name: "gcra-deep", calls: [][]Request{
			parityOne("g:a", parityGCRA("y1", 1, 365*24*time.Hour, 9)), parityOne("g:b", parityGCRA("y7", 7, 365*24*time.Hour, 60)),
			parityOne("g:c", parityGCRA("y3", 3, 100*24*time.Hour, 100)),
			parityOne("g:d", parityGCRA("y30", 1, 365*24*time.Hour, 30)),
			parityOne("g:f", parityGCRA("big", 1<<30, time.Second, 1<<20)),
		}},
		{name: "gcra-fractional", calls: [][]Request{
			parityOne("g:a", g3), parityOne("g:b", g7), parityOne("g:c", g13), parityOne("g:d", g7ms), parityOne("g:e", g3d), parityOne("g:f", g1000),
			{{Key: "g:a", Limit: g3}, {Key: "g:b", Limit: g7}, {Key: "g:f", Limit: g1000}},
		}},
		{name: "gcra-shared-key", ttl: true, calls: [][]Request{
			parityOne("g:k", g10), parityOne("g:k", g3),
			{{Key: "g:k", Limit: g10}, {Key: "g:k", Limit: g3}},
			{{Key: "g:k", Limit: g3}, {Key: "g:k", Limit: g7}, {Key: "g:k", Limit: g10}},
		}},
		{name: "fixed-window", integer: true, calls: [][]Request{
			parityOne("f:a", fw1s), parityOne("f:b", fw1m), parityOne("f:c", fw1d),
			{{Key: "f:a", Limit: fw1s}, {Key: "f:b", Limit: fw1m}},
			{{Key: "f:a", Limit: fw1s}, {Key: "f:g", Limit: g10}},
			{{Key: "f:a", Limit: fw1s}, {Key: "f:c", Limit: fw1d}, {Key: "f:p", Limit: pair}},
		}},
		{name: "sliding-window-log", integer: true, calls: [][]Request{
			parityOne("l:a", log1m), parityOne("l:b", log1s), parityOne("l:c", log30),
			{{Key: "l:a", Limit: log1m}, {Key: "l:b", Limit: log1s}, {Key: "l:c", Limit: log30}},
		}},
		{name: "sliding-window-counter", integer: true, calls: [][]Request{
			parityOne("s:a", swc1m), parityOne("s:b", swc1s), parityOne("s:c", swc30), parityOne("s:d", swc5m),
			{{Key: "s:a", Limit: swc1m}, {Key: "s:b", Limit: swc1s}},
			{{Key: "s:c", Limit: swc30}, {Key: "s:d", Limit: swc5m}, {Key: "s:f", Limit: fw1s}},
		}},
		{name: "min-interval", integer: true, calls: [][]Request{
			parityOne("i:a", mi5), parityOne("i:b", mi1), parityOne("i:c", mi333),
			{{Key: "i:a", Limit: mi5}, {Key: "i:c", Limit: mi333}},
		}},
		{name: "concurrency", integer: true, calls: [][]Request{
			parityOne("c:a", c3), parityOne("c:b", c1), parityOne("c:c", c5),
			{{Key: "c:a", Limit: c3}, {Key: "c:c", Limit: c5}},
			{{Key: "c:b", Limit: c1}, {Key: "c:g", Limit: g10}, {Key: "c:f", Limit: fw1s}},
		}},
		{name: "distinct", integer: true, members: members, calls: [][]Request{
			parityOne("d:a", d3), parityOne("d:b", d2), parityOne("d:c", d5),
			{{Key: "d:a", Limit: d3}, {Key: "d:b", Limit: d2}},
		}},
		{name: "mixed", integer: true, members: members, calls: [][]Request{mixed, mixed[:3], mixed[3:]}},
		{name: "mixed-jitter", integer: true, jitter: true, members: members, calls: [][]Request{mixed, mixed[:3], mixed[3:]}},
		// One key, every algorithm: a key whose limit is reconfigured is
		// read, replaced or reinterpreted exactly as Redis does.
		{name: "reconfigured-key", ttl: true, members: members, calls: [][]Request{
			parityOne("x:k", g10), parityOne("x:k", g3), parityOne("x:k", g5m), parityOne("x:k", mi333), parityOne("x:k", mi5),
			{{Key: "x:k", Limit: g10}, {Key: "x:k", Limit: g7}},
			parityOne("x:k", fw1s), parityOne("x:k", fw1m), parityOne("x:k", swc1s), parityOne("x:k", swc1m),
			parityOne("x:k", log1s), parityOne("x:k", log1m), parityOne("x:k", c3), parityOne("x:k", c5), parityOne("x:k", d3), parityOne("x:k", d5),
		}},
	}
}

// parityBackend is the Redis side of a differential run.
type parityBackend struct {
	rdb redis.UniversalClient
	mr  *miniredis.Miniredis // TTLs follow the test clock; nil on redis-server
}

// TestLocalMatchesRedis runs every scenario on miniredis (TTLs on the test
// clock, so key lists are compared too) and on redis-server. Set
// SLUICE_PARITY_SEEDS to run more sequences per scenario.
func TestLocalMatchesRedis(t *testing.T) {
	scenarios := parityScenarios()
	seeds := 6
	if n, err := strconv.Atoi(os.Getenv("SLUICE_PARITY_SEEDS")); err == nil && n > 0 {
		seeds = n
	}
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		for _, sc := range scenarios {
			if sc.jitter {
				continue // miniredis TTLs cannot go back with the clock
			}
			t.Run(sc.name, func(t *testing.T) {
				t.Parallel()
				mr := miniredis.RunT(t)
				rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
				t.Cleanup(func() { _ = rdb.Close() })
				for seed := range seeds {
					runParity(t, parityBackend{rdb: rdb, mr: mr}, sc, uint64(seed), 150)
				}
			})
		}
	})
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.Start(t).Client(t)
		for _, sc := range scenarios {
			if sc.ttl {
				continue // Redis expiry runs on the server's clock
			}
			t.Run(sc.name, func(t *testing.T) {
				t.Parallel()
				for seed := range 2 * seeds {
					runParity(t, parityBackend{rdb: rdb}, sc, 1e6+uint64(seed), 300)
				}
			})
		}
	})
}

// runParity runs one random sequence of steps calls.
func runParity(t *testing.T, be parityBackend, sc parityScenario, seed uint64, steps int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x5171ce))
	ctx := context.Background()
	// A UTC midnight plus a random offset, so windows start anywhere.
	// Whole microseconds, the unit of decisions, so miniredis' TTLs move
	// exactly as the decisions' clock does.
	now := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC).Add(time.Duration(rng.Int64N(int64(48 * time.Hour)))).Truncate(time.Microsecond)
	clock := func() time.Time { return now }
	prefix := fmt.Sprintf("parity-%s-%d", sc.name, seed)
	rl := NewRedis(be.rdb, Options{Prefix: prefix, Clock: clock, ConcurrencyRetry: 250 * time.Millisecond,
		Events: EventOptions{Disabled: true}, OverrideRefresh: -1})
	ll := NewLocal(LocalOptions{Clock: clock, ConcurrencyRetry: 250 * time.Millisecond})

	type held struct{ redis, local []Lease }
	var leases []held
	var last Decision
	advance := func(d time.Duration) {
		if d < 0 && (!sc.jitter || be.mr != nil) {
			d = 0
		}
		d = d.Truncate(time.Microsecond)
		now = now.Add(d)
		if be.mr != nil && d > 0 {
			be.mr.FastForward(d)
		}
	}
	for step := range steps {
		advance(parityAdvance(rng, last, now, sc.jitter))
		where := fmt.Sprintf("%s seed %d step %d at %s", sc.name, seed, step, now.Format(time.RFC3339Nano))

		if len(leases) > 0 && rng.IntN(6) == 0 {
			i := rng.IntN(len(leases))
			if err := rl.Release(ctx, leases[i].redis); err != nil {
				// The key now holds another algorithm's state: Redis
				// answers WRONGTYPE, Local releases nothing (documented).
				require.True(t, sc.ttl, "%s: %v", where, err)
				require.ErrorContains(t, err, "WRONGTYPE", where)
			}
			require.NoError(t, ll.Release(ctx, leases[i].local), where)
			leases = slices.Delete(leases, i, i+1)
			continue
		}
		reqs := slices.Clone(sc.calls[rng.IntN(len(sc.calls))])
		for i := range reqs {
			if c := reqs[i].Limit.Capacity(); c > 1 && rng.IntN(3) == 0 {
				reqs[i].Cost = 1 + rng.Int64N(min(c, 12))
			}
			if len(sc.members) > 0 {
				reqs[i].Member = sc.members[rng.IntN(len(sc.members))]
			}
		}
		var rd, ld Decision
		var rerr, lerr error
		switch op := rng.IntN(10); {
		case op < 7:
			rd, rerr = rl.Consume(ctx, reqs...)
			ld, lerr = ll.Consume(ctx, reqs...)
		case op < 9:
			rd, rerr = rl.Check(ctx, reqs...)
			ld, lerr = ll.Check(ctx, reqs...)
		default:
			rd, rerr = rl.Status(ctx, reqs...)
			ld, lerr = ll.Status(ctx, reqs...)
		}
		require.NoError(t, rerr, where)
		require.NoError(t, lerr, where)
		requireSameParity(t, rd, ld, where, reqs)
		if len(rd.Leases) > 0 {
			leases = append(leases, held{rd.Leases, ld.Leases})
		}
		last = ld

		if be.mr != nil && step%25 == 24 {
			require.Equal(t, parityKeys(t, rl), parityKeys(t, ll), "%s: keys", where)
		}
	}
	if sc.integer && !sc.jitter {
		require.Zero(t, ll.fixups, "%s seed %d: whole-µs GCRA intervals never need the rate.Limiter re-anchored", sc.name, seed)
	}
	if be.mr != nil {
		require.Equal(t, parityKeys(t, rl), parityKeys(t, ll), "%s seed %d: keys at the end", sc.name, seed)
	}
}

// parityAdvance picks how far the clock moves: often exactly to a
// boundary the last decision reported (or 1µs either side of it).
func parityAdvance(rng *rand.Rand, last Decision, now time.Time, jitter bool) time.Duration {
	if jitter && rng.IntN(8) == 0 {
		return -time.Duration(rng.Int64N(int64(2*time.Millisecond))) - time.Microsecond
	}
	nudge := time.Duration(rng.IntN(3)-1) * time.Microsecond
	switch r := rng.IntN(20); {
	case r < 4:
		return 0
	case r < 6:
		return time.Microsecond
	case r < 9 && len(last.Limits) > 0:
		ld := last.Limits[rng.IntN(len(last.Limits))]
		return max(0, ld.RetryAfter+nudge)
	case r < 11 && len(last.Limits) > 0:
		ld := last.Limits[rng.IntN(len(last.Limits))]
		return max(0, ld.Reset.Sub(now)+nudge)
	case r < 12:
		return max(0, last.Wait+nudge)
	default:
		scales := []time.Duration{time.Microsecond, time.Millisecond, 50 * time.Millisecond, 400 * time.Millisecond,
			3 * time.Second, 20 * time.Second, 2 * time.Minute, time.Hour, 25 * time.Hour, 2000 * time.Hour, 20000 * time.Hour}
		return time.Duration(rng.Int64N(int64(scales[rng.IntN(len(scales))])))
	}
}

func requireSameParity(t *testing.T, rd, ld Decision, where string, reqs []Request) {
	t.Helper()
	leaseKeys := func(ls []Lease) []string {
		var ks []string
		for _, l := range ls {
			ks = append(ks, l.Key)
		}
		return ks
	}
	require.Equal(t, leaseKeys(rd.Leases), leaseKeys(ld.Leases), "%s: lease keys", where)
	rd.Leases, ld.Leases = nil, nil
	require.Equal(t, rd, ld, "%s: %+v", where, reqs)
}

func parityKeys(t *testing.T, l Limiter) []string {
	t.Helper()
	var all []string
	var cursor uint64
	for {
		keys, next, err := l.List(context.Background(), "", cursor, 7)
		require.NoError(t, err)
		all = append(all, keys...)
		if next == 0 {
			break
		}
		cursor = next
	}
	slices.Sort(all)
	return all
}
