package throttle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testutil"
	"github.com/sluice-dev/sluice/throttle"
)

// whatsAppSendRequests are the limits of one WhatsApp send as the worker
// asks for them (worker.Pacing and its pause scopes): the number's 80/s,
// the pair's 1 per 6 s, the recipient's daily window and the four pauses
// that may hold the send (account, channel, number, pair).
func whatsAppSendRequests(number, to string) []throttle.Request {
	return []throttle.Request{
		{Key: "whatsapp:number:" + number, Limit: mps80},
		{Key: "whatsapp:pair:" + number + ":" + to, Limit: pair6},
		{Key: "whatsapp:daily:" + to, Limit: throttle.Limit{Name: "daily", Algorithm: throttle.FixedWindow, Rate: throttle.PerDay(250)}},
		throttle.PauseRequest("whatsapp:paused:account"),
		throttle.PauseRequest("whatsapp:paused:channel"),
		throttle.PauseRequest("whatsapp:paused:pair:" + number + ":" + to),
		throttle.PauseRequest("whatsapp:paused:sender:" + number),
	}
}

// BenchmarkPlannedSend measures the Redis work of a campaign's paced send
// as Sluice does it: Plan at enqueue (batches of 256, one scope), then, at
// each send's planned instant, the worker's Reserve, one call a send. It
// reports Redis µs of script execution per send for each step
// (plan-µs/send, reserve-µs/send), on the limiter's clock set by the test.
func BenchmarkPlannedSend(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	clock := testutil.NewClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	l := throttle.NewRedis(rdb, throttle.Options{Clock: clock.Now, OverrideRefresh: -1})
	ctx := context.Background()
	n := b.N
	sends := make([]throttle.Send, n)
	for i := range sends {
		sends[i] = throttle.Send{TaskID: fmt.Sprint("task-", i), Tenant: "campaign-1",
			Requests: whatsAppSendRequests("106540352242922", fmt.Sprintf("+1202555%04d", i))}
	}
	opts := throttle.ReserveOptions{Headroom: 0.015}
	b.ResetTimer()
	u0 := throttle.ScriptUsec(b, rdb)
	planned, err := l.Plan(ctx, opts, sends)
	if err != nil {
		b.Fatal(err)
	}
	u1 := throttle.ScriptUsec(b, rdb)
	firm := 0
	for i, p := range planned {
		if p.At.After(clock.Now()) {
			clock.Set(p.At)
		}
		o := opts
		o.TaskID, o.Tenant = sends[i].TaskID, sends[i].Tenant
		r, err := l.Reserve(ctx, o, sends[i].Requests...)
		if err != nil {
			b.Fatal(err)
		}
		if r.Firm {
			firm++
			if r.At.After(clock.Now()) {
				clock.Set(r.At)
			}
		}
	}
	u2 := throttle.ScriptUsec(b, rdb)
	b.StopTimer()
	b.ReportMetric((u1-u0)/float64(n), "plan-µs/send")
	b.ReportMetric((u2-u1)/float64(n), "reserve-µs/send")
	b.ReportMetric(float64(firm)/float64(n), "firm/send")
}
