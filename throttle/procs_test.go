package throttle_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/throttle"
)

// Environment of a helper process started by TestProcsAdmitExactlyTheLimit.
const (
	procsEnvHelper     = "SLUICE_PROCS_HELPER" // "1" in a helper
	procsEnvAddr       = "SLUICE_PROCS_ADDR"
	procsEnvAlgorithm  = "SLUICE_PROCS_ALGORITHM"
	procsEnvGoroutines = "SLUICE_PROCS_GOROUTINES"
	procsEnvAttempts   = "SLUICE_PROCS_ATTEMPTS" // per goroutine
	procsEnvNow        = "SLUICE_PROCS_NOW"      // the fixed clock, Unix µs
	procsEnvID         = "SLUICE_PROCS_ID"
)

const (
	procsProcesses  = 3
	procsGoroutines = 16
	procsAttempts   = 70 // 3 × 16 × 70 = 3360 attempts for 1000 units
	procsCapacity   = 1000
)

// procsLimit is the limit of capacity 1000 that nothing refills during the
// test: the clock is fixed, and no lease is released.
func procsLimit(a throttle.Algorithm) throttle.Limit {
	l := throttle.Limit{Name: string(a), Algorithm: a, Rate: throttle.PerHour(procsCapacity)}
	switch a {
	case throttle.GCRA:
		l.Burst = procsCapacity
	case throttle.Concurrency:
		l = throttle.Limit{Name: string(a), Algorithm: a, Max: procsCapacity}
	}
	return l
}

func procsKey(a throttle.Algorithm) string { return "procs:" + string(a) + ":k" }

// procsReady and procsStart are the Redis lists of the start barrier.
func procsReady(a throttle.Algorithm) string { return "procs-barrier:ready:" + string(a) }
func procsStart(a throttle.Algorithm) string { return "procs-barrier:start:" + string(a) }

// TestProcsAdmitExactlyTheLimit: three client processes, each with 16
// goroutines, consume one key of a limit of 1000 with a clock fixed at the
// same instant (nothing refills): together they admit exactly 1000, for every
// algorithm with a count, and the Redis state says 1000 units are used.
func TestProcsAdmitExactlyTheLimit(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	now := time.Date(2026, 11, 20, 0, 30, 0, 0, time.UTC) // mid-window for every window length
	for _, a := range []throttle.Algorithm{throttle.GCRA, throttle.FixedWindow, throttle.SlidingWindowLog,
		throttle.SlidingWindowCounter, throttle.Concurrency, throttle.Distinct} {
		t.Run(string(a), func(t *testing.T) {
			t.Parallel() // separate keys and barriers; the process start-up overlaps
			admitted, spans := procsRun(t, srv.Addr, rdb, a, now)
			if admitted != procsCapacity {
				t.Errorf("%d processes × %d goroutines × %d attempts admitted %d, want exactly %d",
					procsProcesses, procsGoroutines, procsAttempts, admitted, procsCapacity)
			}
			// The processes really overlapped: each started before every
			// other finished.
			var lastStart, firstEnd int64
			for i, s := range spans {
				if i == 0 || s[0] > lastStart {
					lastStart = s[0]
				}
				if i == 0 || s[1] < firstEnd {
					firstEnd = s[1]
				}
			}
			if lastStart >= firstEnd {
				t.Errorf("processes did not overlap: last start %d ns, first end %d ns", lastStart, firstEnd)
			}
			t.Logf("admitted %d of %d attempts; the processes ran together for %v", admitted,
				procsProcesses*procsGoroutines*procsAttempts, time.Duration(firstEnd-lastStart))
			procsCheckState(t, rdb, a, now)
		})
	}
}

// procsRun starts the helper processes, releases them together and returns
// the units they admitted and each one's [first call, last call] wall times.
func procsRun(t *testing.T, addr string, rdb *redis.Client, a throttle.Algorithm, now time.Time) (int64, [][2]int64) {
	t.Helper()
	ctx := context.Background()
	type result struct {
		out, errOut bytes.Buffer
		err         error
	}
	results := make([]*result, procsProcesses)
	var wg sync.WaitGroup
	exited := make(chan int, procsProcesses)
	for i := range procsProcesses {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1", "-test.timeout=60s")
		cmd.Env = append(os.Environ(),
			procsEnvHelper+"=1",
			procsEnvAddr+"="+addr,
			procsEnvAlgorithm+"="+string(a),
			procsEnvGoroutines+"="+strconv.Itoa(procsGoroutines),
			procsEnvAttempts+"="+strconv.Itoa(procsAttempts),
			procsEnvNow+"="+strconv.FormatInt(now.UnixMicro(), 10),
			procsEnvID+"="+strconv.Itoa(i),
			// A -race binary otherwise sleeps 1s at exit.
			"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
		r := &result{}
		results[i] = r
		cmd.Stdout, cmd.Stderr = &r.out, &r.errOut
		if err := cmd.Start(); err != nil {
			t.Fatalf("start helper %d: %v", i, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.err = cmd.Wait()
			exited <- i
		}()
	}
	report := func() string {
		var b strings.Builder
		for i, r := range results {
			fmt.Fprintf(&b, "\nhelper %d (err %v):\n%s%s", i, r.err, r.out.String(), r.errOut.String())
		}
		return b.String()
	}
	// Barrier: every helper has connected and is waiting; then one RPUSH
	// releases all three BLPOPs at once.
	for range procsProcesses {
		if _, err := rdb.BLPop(ctx, 30*time.Second, procsReady(a)).Result(); err != nil {
			select {
			case <-exited:
				wg.Wait()
				t.Fatalf("a helper exited before the start: %v%s", err, report())
			default:
				t.Fatalf("helpers not ready: %v", err)
			}
		}
	}
	if err := rdb.RPush(ctx, procsStart(a), "go", "go", "go").Err(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	var total int64
	var spans [][2]int64
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("helper %d: %v%s", i, r.err, report())
		}
		var n, first, last int64
		found := false
		sc := bufio.NewScanner(bytes.NewReader(r.out.Bytes()))
		for sc.Scan() {
			if _, err := fmt.Sscanf(sc.Text(), "SLUICE_PROCS admitted=%d first=%d last=%d", &n, &first, &last); err == nil {
				found = true
			}
		}
		if !found {
			t.Fatalf("helper %d printed no result%s", i, report())
		}
		total += n
		spans = append(spans, [2]int64{first, last})
	}
	return total, spans
}

// procsCheckState reads the limit's state in Redis: exactly 1000 units used,
// nothing left, and a further call blocked.
func procsCheckState(t *testing.T, rdb *redis.Client, a throttle.Algorithm, now time.Time) {
	t.Helper()
	ctx := context.Background()
	l := throttle.NewRedis(rdb, throttle.Options{Clock: func() time.Time { return now }})
	key := l.Key(procsKey(a))
	var used int64
	var err error
	switch a {
	case throttle.GCRA:
		// The TAT is now + 1000 emission intervals of 3.6s.
		var tat int64
		tat, err = rdb.Get(ctx, key).Int64()
		used = (tat - now.UnixMicro()) / (time.Hour / procsCapacity).Microseconds()
		if (tat-now.UnixMicro())%(time.Hour/procsCapacity).Microseconds() != 0 {
			t.Errorf("TAT %d is not now + a whole number of intervals", tat)
		}
	case throttle.FixedWindow, throttle.SlidingWindowCounter:
		used, err = rdb.HGet(ctx, key, "c").Int64()
	case throttle.SlidingWindowLog, throttle.Concurrency, throttle.Distinct:
		used, err = rdb.ZCard(ctx, key).Result()
	}
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	if used != procsCapacity {
		t.Errorf("Redis state of %s says %d units used, want %d", key, used, procsCapacity)
	}
	req := throttle.Request{Key: procsKey(a), Limit: procsLimit(a), Member: "one-more"}
	st, err := l.Status(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if st.Remaining != 0 {
		t.Errorf("Status: remaining %d, want 0", st.Remaining)
	}
	d, err := l.Consume(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed {
		t.Errorf("one more Consume was allowed: %+v", d)
	}
}

// TestHelperProcess is one client process of TestProcsAdmitExactlyTheLimit;
// it is skipped unless that test started it.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(procsEnvHelper) != "1" {
		t.Skip("helper process of TestProcsAdmitExactlyTheLimit")
	}
	a := throttle.Algorithm(os.Getenv(procsEnvAlgorithm))
	goroutines, err1 := strconv.Atoi(os.Getenv(procsEnvGoroutines))
	attempts, err2 := strconv.Atoi(os.Getenv(procsEnvAttempts))
	nowUs, err3 := strconv.ParseInt(os.Getenv(procsEnvNow), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		t.Fatalf("bad helper environment: %v %v %v", err1, err2, err3)
	}
	id := os.Getenv(procsEnvID)
	now := time.UnixMicro(nowUs)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(procsEnvAddr), PoolSize: goroutines})
	defer rdb.Close()
	l := throttle.NewRedis(rdb, throttle.Options{Clock: func() time.Time { return now }})
	lim := procsLimit(a)

	// Open the goroutines' connections before the start.
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() { _ = rdb.Ping(ctx).Err() })
	}
	wg.Wait()
	if err := rdb.RPush(ctx, procsReady(a), id).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.BLPop(ctx, 30*time.Second, procsStart(a)).Err(); err != nil {
		t.Fatalf("waiting for the start: %v", err)
	}
	var admitted, failed atomic.Int64
	var firstErr atomic.Value
	start := make(chan struct{})
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for i := range attempts {
				d, err := l.Consume(ctx, throttle.Request{Key: procsKey(a), Limit: lim, Member: fmt.Sprintf("p%s-g%d-i%d", id, g, i)})
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				if d.Allowed {
					admitted.Add(d.Limits[0].Taken)
				}
			}
		})
	}
	first := time.Now().UnixNano()
	close(start)
	wg.Wait()
	last := time.Now().UnixNano()
	if failed.Load() > 0 {
		t.Fatalf("%d calls failed; first: %v", failed.Load(), firstErr.Load())
	}
	fmt.Printf("SLUICE_PROCS admitted=%d first=%d last=%d\n", admitted.Load(), first, last)
}
