package delivery_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/delivery"
	"github.com/sluice-dev/sluice/internal/redistest"
)

// BenchmarkRecordSent is the worker's cost per accepted send, one call at
// a time on a local redis-server (each its own script call); it reports
// Redis's CPU per record (INFO used_cpu_sys + used_cpu_user).
func BenchmarkRecordSent(b *testing.B) {
	s, rdb := benchStore(b)
	ctx := context.Background()
	at := time.Now()
	cpu0 := redisCPU(b, rdb)
	b.ResetTimer()
	for i := range b.N {
		id := strconv.Itoa(i)
		if err := s.RecordSent(ctx, delivery.Sent{TaskID: "t" + id, Queue: "sms", Channel: "sms", Tenant: "acme", Campaign: "campaign",
			ProviderID: "SM" + id, Status: "sent", At: at}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric((redisCPU(b, rdb)-cpu0).Seconds()*1e6/float64(b.N), "redis-cpu-µs/record")
}

// BenchmarkRecordSentConcurrently is the same with 64 callers at once, as
// a busy worker makes them: the calls that arrive while one is in flight
// share the next script call (sent_batch.go).
func BenchmarkRecordSentConcurrently(b *testing.B) {
	s, rdb := benchStore(b)
	ctx := context.Background()
	at := time.Now()
	var next atomic.Int64
	cpu0 := redisCPU(b, rdb)
	b.ResetTimer()
	b.SetParallelism(32) // 64 callers on 2 cores
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := strconv.FormatInt(next.Add(1), 10)
			if err := s.RecordSent(ctx, delivery.Sent{TaskID: "t" + id, Queue: "sms", Channel: "sms", Tenant: "acme", Campaign: "campaign",
				ProviderID: "SM" + id, Status: "sent", At: at}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric((redisCPU(b, rdb)-cpu0).Seconds()*1e6/float64(b.N), "redis-cpu-µs/record")
}

// benchStore is a store on a redis-server of the benchmark's own.
func benchStore(b *testing.B) (*delivery.Store, *redis.Client) {
	b.Helper()
	rdb := redistest.Start(b).Client(b)
	s, err := delivery.New(delivery.Options{Redis: rdb, Prefix: "bench"})
	require.NoError(b, err)
	return s, rdb
}

// redisCPU is the server's used_cpu_sys + used_cpu_user so far.
func redisCPU(b *testing.B, rdb *redis.Client) time.Duration {
	b.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	require.NoError(b, err)
	var total float64
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(b, err)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// BenchmarkUpdate is a callback's cost: two round trips.
func BenchmarkUpdate(b *testing.B) {
	s, err := delivery.New(delivery.Options{Redis: redistest.Start(b).Client(b), Prefix: "bench"})
	require.NoError(b, err)
	ctx := context.Background()
	at := time.Now()
	for i := range 1000 {
		id := strconv.Itoa(i)
		require.NoError(b, s.RecordSent(ctx, delivery.Sent{TaskID: "t" + id, Queue: "sms", Channel: "sms", Tenant: "acme", Campaign: "campaign", ProviderID: "SM" + id, Status: "sent", At: at}))
	}
	b.ResetTimer()
	for i := range b.N {
		if _, err := s.Update(ctx, "sms", "SM"+strconv.Itoa(i%1000), delivery.Status{State: delivery.StateDelivered, At: at}); err != nil {
			b.Fatal(err)
		}
	}
}
