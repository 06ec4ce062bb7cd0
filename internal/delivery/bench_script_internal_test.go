package delivery

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/redistest"
)

// BenchmarkRecordScripts records the sends of make bench-scale's campaigns
// the way its workers do: 30 WhatsApp numbers x 300 sends, one campaign and
// tenant per number, each accepted with a wamid, in the order the numbers'
// paced sends interleave, 4 sends a record call (the calls per send the
// bench logs: 0.24). It reports Redis' µs of script time a record (INFO
// commandstats: wall-clock inside Redis) and, under make bench-scripts
// (Redis under callgrind), the instructions Redis ran inside the script a
// record: the same on a busy host as on an idle one. A call records the
// campaigns once, however large b.N.
func BenchmarkRecordScripts(b *testing.B) {
	const numbers, perNumber, perCall = 30, 300, 4
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	s, err := New(Options{Redis: rdb, Prefix: "sluice"})
	if err != nil {
		b.Fatal(err)
	}
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	var calls []*sentCall
	for i := range perNumber {
		for n := range numbers {
			c, err := s.sentCallOf(Sent{TaskID: fmt.Sprintf("%032x-%d-%d", n, n, i), Queue: "whatsapp", Channel: "whatsapp",
				Tenant: fmt.Sprintf("campaign-%d", n), Campaign: fmt.Sprintf("campaign-%d", n),
				ProviderID: fmt.Sprintf("wamid.HBgLMTY1MDM4Nzk0MzkVAgARGBI%08d%04dA", n, i), Status: "sent", At: at.Add(time.Duration(i) * 12500 * time.Microsecond)})
			if err != nil {
				b.Fatal(err)
			}
			calls = append(calls, c)
		}
	}
	srv.CallgrindDump(b)
	u0 := scriptUsec(b, rdb)
	for lo := 0; lo < len(calls); lo += perCall {
		part := calls[lo:min(lo+perCall, len(calls))]
		s.sent.exec(part)
		for _, c := range part {
			if err := <-c.done; err != nil {
				b.Fatal(err)
			}
		}
	}
	u1 := scriptUsec(b, rdb)
	ir := srv.CallgrindDump(b)
	sends := float64(len(calls))
	b.ReportMetric((u1-u0)/sends, "record-µs/send")
	if ir > 0 {
		b.ReportMetric(float64(ir)/sends, "record-instr/send")
	}
}

// scriptUsec is INFO commandstats' total µs of EVALSHA and EVAL so far.
func scriptUsec(b *testing.B, rdb *redis.Client) float64 {
	b.Helper()
	cmds, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	return redistest.ScriptUsec(cmds)
}
