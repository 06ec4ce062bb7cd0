package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testutil"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

// BenchmarkThrottleMiddleware measures tasks/s through Sluice's throttle
// middleware (paced by reservation), with WhatsApp's three default limits
// (GCRA throughput and pair, fixed-window daily) set so high they never
// block, next to a plain asynq server with a no-op handler, in the same run
// against the same redis-server, and reports their ratio. Such limits
// prefetch (throttle.Options.PrefetchSpan): one Reserve round trip serves
// up to 1+MaxPrefetch sends of a recipient. The same middleware with
// prefetching off (one round trip per task) is reported beside it
// (ratio_round_trip). b.N tasks go through each server per round; rounds
// alternate plain, throttled, throttled without prefetch, three times, and
// the medians are reported. Run with `make bench`.
func BenchmarkThrottleMiddleware(b *testing.B) {
	srv := redistest.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 100})
	b.Cleanup(func() { _ = rdb.Close() })
	client := asynq.NewClientFromRedisClient(rdb)
	lim := throttle.NewRedis(rdb, throttle.Options{Prefix: "bench"})
	never := []rules.Rule{
		{Key: "whatsapp:number:{phone_number_id}", Limit: throttle.Limit{Name: "throughput", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1 << 30), Burst: 1 << 20}},
		{Key: "whatsapp:pair:{phone_number_id}:{to}", Limit: throttle.Limit{Name: "pair", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1 << 30), Burst: 1 << 20}},
		{Key: "whatsapp:daily:{to}", Limit: throttle.Limit{Name: "daily", Algorithm: throttle.FixedWindow, Rate: throttle.PerDay(1 << 40)}},
	}
	var done atomic.Int64
	target := make(chan struct{}, 1)
	count := func() {
		if done.Add(1) == int64(b.N) {
			target <- struct{}{}
		}
	}
	ch := worker.Channel{Name: "whatsapp", TaskType: tasks.TypeWhatsAppSend, Rules: never,
		Prepare: func(p []byte) (worker.Prepared, error) {
			m, err := tasks.DecodeWhatsAppSend(p)
			if err != nil {
				return worker.Prepared{}, err
			}
			return worker.Prepared{Fields: m.Fields(), Send: func(context.Context) (channels.Response, error) {
				count()
				return channels.Response{Status: 200}, nil
			}}, nil
		}}
	w, err := worker.New(worker.Options{Redis: rdb, Limiter: lim, Channels: []worker.Channel{ch}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	noPrefetch := throttle.NewRedis(rdb, throttle.Options{Prefix: "bench", PrefetchSpan: -1})
	wrt, err := worker.New(worker.Options{Redis: rdb, Limiter: noPrefetch, Channels: []worker.Channel{ch}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	plain := asynq.HandlerFunc(func(context.Context, *asynq.Task) error { count(); return nil })

	round := 0
	run := func(h asynq.Handler) (float64, cpuPerTask) {
		round++
		queue := fmt.Sprintf("bench%d", round)
		for i := 0; i < b.N; i++ {
			t, err := tasks.NewWhatsAppSendTask(tasks.WhatsAppSend{PhoneNumberID: "106540352242922",
				To: fmt.Sprintf("+1202555%04d", 100+i%100), Text: "Your order has shipped."},
				asynq.Queue(queue), asynq.Retention(0))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := client.Enqueue(t); err != nil {
				b.Fatal(err)
			}
		}
		done.Store(0)
		s := asynq.NewServerFromRedisClient(rdb, asynq.Config{
			Concurrency: benchConcurrency, Queues: map[string]int{queue: 1},
			IsFailure: worker.IsFailure, RetryDelayFunc: worker.RetryDelay,
			DelayedTaskCheckInterval: 100 * time.Millisecond, TaskCheckInterval: 50 * time.Millisecond,
			LogLevel: asynq.FatalLevel,
		})
		start := time.Now()
		c0, r0 := procCPU(), redisCPU(rdb)
		if err := s.Start(h); err != nil {
			b.Fatal(err)
		}
		select {
		case <-target:
		case <-time.After(5 * time.Minute):
			b.Fatalf("round %d: %d of %d tasks after 5m", round, done.Load(), b.N)
		}
		elapsed := time.Since(start)
		cpu := cpuPerTask{goUS: (procCPU() - c0) * 1e6 / float64(b.N), redisUS: (redisCPU(rdb) - r0) * 1e6 / float64(b.N)}
		s.Shutdown()
		return float64(b.N) / elapsed.Seconds(), cpu
	}

	b.ResetTimer()
	var plainRates, throttledRates, rtRates []float64
	var plainCPU, throttledCPU, rtCPU cpuPerTask
	for range 3 {
		r, c := run(plain)
		plainRates, plainCPU = append(plainRates, r), plainCPU.add(c)
		r, c = run(w.Mux())
		throttledRates, throttledCPU = append(throttledRates, r), throttledCPU.add(c)
		r, c = run(wrt.Mux())
		rtRates, rtCPU = append(rtRates, r), rtCPU.add(c)
	}
	b.StopTimer()
	p, t, rt := testutil.Median(plainRates), testutil.Median(throttledRates), testutil.Median(rtRates)
	b.ReportMetric(p, "plain_tasks/s")
	b.ReportMetric(t, "throttled_tasks/s")
	b.ReportMetric(t/p, "ratio")
	b.ReportMetric(rt/p, "ratio_round_trip")
	// CPU per task, mean of the rounds: this process (asynq and the
	// handler) and redis-server, so a gap can be traced to its side.
	b.ReportMetric(plainCPU.goUS/3, "plain_go_µs/task")
	b.ReportMetric(plainCPU.redisUS/3, "plain_redis_µs/task")
	b.ReportMetric(throttledCPU.goUS/3, "throttled_go_µs/task")
	b.ReportMetric(throttledCPU.redisUS/3, "throttled_redis_µs/task")
	b.ReportMetric(rtCPU.goUS/3, "round_trip_go_µs/task")
	b.ReportMetric(rtCPU.redisUS/3, "round_trip_redis_µs/task")
	b.Logf("tasks=%d plain=%.0f throttled=%.0f round_trip=%.0f tasks/s", b.N, plainRates, throttledRates, rtRates)
}

// benchConcurrency is asynq's Concurrency for both servers.
var benchConcurrency = 20

type cpuPerTask struct{ goUS, redisUS float64 }

func (c cpuPerTask) add(o cpuPerTask) cpuPerTask {
	return cpuPerTask{c.goUS + o.goUS, c.redisUS + o.redisUS}
}

// procCPU is this process's user+system CPU time in seconds.
func procCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// redisCPU is redis-server's user+system CPU time in seconds (INFO cpu).
func redisCPU(rdb *redis.Client) float64 {
	st, _ := rdb.Info(context.Background(), "cpu").Result()
	var total float64
	for _, l := range strings.Split(st, "\r\n") {
		for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if strings.HasPrefix(l, k) {
				v, _ := strconv.ParseFloat(strings.TrimPrefix(l, k), 64)
				total += v
			}
		}
	}
	return total
}
