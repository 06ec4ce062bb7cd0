package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/throttle"
)

// consumeWhatsAppCalls runs b.N calls of WhatsApp's three limits (number,
// pair, daily; all generous enough to allow) from parallel callers.
func consumeWhatsAppCalls(b *testing.B, l throttle.Limiter) {
	number := throttle.Limit{Name: "throughput", Algorithm: throttle.FixedWindow, Rate: throttle.PerSecond(1 << 40)}
	pair := throttle.Limit{Name: "pair", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1 << 30), Burst: 1 << 20}
	daily := throttle.Limit{Name: "daily", Algorithm: throttle.FixedWindow, Rate: throttle.PerDay(1 << 40)}
	ctx := context.Background()
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
}

// BenchmarkConsume measures decisions/s for WhatsApp's three limits in one
// atomic call, from 64 concurrent callers against one redis-server.
func BenchmarkConsume(b *testing.B) {
	srv := redistest.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
	b.Cleanup(func() { _ = rdb.Close() })
	l := throttle.NewRedis(rdb, throttle.Options{Prefix: "bench"})
	ctx := context.Background()
	b.SetParallelism(32) // 2 cores × 32 = 64 callers
	b.ResetTimer()
	consumeWhatsAppCalls(b, l)
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

// The benchmarks below compare Sluice's GCRA with go-redis/redis_rate on one
// private redis-server: benchCallers concurrent callers, a client with
// PoolSize benchCallers for each library, keys spread over benchSubjects
// subjects ("api:user:10000" … "api:user:19999", which Sluice stores as
// "sluice:{api}:user:10000" and redis_rate as "rate:api:user:10000"). Run
// with `make bench`.
const (
	benchCallers  = 64
	benchSubjects = 10000
	// benchRounds is how many times the contenders of one benchmark take
	// turns; each round is b.N/benchRounds decisions per contender.
	benchRounds = 6
)

var benchSubjectIDs = func() []string {
	ids := make([]string, benchSubjects)
	for i := range ids {
		ids[i] = strconv.Itoa(10000 + i)
	}
	return ids
}()

// benchParallelism makes b.RunParallel run benchCallers goroutines (64 on
// 2 cores: 2 × 32).
func benchParallelism() int {
	p := runtime.GOMAXPROCS(0)
	return (benchCallers + p - 1) / p
}

func benchClient(b *testing.B, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: benchCallers})
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// The GCRA limit of BenchmarkGCRA: an API's 100/s burst 100 per user. Each
// of the 10,000 subjects is asked about 5 times a second, so every call is
// allowed and both limiters write their state on every call. (A limit like
// 1<<30/s would make redis_rate skip its write: its TAT, float seconds since
// 2017, cannot hold a 1ns increment, so the benchmark would compare a read
// against a read-and-write.)
var (
	benchGenerous   = throttle.Limit{Name: "gcra", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(100), Burst: 100}
	benchGenerousRR = redis_rate.Limit{Rate: 100, Burst: 100, Period: time.Second}
)

// A subject's two limits in BenchmarkTwoLimits and BenchmarkMemory:
// 10/s burst 10 and 1000/1h burst 1000, generous enough that the benchmark's
// traffic (each subject is asked once per 10,000 decisions) always passes.
var (
	benchRPS      = throttle.Limit{Name: "rps", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(10), Burst: 10}
	benchHourly   = throttle.Limit{Name: "hourly", Algorithm: throttle.GCRA, Rate: throttle.PerHour(1000), Burst: 1000}
	benchRPSRR    = redis_rate.Limit{Rate: 10, Burst: 10, Period: time.Second}
	benchHourlyRR = redis_rate.Limit{Rate: 1000, Burst: 1000, Period: time.Hour}
)

// benchContender makes decision i (i >= 1) and reports whether it was
// allowed.
type benchContender struct {
	name   string
	decide func(ctx context.Context, i int64) (bool, error)
}

func sluiceGCRA(l *throttle.Redis) benchContender {
	return benchContender{"sluice", func(ctx context.Context, i int64) (bool, error) {
		d, err := l.Consume(ctx, throttle.Request{Key: "api:user:" + benchSubjectIDs[i%benchSubjects], Limit: benchGenerous})
		return d.Allowed, err
	}}
}

func redisRateGCRA(rl *redis_rate.Limiter) benchContender {
	return benchContender{"redis_rate", func(ctx context.Context, i int64) (bool, error) {
		r, err := rl.Allow(ctx, "api:user:"+benchSubjectIDs[i%benchSubjects], benchGenerousRR)
		if err != nil {
			return false, err
		}
		return r.Allowed > 0, nil
	}}
}

// BenchmarkGCRA measures decisions/s of one GCRA limit per call, Sluice and
// redis_rate each in its own sub-benchmark, 64 concurrent callers.
func BenchmarkGCRA(b *testing.B) {
	srv := redistest.Start(b)
	admin := benchClient(b, srv.Addr)
	b.Run("sluice", func(b *testing.B) {
		benchParallel(b, admin, sluiceGCRA(throttle.NewRedis(benchClient(b, srv.Addr), throttle.Options{})))
	})
	b.Run("redis_rate", func(b *testing.B) {
		benchParallel(b, admin, redisRateGCRA(redis_rate.NewLimiter(benchClient(b, srv.Addr))))
	})
}

// benchParallel runs b.N decisions of c from benchCallers goroutines and
// reports decisions/s, this process's CPU per decision (go_µs),
// redis-server's (redis_cpu_µs, INFO cpu: all its work, network included)
// and the EVALSHA time alone (evalsha_µs, INFO commandstats usec, which is
// usec_per_call when a decision is one call).
func benchParallel(b *testing.B, admin *redis.Client, c benchContender) {
	ctx := context.Background()
	for i := range int64(benchCallers) { // load the script, open connections
		if _, err := c.decide(ctx, i+1); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	var failed benchFailure
	b.SetParallelism(benchParallelism())
	b.ReportAllocs()
	m := benchMeasure(ctx, admin)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ok, err := c.decide(ctx, next.Add(1))
			failed.check(ok, err)
		}
	})
	b.StopTimer()
	if err := failed.err(); err != nil {
		b.Fatal(err)
	}
	r := m.done(ctx, int64(b.N), b.Elapsed())
	b.ReportMetric(r.rate(), "decisions/s")
	b.ReportMetric(r.goUS(), "go_µs/decision")
	b.ReportMetric(r.redisUS(), "redis_cpu_µs/decision")
	b.ReportMetric(r.evalshaUS(), "evalsha_µs/decision")
}

// BenchmarkGCRAvsRedisRate runs Sluice and redis_rate in alternating rounds
// in the same run, on the same server, and reports each one's decisions/s
// and their ratio (sluice/redis_rate; the goal is >= 1), with the CPU
// metrics of benchParallel. CONFIG RESETSTAT precedes every round.
func BenchmarkGCRAvsRedisRate(b *testing.B) {
	srv := redistest.Start(b)
	admin := benchClient(b, srv.Addr)
	rs := benchAlternate(b, admin,
		sluiceGCRA(throttle.NewRedis(benchClient(b, srv.Addr), throttle.Options{})),
		redisRateGCRA(redis_rate.NewLimiter(benchClient(b, srv.Addr))))
	benchReport(b, rs)
	b.ReportMetric(rs[0].rate()/rs[1].rate(), "ratio")
}

// BenchmarkTwoLimits: one decision under two GCRA limits of one subject,
// 10/s burst 10 and 1000/1h burst 1000. Sluice decides both in one atomic
// script, with the two limits sharing the subject's key (one hash, a field
// per limit) or on two keys of one scope; redis_rate needs two sequential
// AllowN calls (not atomic: the first takes its unit even when the second
// blocks). Alternating rounds; ratios are Sluice/redis_rate decisions/s.
func BenchmarkTwoLimits(b *testing.B) {
	srv := redistest.Start(b)
	admin := benchClient(b, srv.Addr)
	sl := throttle.NewRedis(benchClient(b, srv.Addr), throttle.Options{})
	rl := redis_rate.NewLimiter(benchClient(b, srv.Addr))
	oneKey := benchContender{"sluice_one_key", func(ctx context.Context, i int64) (bool, error) {
		k := "api:user:" + benchSubjectIDs[i%benchSubjects]
		d, err := sl.Consume(ctx, throttle.Request{Key: k, Limit: benchRPS}, throttle.Request{Key: k, Limit: benchHourly})
		return d.Allowed, err
	}}
	twoKeys := benchContender{"sluice_two_keys", func(ctx context.Context, i int64) (bool, error) {
		id := benchSubjectIDs[i%benchSubjects]
		d, err := sl.Consume(ctx, throttle.Request{Key: "api:rps:" + id, Limit: benchRPS}, throttle.Request{Key: "api:hourly:" + id, Limit: benchHourly})
		return d.Allowed, err
	}}
	twoCalls := benchContender{"redis_rate", func(ctx context.Context, i int64) (bool, error) {
		k := "api:user:" + benchSubjectIDs[i%benchSubjects]
		r, err := rl.Allow(ctx, k+":rps", benchRPSRR)
		if err != nil || r.Allowed == 0 {
			return false, err
		}
		r, err = rl.Allow(ctx, k+":hourly", benchHourlyRR)
		if err != nil {
			return false, err
		}
		return r.Allowed > 0, nil
	}}
	rs := benchAlternate(b, admin, oneKey, twoKeys, twoCalls)
	benchReport(b, rs)
	b.ReportMetric(rs[0].rate()/rs[2].rate(), "ratio_one_key")
	b.ReportMetric(rs[1].rate()/rs[2].rate(), "ratio_two_keys")
}

// benchAlternate runs the contenders in turn, benchRounds times, b.N
// decisions each in all, from benchCallers goroutines, and returns their
// totals in order.
func benchAlternate(b *testing.B, admin *redis.Client, cs ...benchContender) []benchResult {
	ctx := context.Background()
	per := max(int64(b.N)/benchRounds, 1)
	// Warm up: scripts loaded, connections open, state for every subject.
	for _, c := range cs {
		if err := benchRound(ctx, c, benchSubjects); err != nil {
			b.Fatal(err)
		}
	}
	totals := make([]benchResult, len(cs))
	rounds := make([][]string, len(cs))
	b.ResetTimer()
	for range benchRounds {
		for k, c := range cs {
			m := benchMeasure(ctx, admin)
			start := time.Now()
			if err := benchRound(ctx, c, per); err != nil {
				b.Fatal(err)
			}
			r := m.done(ctx, per, time.Since(start))
			totals[k] = totals[k].add(r)
			rounds[k] = append(rounds[k], fmt.Sprintf("%.0f", r.rate()))
		}
	}
	b.StopTimer()
	for k, c := range cs {
		totals[k].name = c.name
		if b.N >= benchRounds {
			b.Logf("%s: %d rounds of %d decisions: %s decisions/s", c.name, benchRounds, per, strings.Join(rounds[k], " "))
		}
	}
	return totals
}

// benchRound makes decisions 1..n of c from benchCallers goroutines.
func benchRound(ctx context.Context, c benchContender, n int64) error {
	var next atomic.Int64
	var failed benchFailure
	var wg sync.WaitGroup
	for range benchCallers {
		wg.Go(func() {
			for i := next.Add(1); i <= n; i = next.Add(1) {
				ok, err := c.decide(ctx, i)
				failed.check(ok, err)
			}
		})
	}
	wg.Wait()
	if err := failed.err(); err != nil {
		return fmt.Errorf("%s: %w", c.name, err)
	}
	return nil
}

func benchReport(b *testing.B, rs []benchResult) {
	for _, r := range rs {
		b.ReportMetric(r.rate(), r.name+"_decisions/s")
		b.ReportMetric(r.goUS(), r.name+"_go_µs/decision")
		b.ReportMetric(r.redisUS(), r.name+"_redis_cpu_µs/decision")
		b.ReportMetric(r.evalshaUS(), r.name+"_evalsha_µs/decision")
	}
}

// benchFailure keeps the first error or blocked decision of a round.
type benchFailure struct {
	mu    sync.Mutex
	first error
}

func (f *benchFailure) check(ok bool, err error) {
	if err == nil && ok {
		return
	}
	if err == nil {
		err = errors.New("a decision was blocked: the limit is not generous enough for this benchmark")
	}
	f.mu.Lock()
	if f.first == nil {
		f.first = err
	}
	f.mu.Unlock()
}

func (f *benchFailure) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.first
}

// benchResult is what a run of decisions cost.
type benchResult struct {
	name            string
	decisions       int64
	elapsed         time.Duration
	goCPU, redisCPU float64 // seconds
	evalshaUsec     float64 // INFO commandstats' usec of EVALSHA
}

func (r benchResult) add(o benchResult) benchResult {
	return benchResult{r.name, r.decisions + o.decisions, r.elapsed + o.elapsed, r.goCPU + o.goCPU,
		r.redisCPU + o.redisCPU, r.evalshaUsec + o.evalshaUsec}
}

func (r benchResult) rate() float64      { return float64(r.decisions) / r.elapsed.Seconds() }
func (r benchResult) goUS() float64      { return r.goCPU * 1e6 / float64(r.decisions) }
func (r benchResult) redisUS() float64   { return r.redisCPU * 1e6 / float64(r.decisions) }
func (r benchResult) evalshaUS() float64 { return r.evalshaUsec / float64(r.decisions) }

// benchMeasurement is the CPU counters at the start of a run.
type benchMeasurement struct {
	admin        *redis.Client
	goCPU, redis float64
}

// benchMeasure resets redis-server's command statistics and reads both
// processes' CPU time.
func benchMeasure(ctx context.Context, admin *redis.Client) benchMeasurement {
	_ = admin.ConfigResetStat(ctx).Err()
	return benchMeasurement{admin, benchProcCPU(), benchRedisCPU(ctx, admin)}
}

func (m benchMeasurement) done(ctx context.Context, decisions int64, elapsed time.Duration) benchResult {
	r := benchResult{decisions: decisions, elapsed: elapsed,
		goCPU: benchProcCPU() - m.goCPU, redisCPU: benchRedisCPU(ctx, m.admin) - m.redis}
	st, _ := m.admin.Info(ctx, "commandstats").Result()
	for _, line := range strings.Split(st, "\r\n") {
		v, ok := strings.CutPrefix(line, "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for _, f := range strings.Split(v, ",") {
			if x, ok := strings.CutPrefix(f, "usec="); ok {
				r.evalshaUsec, _ = strconv.ParseFloat(x, 64)
			}
		}
	}
	return r
}

// benchProcCPU is this process's user+system CPU time in seconds.
func benchProcCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// benchRedisCPU is redis-server's user+system CPU time in seconds.
func benchRedisCPU(ctx context.Context, rdb *redis.Client) float64 {
	st, _ := rdb.Info(ctx, "cpu").Result()
	var total float64
	for _, l := range strings.Split(st, "\r\n") {
		for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(l, k); ok {
				x, _ := strconv.ParseFloat(v, 64)
				total += x
			}
		}
	}
	return total
}

// BenchmarkMemory reports the Redis memory of rate-limit state: the mean
// MEMORY USAGE (key, value and main dictionary entry; not the expiry entry
// every library's key also has) per subject over 1000 subjects
// "api:user:10000" … "api:user:10999". Goals: Sluice ≤ 88 bytes for a GCRA
// key, ≤ 120 for a subject with two GCRA limits sharing one key (a hash, a
// field per limit name). redis_rate keeps one key per limit ("rate:<key>").
// The numbers do not depend on b.N; ns/op is suppressed.
func BenchmarkMemory(b *testing.B) {
	srv := redistest.Start(b)
	rdb := benchClient(b, srv.Addr)
	sl := throttle.NewRedis(rdb, throttle.Options{})
	rl := redis_rate.NewLimiter(rdb)
	const subjects = 1000
	type variant struct {
		name string
		// fill creates subject id's state and returns its Redis keys.
		fill func(ctx context.Context, id string) ([]string, error)
	}
	sluiceOne := func(ctx context.Context, reqs ...throttle.Request) error {
		d, err := sl.Consume(ctx, reqs...)
		if err == nil && !d.Allowed {
			err = errors.New("blocked")
		}
		return err
	}
	rrOne := func(ctx context.Context, key string, lim redis_rate.Limit) error {
		r, err := rl.Allow(ctx, key, lim)
		if err == nil && r.Allowed == 0 {
			err = errors.New("blocked")
		}
		return err
	}
	for _, v := range []variant{
		{"sluice_gcra", func(ctx context.Context, id string) ([]string, error) {
			k := "api:user:" + id
			return []string{sl.Key(k)}, sluiceOne(ctx, throttle.Request{Key: k, Limit: benchRPS})
		}},
		{"sluice_two_gcra_one_key", func(ctx context.Context, id string) ([]string, error) {
			k := "api:user:" + id
			return []string{sl.Key(k)}, sluiceOne(ctx, throttle.Request{Key: k, Limit: benchRPS}, throttle.Request{Key: k, Limit: benchHourly})
		}},
		{"sluice_two_gcra_two_keys", func(ctx context.Context, id string) ([]string, error) {
			k1, k2 := "api:rps:"+id, "api:hourly:"+id
			return []string{sl.Key(k1), sl.Key(k2)}, sluiceOne(ctx, throttle.Request{Key: k1, Limit: benchRPS}, throttle.Request{Key: k2, Limit: benchHourly})
		}},
		{"redis_rate_gcra", func(ctx context.Context, id string) ([]string, error) {
			k := "api:user:" + id
			return []string{"rate:" + k}, rrOne(ctx, k, benchRPSRR)
		}},
		{"redis_rate_two_limits", func(ctx context.Context, id string) ([]string, error) {
			k := "api:user:" + id
			if err := rrOne(ctx, k+":rps", benchRPSRR); err != nil {
				return nil, err
			}
			return []string{"rate:" + k + ":rps", "rate:" + k + ":hourly"}, rrOne(ctx, k+":hourly", benchHourlyRR)
		}},
	} {
		b.Run(v.name, func(b *testing.B) {
			ctx := context.Background()
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			var keys []string
			for i := range subjects {
				ks, err := v.fill(ctx, benchSubjectIDs[i])
				if err != nil {
					b.Fatal(err)
				}
				keys = append(keys, ks...)
			}
			if n, err := rdb.DBSize(ctx).Result(); err != nil || n != int64(len(keys)) {
				b.Fatalf("DBSIZE %d (%v), want the %d state keys alone", n, err, len(keys))
			}
			var usage int64
			for _, k := range keys {
				u, err := rdb.MemoryUsage(ctx, k, 0).Result()
				if err != nil {
					b.Fatalf("MEMORY USAGE %s: %v", k, err)
				}
				usage += u
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(usage)/subjects, "bytes/subject")
			b.ReportMetric(float64(len(keys))/subjects, "keys/subject")
			typ, _ := rdb.Type(ctx, keys[0]).Result()
			enc, _ := rdb.ObjectEncoding(ctx, keys[0]).Result()
			if b.N > 1 {
				b.Logf("%s: e.g. %s (%s, %s)", v.name, keys[0], typ, enc)
			}
		})
	}
}
