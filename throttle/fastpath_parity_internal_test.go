package throttle

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testutil"
)

// TestFastPathDecidesAsTheGeneralOne runs the same campaigns against two
// Redis servers, reserving with fast_one (firm_fast.lua) on one and off on
// the other, and requires the same reply to every call and the same keys,
// values and lifetimes after every call: fast_one decides what reserve_one
// would, or leaves the send to it. The campaigns mix what sends it to
// reserve_one: tenants that take each other's places (yields), recipients
// with several sends (a pair holds the next back), a daily window that
// runs out, pauses set mid-campaign (one ended early), high-priority
// sends, sends that come back before their second and long after it, a
// number with two GCRA limits on one key (hash fields) and the algorithms
// whose commits take the call's id, a fast limit a send takes past the
// hold (it keeps a backlog entry), and pairs whose key holds another
// algorithm's state. It plans the same way, with plan_fast on one side
// and plan_one on the other, at the start and in the middle (sends with
// no task id, repeats, a pair and a number paused, two numbers and two
// tenants in one call, a sender slower than a send a second). It also
// requires that fast_one decided most firm sends and plan_fast planned
// most sends, and the general parts some: else it proves nothing.
func TestFastPathDecidesAsTheGeneralOne(t *testing.T) {
	ctx := context.Background()
	clock := testutil.NewClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	type side struct {
		rdb    *redis.Client
		l      *Redis
		fast   bool
		script map[int]*redis.Script
	}
	const hits, planHits = "test:fast-hits", "test:fast-hits:plan"
	mk := func(fast bool) *side {
		rdb := redistest.Start(t).Client(t)
		return &side{rdb: rdb, l: NewRedis(rdb, Options{Clock: clock.Now, OverrideRefresh: -1}), fast: fast, script: map[int]*redis.Script{}}
	}
	sides := []*side{mk(true), mk(false)}
	// scriptOf is reserveScriptFor's script for reqs, with fast_one on
	// (counting its sends in key hits) or off, and PLAN_CHECK on.
	scriptOf := func(s *side, reqs []Request) *redis.Script {
		set := reserveSet(reqs)
		if sc := s.script[set]; sc != nil {
			return sc
		}
		src := reserveSource(set)
		for _, e := range [][2]string{
			{"local PLAN_CHECK = false\n", "local PLAN_CHECK = true\n"},
			{"local FAST_PATH = true\n", fmt.Sprintf("local FAST_PATH = %v\n", s.fast)},
			{"local FAST_COUNT = false\n", fmt.Sprintf("local FAST_COUNT = %q\n", hits)},
		} {
			if !strings.Contains(src, e[0]) {
				t.Fatalf("reserve script: line %q is gone", e[0])
			}
			src = strings.Replace(src, e[0], e[1], 1)
		}
		sc := redis.NewScript(src)
		s.script[set] = sc
		return sc
	}

	rng := rand.New(rand.NewPCG(22, 29))
	number := func(n int) string { return fmt.Sprintf("1065403%08d", 10000+n) }
	reqsOf := func(n, to int) []Request {
		num, rcpt := number(n), fmt.Sprintf("+1202555%04d", to)
		reqs := []Request{
			{Key: "whatsapp:number:" + num, Limit: Limit{Name: "throughput", Algorithm: GCRA, Rate: PerSecond(20), Burst: 1}},
			{Key: "whatsapp:pair:" + num + ":" + rcpt, Limit: Limit{Name: "pair", Algorithm: GCRA, Rate: Rate{Limit: 1, Period: 6 * time.Second}, Burst: 1}},
			{Key: "whatsapp:daily:" + rcpt, Limit: Limit{Name: "daily", Algorithm: FixedWindow, Rate: PerDay(4)}},
			PauseRequest("whatsapp:paused:account"),
			PauseRequest("whatsapp:paused:pair:" + num + ":" + rcpt), PauseRequest("whatsapp:paused:sender:" + num),
		}
		switch {
		case n == 1 && to%5 == 0:
			// a fast limit that a send takes past the hold (cost × T > 2 s):
			// it keeps a backlog entry, as a fast limit does
			reqs = append(reqs, Request{Key: "whatsapp:bulk:" + num, Cost: 40, Limit: Limit{Name: "bulk", Algorithm: GCRA, Rate: PerSecond(20), Burst: 40}})
		case n == 2:
			// two GCRA limits on one key (hash fields), and the algorithms
			// whose commits take the call's id
			reqs = append(reqs,
				Request{Key: "whatsapp:number:" + num, Limit: Limit{Name: "minute", Algorithm: GCRA, Rate: PerMinute(900), Burst: 3}},
				Request{Key: "whatsapp:log:" + num, Cost: 2, Limit: Limit{Name: "log", Algorithm: SlidingWindowLog, Rate: PerSecond(60)}},
				Request{Key: "whatsapp:inflight:" + num, Limit: Limit{Name: "inflight", Algorithm: Concurrency, Max: 5000}},
				Request{Key: "whatsapp:recipients:" + num, Member: rcpt, Limit: Limit{Name: "recipients", Algorithm: Distinct, Rate: PerHour(1000)}})
		}
		return reqs
	}
	hold, headroom, err := reserveParams(ReserveOptions{Headroom: 0.02})
	if err != nil {
		t.Fatal(err)
	}
	// compare fails where the two sides' keys differ (after every call:
	// the counts of a second that has passed are swept, so a count one
	// side got wrong could be gone by the end).
	compare := func(what string) {
		t.Helper()
		a := keyspace(t, sides[0].rdb)
		delete(a, hits)
		delete(a, planHits)
		sameKeyspace(t, what, a, keyspace(t, sides[1].rdb))
	}
	// both runs one script call on both sides and requires the same reply
	// and the same keys after it; it returns the reply.
	both := func(what string, reqs []Request, ra *reserveArgs) []int64 {
		t.Helper()
		var raws [][]int64
		for _, sd := range sides {
			raw, err := runInts(ctx, sd.rdb, scriptOf(sd, reqs), ra.keys, ra.argv())
			if err != nil {
				t.Fatalf("%s (fast %v): %v", what, sd.fast, err)
			}
			raws = append(raws, raw)
		}
		if !slices.Equal(raws[0], raws[1]) {
			t.Fatalf("%s at %v: the replies differ\nfast:    %v\ngeneral: %v", what, clock.Now(), raws[0], raws[1])
		}
		compare("after " + what)
		return raws[0]
	}
	// plan plans batch on both sides, through plan_fast on one side and
	// plan_one on the other, with the arguments Plan gives a call (each
	// send's GCRA limits and pauses; the test's batches are of one scope
	// and under 256 sends, so one call each), and requires the same
	// replies and keys; it returns each send's planned instant and
	// whether it was new.
	plans, planned := 0, 0
	plan := func(batch []Send) ([]time.Time, []bool) {
		t.Helper()
		out, isNew := make([]time.Time, len(batch)), make([]bool, len(batch))
		for lo := 0; lo < len(batch); lo += 256 {
			part := batch[lo:min(lo+256, len(batch))]
			ra := sides[0].l.newReserveArgs("plan", hold, headroom, len(part))
			var all []Request
			for _, s := range part {
				paced, fields, err := sides[0].l.pacedRequests(ctx, s.Requests, true)
				if err != nil {
					t.Fatal(err)
				}
				ra.send(s.TaskID, Bulk, false, "", s.Tenant, s.Weight, paced, fields)
				all = append(all, paced...)
			}
			plans++
			planned += len(part)
			raw := both(fmt.Sprintf("plan %d", plans), all, ra)
			for k := range part {
				out[lo+k], isNew[lo+k] = time.UnixMicro(raw[1+2*k]), raw[2+2*k] == 1
			}
		}
		return out, isNew
	}
	type item = parityItem
	var due dueHeap
	// planDue plans batch and puts its sends with a task id on the heap
	// (the first repeats sends hold places and are on it already: they
	// must keep them; one without an id takes room and never comes back).
	planDue := func(batch []Send, repeats int) {
		t.Helper()
		at, isNew := plan(batch)
		for i := range batch {
			if i < repeats {
				if isNew[i] {
					t.Fatalf("repeat %s was planned anew", batch[i].TaskID)
				}
				continue
			}
			if batch[i].TaskID != "" {
				heap.Push(&due, &item{s: batch[i], at: at[i]})
			}
		}
	}
	// Three numbers, 120 sends each over 40 recipients a number; number 0
	// has two tenants (weights 1 and 3), the second planned after the
	// first so that it takes places from it.
	recipients := []int{400, 40, 40}
	for n := range 3 {
		var first, second []Send
		for i := range 120 {
			s := Send{TaskID: fmt.Sprintf("t-%d-%d", n, i), Tenant: fmt.Sprintf("c%d", n), Requests: reqsOf(n, 1000*n+rng.IntN(recipients[n]))}
			if n == 0 && i%2 == 1 {
				s.Tenant, s.Weight = "c0b", 3
				second = append(second, s)
				continue
			}
			first = append(first, s)
		}
		for _, batch := range [][]Send{first, second} {
			if len(batch) > 0 {
				planDue(batch, 0)
			}
		}
	}
	// A sender paced slower than a send a second and faster than the
	// hold (an SMS long code's 1/s): no fast limit, a backlog entry.
	sms := func(i int) Send {
		return Send{TaskID: fmt.Sprintf("s-%d", i), Requests: []Request{
			{Key: "sms:sender:+12025550100", Limit: Limit{Name: "sender", Algorithm: GCRA, Rate: PerSecond(1), Burst: 1}},
			PauseRequest("sms:paused:sender:+12025550100"),
		}}
	}
	var slow []Send
	for i := range 12 {
		slow = append(slow, sms(i))
	}
	planDue(slow, 0)
	// Some pairs' keys hold another algorithm's state (a fixed window's
	// hash: the limit was reconfigured since).
	for to := 1000; to < 1040; to += 4 {
		for _, sd := range sides {
			key := sd.l.Key("whatsapp:pair:" + number(1) + ":" + fmt.Sprintf("+1202555%04d", to))
			if err := sd.rdb.HSet(ctx, key, "w", 1, "c", 1).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// High-priority sends, never planned, due from the start; and bulk
	// sends never planned (enqueued by a plain asynq client), spread over
	// the first seconds: they hold no place, so fast_one leaves them.
	for i := range 20 {
		heap.Push(&due, &item{s: Send{TaskID: fmt.Sprintf("h-%d", i), Requests: reqsOf(i%3, 1000*(i%3)+500+i)}, high: true, at: clock.Now()})
		heap.Push(&due, &item{s: Send{TaskID: fmt.Sprintf("u-%d", i), Tenant: fmt.Sprintf("c%d", i%3), Requests: reqsOf(i%3, 1000*(i%3)+600+i)},
			at: clock.Now().Add(time.Duration(i) * 150 * time.Millisecond)})
	}
	start := clock.Now()
	firm, again, calls, still := 0, 0, 0, 0
	for due.Len() > 0 && calls < 5000 {
		calls++
		var part []*item
		for k := 1 + rng.IntN(14); k > 0 && due.Len() > 0; k-- {
			part = append(part, heap.Pop(&due).(*item))
		}
		// The clock: usually the part's middle send's instant (some of
		// the part come back early, some late); now and then far past it
		// (beyond the hold: planned again), or still for a few calls, so
		// that sends come back seconds early and a number's firm book
		// runs past the hold.
		at := part[len(part)/2].at
		switch r := rng.IntN(40); {
		case r == 0:
			at = at.Add(4 * time.Second)
		case r == 1:
			still = 8
		}
		if still > 0 {
			still--
		} else if at.After(clock.Now()) {
			clock.Set(at)
		}
		for _, sd := range sides {
			// a provider pauses a pair and, later, a number, whose pause
			// an operator ends early; both sides alike
			var err error
			switch calls {
			case 10:
				_, err = sd.l.Pause(ctx, "whatsapp:paused:pair:"+number(1)+":+12025551003", PauseOptions{Wait: 3 * time.Second, Code: 131056})
			case 20:
				_, err = sd.l.Pause(ctx, "whatsapp:paused:sender:"+number(0), PauseOptions{Wait: 30 * time.Second, Code: 131048})
			case 24:
				_, err = sd.l.Resume(ctx, "whatsapp:paused:sender:"+number(0))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		// Plans in the middle of the campaign: sends with no task id,
		// repeats of sends that hold places, a pair paused (call 10) and
		// pairs whose keys hold another algorithm's state (number 1, call
		// 12); a number paused (calls 20 to 24), both tenants (number 0,
		// call 22); the slow sender again (call 30).
		switch calls {
		case 12:
			var batch []Send // (two repeats: sends of number 1 that hold places)
			for _, it := range due {
				if len(batch) < 2 && !it.high && strings.HasPrefix(it.s.TaskID, "t-1-") {
					batch = append(batch, it.s)
				}
			}
			if len(batch) != 2 {
				t.Fatalf("call %d: %d sends of number 1 hold places, want 2", calls, len(batch))
			}
			for i := range 30 {
				s := Send{TaskID: fmt.Sprintf("m-1-%d", i), Tenant: "c1", Requests: reqsOf(1, 1000+(i*3)%40)}
				if i%10 == 9 {
					s.TaskID = ""
				}
				batch = append(batch, s)
			}
			planDue(batch, 2)
		case 22:
			var batch []Send
			for i := range 20 {
				s := Send{TaskID: fmt.Sprintf("m-0-%d", i), Tenant: "c0", Requests: reqsOf(0, rng.IntN(400))}
				if i%2 == 1 {
					s.Tenant, s.Weight = "c0b", 3
				}
				batch = append(batch, s)
			}
			planDue(batch, 0)
		case 30:
			var batch []Send
			for i := range 6 {
				batch = append(batch, sms(100+i))
			}
			planDue(batch, 0)
		case 5, 40, 60:
			// one call for two numbers and two tenants, in turns (an API
			// batch: Plan groups sends by scope, not by number), and
			// sends with a pair's limit alone (slower than the hold with
			// no fast limit: not listless, a backlog entry; a reused limit
			// table that was a number's the send before)
			var batch []Send
			for i := range 24 {
				n, tenant, w := 0, "c0", 0.0
				switch i % 4 {
				case 1:
					n = 2
				case 2:
					tenant, w = "c0b", 3
				case 3:
					n, tenant = 2, "c0b"
				}
				batch = append(batch, Send{TaskID: fmt.Sprintf("m-%d-%d-%d", n, calls, i), Tenant: tenant, Weight: w, Requests: reqsOf(n, 1000*n+rng.IntN(recipients[n]))})
			}
			for i := range 6 {
				batch = append(batch, Send{TaskID: fmt.Sprintf("m-p-%d-%d", calls, i), Tenant: "c0", Requests: reqsOf(0, rng.IntN(recipients[0]))[1:2]})
			}
			planDue(batch, 0)
		}
		sends := make([]callSend, len(part))
		for k, it := range part {
			sends[k] = callSend{Send: it.s, high: it.high, callID: "c" + it.s.TaskID}
		}
		ra, reqs, rcs := reserveCallOf(t, sides[0].l, hold, headroom, sends)
		raw := both(fmt.Sprintf("call %d", calls), reqs, ra)
		pos := 1
		for k, c := range rcs {
			res := sides[0].l.batcher().decodeOne(raw, &pos, c)
			if res.err != nil {
				t.Fatal(res.err)
			}
			if res.r.Firm {
				firm++
				continue
			}
			again++
			next := res.r.At
			if !next.After(clock.Now()) {
				next = clock.Now().Add(time.Millisecond)
			}
			part[k].at = next
			heap.Push(&due, part[k])
		}
	}
	if due.Len() > 0 {
		t.Fatalf("%d sends still not firm after %d calls", due.Len(), calls)
	}
	fastHits, err := sides[0].rdb.Get(ctx, hits).Int()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d calls over %v, %d sends firm, %d of them by fast_one, %d told to come back", calls, clock.Now().Sub(start), firm, fastHits, again)
	if fastHits < firm/2 || fastHits >= firm {
		t.Fatalf("fast_one decided %d of %d firm sends: want at least half and not all, or the comparison proves little", fastHits, firm)
	}
	if n, _ := sides[1].rdb.Exists(ctx, hits).Result(); n != 0 {
		t.Fatal("fast_one ran with FAST_PATH off")
	}
	planFast, err := sides[0].rdb.Get(ctx, planHits).Int()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d plan calls, %d sends planned, %d of them by plan_fast", plans, planned, planFast)
	if planFast < planned/2 || planFast >= planned {
		t.Fatalf("plan_fast planned %d of %d sends: want at least half and not all", planFast, planned)
	}
	if n, _ := sides[1].rdb.Exists(ctx, planHits).Result(); n != 0 {
		t.Fatal("plan_fast ran with FAST_PATH off")
	}
	sides[0].rdb.Del(ctx, hits, planHits)
	if a := keyspace(t, sides[0].rdb); len(a) == 0 {
		t.Fatal("no keys")
	} else {
		sameKeyspace(t, "at the end", a, keyspace(t, sides[1].rdb))
	}
}

// keyed is a key's value, rendered, and its TTL (-1: none).
type keyed struct {
	value string
	ttl   time.Duration
}

// keyspace reads every key of rdb but the streams (the events Pause adds,
// stamped by Redis' clock): strings, hashes and sorted sets.
func keyspace(t *testing.T, rdb *redis.Client) map[string]keyed {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	types := make([]*redis.StatusCmd, len(keys))
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			types[i] = p.Type(ctx, k)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	values := make([]redis.Cmder, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			switch typ := types[i].Val(); typ {
			case "string":
				values[i] = p.Get(ctx, k)
			case "hash":
				values[i] = p.HGetAll(ctx, k)
			case "zset":
				values[i] = p.ZRangeWithScores(ctx, k, 0, -1)
			case "stream":
				continue
			default:
				return fmt.Errorf("key %s: type %s", k, typ)
			}
			ttls[i] = p.PTTL(ctx, k)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	out := map[string]keyed{}
	for i, k := range keys {
		var v string
		switch c := values[i].(type) {
		case nil:
			continue
		case *redis.StringCmd:
			v = c.Val()
		case *redis.MapStringStringCmd:
			v = fmt.Sprint(c.Val()) // (fmt sorts a map's keys)
		case *redis.ZSliceCmd:
			v = fmt.Sprint(c.Val())
		}
		out[k] = keyed{v, ttls[i].Val()}
	}
	return out
}

// sameKeyspace fails t where a and b differ: a key only in one, another
// value, or lifetimes more than 2 s apart (each counted by Redis' own
// clock from when the key was written; the two sides' writes are
// milliseconds apart).
func sameKeyspace(t *testing.T, what string, a, b map[string]keyed) {
	t.Helper()
	for k, va := range a {
		vb, ok := b[k]
		switch {
		case !ok:
			t.Fatalf("%s: key %s: only with fast_one", what, k)
		case va.value != vb.value:
			t.Fatalf("%s: key %s:\nfast:    %s\ngeneral: %s", what, k, va.value, vb.value)
		case (va.ttl < 0) != (vb.ttl < 0) || (va.ttl-vb.ttl).Abs() > 2*time.Second:
			t.Fatalf("%s: key %s: TTL %v with fast_one, %v without", what, k, va.ttl, vb.ttl)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			t.Fatalf("%s: key %s: only without fast_one", what, k)
		}
	}
}

// parityItem is a send of TestFastPathDecidesAsTheGeneralOne and the
// instant it comes back.
type parityItem struct {
	s    Send
	high bool
	at   time.Time
}

// dueHeap orders sends by the instant they come back (container/heap).
type dueHeap []*parityItem

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(*parityItem)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
