package throttle

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testutil"
)

// BenchmarkCampaignScripts runs the two scripts of paced campaigns the way
// make bench-scale drives them, without asynq, workers or provider: 30
// WhatsApp numbers x 300 sends planned at enqueue (Plan, one campaign and
// tenant per number), then reserved at their planned instants in the order
// they come due, 14 sends a call (coalesced as the worker's calls are), on
// the limiter's clock. A send carries the number's 80/s, the pair's 1 per
// 6 s, the recipient's daily window and four pauses (account, channel,
// number, pair), as a WhatsApp channel's. It reports Redis' µs of script
// time a send of each step (INFO commandstats: wall-clock inside Redis,
// which a busy host inflates) and, under make bench-scripts (Redis run by
// callgrind, SLUICE_CALLGRIND_OUT set), the instructions Redis ran inside
// scripts a send: the same on a busy host as on an idle one, so one
// change's effect shows. A call runs the campaigns once, however large
// b.N (make bench asks every throttle benchmark for 60,000 iterations, and
// calls it with 1 first, so it runs twice there): the figures are per
// send, and one run is 9,000 sends.
func BenchmarkCampaignScripts(b *testing.B) {
	const numbers, perNumber, perCall = 30, 300, 14
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	clock := testutil.NewClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	l := NewRedis(rdb, Options{Clock: clock.Now, OverrideRefresh: -1})
	ctx := context.Background()
	opts := ReserveOptions{Headroom: 0.043}
	type due struct {
		s  Send
		at time.Time
	}
	var all []due
	u0 := scriptUsec(b, rdb)
	for n := range numbers {
		number := fmt.Sprintf("1065403%08d", 10000+n)
		sends := make([]Send, perNumber)
		for i := range sends {
			sends[i] = Send{TaskID: fmt.Sprintf("t-%d-%d", n, i), Tenant: "campaign-" + strconv.Itoa(n),
				Requests: campaignRequests(number, fmt.Sprintf("+1202555%04d", i))}
		}
		planned, err := l.Plan(ctx, opts, sends)
		if err != nil {
			b.Fatal(err)
		}
		for i, p := range planned {
			all = append(all, due{sends[i], p.At})
		}
	}
	u1 := scriptUsec(b, rdb)
	planIr := srv.CallgrindDump(b)
	slices.SortStableFunc(all, func(x, y due) int { return x.at.Compare(y.at) })
	hold, headroom, err := reserveParams(opts)
	if err != nil {
		b.Fatal(err)
	}
	firm := 0
	for lo := 0; lo < len(all); lo += perCall {
		part := all[lo:min(lo+perCall, len(all))]
		if last := part[len(part)-1].at; last.After(clock.Now()) {
			clock.Set(last)
		}
		sends := make([]callSend, len(part))
		for k, d := range part {
			sends[k] = callSend{Send: d.s}
		}
		ra, reqs, calls := reserveCallOf(b, l, hold, headroom, sends)
		raw, err := runInts(ctx, l.rdb, reserveScriptFor(reqs), ra.keys, ra.argv())
		if err != nil {
			b.Fatal(err)
		}
		pos := 1
		for _, c := range calls {
			res := l.batcher().decodeOne(raw, &pos, c)
			if res.err != nil {
				b.Fatal(res.err)
			}
			if res.r.Firm {
				firm++
			}
		}
	}
	u2 := scriptUsec(b, rdb)
	reserveIr := srv.CallgrindDump(b)
	sends := float64(len(all))
	b.ReportMetric((u1-u0)/sends, "plan-µs/send")
	b.ReportMetric((u2-u1)/sends, "reserve-µs/send")
	b.ReportMetric(float64(firm)/sends, "firm/send")
	if planIr > 0 {
		b.ReportMetric(float64(planIr)/sends, "plan-instr/send")
		b.ReportMetric(float64(reserveIr)/sends, "reserve-instr/send")
	}
}

// callSend is a send of one reserve script call (reserveCallOf): high
// priority or bulk, and the call id that names its leases and log entries.
type callSend struct {
	Send
	high   bool
	callID string
}

// reserveCallOf builds one reserve script call for sends, in order, as the
// worker's coalesced calls carry them: its arguments, every send's
// requests, and each send's reserveCall for decodeOne.
func reserveCallOf(tb testing.TB, l *Redis, hold time.Duration, headroom float64, sends []callSend) (*reserveArgs, []Request, []*reserveCall) {
	tb.Helper()
	ra := l.newReserveArgs("reserve", hold, headroom, len(sends))
	var reqs []Request
	calls := make([]*reserveCall, len(sends))
	for k, s := range sends {
		fields, err := validate(s.Requests)
		if err != nil {
			tb.Fatal(err)
		}
		prio := Bulk
		if s.high {
			prio = High
		}
		ra.send(s.TaskID, prio, false, s.callID, s.Tenant, s.Weight, s.Requests, fields)
		reqs = append(reqs, s.Requests...)
		calls[k] = &reserveCall{opts: ReserveOptions{TaskID: s.TaskID}, reqs: s.Requests}
	}
	return ra, reqs, calls
}

// campaignRequests are a WhatsApp send's limits as the worker asks for
// them (worker.Pacing with the default channel's rules and pause scopes).
func campaignRequests(number, to string) []Request {
	return []Request{
		{Key: "whatsapp:number:" + number, Limit: Limit{Name: "throughput", Algorithm: GCRA, Rate: PerSecond(80), Burst: 1}},
		{Key: "whatsapp:pair:" + number + ":" + to, Limit: Limit{Name: "pair", Algorithm: GCRA, Rate: Rate{Limit: 1, Period: 6 * time.Second}, Burst: 1}},
		{Key: "whatsapp:daily:" + to, Limit: Limit{Name: "daily", Algorithm: FixedWindow, Rate: PerDay(250)}},
		PauseRequest("whatsapp:paused:account"), PauseRequest("whatsapp:paused:channel"),
		PauseRequest("whatsapp:paused:pair:" + number + ":" + to), PauseRequest("whatsapp:paused:sender:" + number),
	}
}

// ScriptUsec is scriptUsec for the package's external benchmarks
// (BenchmarkPlannedSend).
var ScriptUsec = scriptUsec

// scriptUsec is INFO commandstats' total µs of EVALSHA and EVAL so far.
func scriptUsec(b *testing.B, rdb *redis.Client) float64 {
	b.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	return redistest.ScriptUsec(info)
}
