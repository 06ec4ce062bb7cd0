package throttle_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/throttle"
)

// BenchmarkConsume measures decisions/s for WhatsApp's three limits in one
// atomic call, from 64 concurrent callers against one redis-server.
func BenchmarkConsume(b *testing.B) {
	srv := redistest.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
	b.Cleanup(func() { _ = rdb.Close() })
	l := throttle.NewRedis(rdb, throttle.Options{Prefix: "bench"})
	number := throttle.Limit{Name: "throughput", Algorithm: throttle.FixedWindow, Rate: throttle.PerSecond(1 << 40)}
	pair := throttle.Limit{Name: "pair", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1 << 30), Burst: 1 << 20}
	daily := throttle.Limit{Name: "daily", Algorithm: throttle.FixedWindow, Rate: throttle.PerDay(1 << 40)}
	ctx := context.Background()
	b.SetParallelism(32) // 2 cores × 32 = 64 callers
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			to := fmt.Sprintf("+1202555%04d", i%1000)
			i++
			d, err := l.Consume(ctx,
				throttle.Request{Key: "whatsapp:number:106540352242922", Limit: number},
				throttle.Request{Key: "whatsapp:pair:106540352242922:" + to, Limit: pair},
				throttle.Request{Key: "whatsapp:daily:" + to, Limit: daily})
			if err != nil || !d.Allowed {
				b.Fatalf("%+v %v", d, err)
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	// Redis CPU per decision, from INFO commandstats: the script's own cost.
	if st, err := rdb.Info(ctx, "commandstats").Result(); err == nil {
		for _, line := range strings.Split(st, "\r\n") {
			if v, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
				for _, f := range strings.Split(v, ",") {
					if us, ok := strings.CutPrefix(f, "usec_per_call="); ok {
						x, _ := strconv.ParseFloat(us, 64)
						b.ReportMetric(x, "redis_µs/decision")
					}
				}
			}
		}
	}
}
