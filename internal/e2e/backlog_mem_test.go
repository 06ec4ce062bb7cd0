//go:build unix

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/tasks"
)

// The backlog memory measurement of issue 22 (`make bench-backlog`), never
// run by `make test`: skipped unless SLUICE_BENCH_BACKLOG=1. It measures
// the Redis memory one waiting send holds, for a backlog of S WhatsApp
// sends over N numbers, and the same for plain asynq, in one run:
//
//  1. Sluice: a private redis-server; the S sends enqueued with `sluice
//     send`, one campaign per number (S/N rows each, the remainder spread
//     one a number over the first ones), each row to its own recipient.
//     No worker runs: every send waits, planned (asynq scheduled) or
//     pending.
//  2. Plain asynq, on a fresh redis-server: the same S sends enqueued by an
//     asynq client (tasks.EnqueueWhatsAppSend), pending.
//
// For each it reads INFO memory before the enqueue and after it, once the
// enqueuing clients have disconnected, with the server's writes and key
// expiry paused (CLIENT PAUSE WRITE) until every key is read back, so that
// the figures and the table are one moment's; it logs one line of key=value
// figures: used_memory's growth in bytes per waiting send
// (bytes_per_send), used_memory_dataset's (dataset_bytes_per_send), keys
// per send, and the sum of MEMORY USAGE over every key per send. Then a
// table by key family: every key is read back (SCAN) and named by its
// shape, its ID parts (runs holding a digit: task IDs, numbers,
// recipients, dates) as "*" (asynq:{whatsapp}:t:*,
// sluice:{whatsapp}:number:*|backlog, sluice:{whatsapp}:pair:*:*,
// sluice:_idem:*, ...), with its Redis type, keys, MEMORY USAGE in all and
// per send. MEMORY USAGE is exact (SAMPLES 0: every element of a
// collection is counted), not sampled; it counts a key's name, value and
// its entry in the keyspace, not the keyspace's hash table itself, so its
// sum falls short of used_memory's growth by about the keyspace's hash
// tables (MEMORY STATS overhead.hashtable.main and .expires, logged). Then
// the ratio line: memory_per_send_ratio, Sluice's bytes_per_send over plain
// asynq's.
//
// That moment is right after the enqueue. A limiter key with an expiry
// is in the table only while it lives: a pair's plan (…|plan) expires one
// pair interval (6 s) after its send's planned second, so with no worker
// the pairs whose sends were planned more than 6 s before the pause are
// past their expiry by then (about a third to a half at the default size,
// whose backlog spans about 42 s a number and is enqueued in 30 to 40 s
// on a 2-core host; a backlog that spans longer keeps nearly all of
// them). Redis reclaims expired keys by sampling, so most of those are
// still in used_memory, DBSIZE (keys) and the hash tables; SCAN skips
// them, and keys_live counts the keys the table holds.
//
// Environment:
//
//	SLUICE_BENCH_BACKLOG=1          run it
//	SLUICE_BENCH_BACKLOG_SENDS=S    waiting sends (default 100000)
//	SLUICE_BENCH_NUMBERS=N          WhatsApp numbers (default 30; at most
//	                                10,000 sends a number)
//	SLUICE_E2E_STRESS_OUT=DIR       also write the figures as JSON
const (
	benchBacklogEnv      = "SLUICE_BENCH_BACKLOG"
	benchBacklogSendsEnv = "SLUICE_BENCH_BACKLOG_SENDS"
)

// backlogSize is the measurement's size: sends over numbers.
type backlogSize struct {
	sends, numbers int
}

// perNumber is the count of sends number n (0-based) is given: sends/numbers,
// one more for the first sends%numbers numbers.
func (sz backlogSize) perNumber(n int) int {
	k := sz.sends / sz.numbers
	if n < sz.sends%sz.numbers {
		k++
	}
	return k
}

func backlogSetup(t *testing.T) backlogSize {
	t.Helper()
	benchGate(t, benchBacklogEnv, "backlog memory measurement", "make bench-backlog")
	sz := backlogSize{sends: 100000, numbers: 30}
	envInts(t, map[string]*int{benchBacklogSendsEnv: &sz.sends, benchNumbersEnv: &sz.numbers})
	require.GreaterOrEqual(t, sz.sends, sz.numbers, "%s below %s: a number with no send", benchBacklogSendsEnv, benchNumbersEnv)
	require.LessOrEqual(t, sz.perNumber(0), 10000, "recipientN has 10,000 distinct recipients: raise %s", benchNumbersEnv)
	require.LessOrEqual(t, sz.numbers, 99999, benchNumbersEnv)
	return sz
}

// redisMemory is a redis-server's memory figures, in bytes, and its
// connected clients.
type redisMemory struct {
	// used, dataset and scripts are INFO memory's used_memory,
	// used_memory_dataset and used_memory_scripts.
	used, dataset, scripts int64
	// main and expires are MEMORY STATS' overhead.hashtable.main and
	// overhead.hashtable.expires of db 0: the keyspace's hash tables, one
	// entry a key and one a key with an expiry, and their buckets.
	main, expires int64
	clients       int // INFO clients' connected_clients
}

// readRedisMemory reads INFO memory and clients, and MEMORY STATS.
func readRedisMemory(t *testing.T, rdb *redis.Client) redisMemory {
	t.Helper()
	ctx := context.Background()
	info, err := rdb.Info(ctx, "memory", "clients").Result()
	require.NoError(t, err)
	var m redisMemory
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		var p *int64
		switch k {
		case "used_memory":
			p = &m.used
		case "used_memory_dataset":
			p = &m.dataset
		case "used_memory_scripts":
			p = &m.scripts
		case "connected_clients":
			n, err := strconv.Atoi(v)
			require.NoError(t, err, k)
			m.clients = n
		}
		if p != nil {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err, k)
			*p = n
		}
	}
	require.Positive(t, m.used, "INFO memory: no used_memory")
	stats, err := rdb.Do(ctx, "MEMORY", "STATS").Result()
	require.NoError(t, err)
	if db, ok := redisMap(stats)["db.0"]; ok { // absent while db 0 is empty
		dbStats := redisMap(db)
		m.main = redisInt(dbStats["overhead.hashtable.main"])
		m.expires = redisInt(dbStats["overhead.hashtable.expires"])
	}
	return m
}

// redisMap is a reply's map by key: a RESP3 map, or a RESP2 array of
// key, value pairs; nil for anything else.
func redisMap(v any) map[string]any {
	out := map[string]any{}
	switch x := v.(type) {
	case map[any]any:
		for k, v := range x {
			out[fmt.Sprint(k)] = v
		}
	case []any:
		for i := 0; i+1 < len(x); i += 2 {
			out[fmt.Sprint(x[i])] = x[i+1]
		}
	default:
		return nil
	}
	return out
}

// redisInt is an integer reply's value; 0 for anything else.
func redisInt(v any) int64 {
	n, _ := v.(int64)
	return n
}

// waitClients polls INFO until no more clients are connected than
// clients: the enqueuers have gone, their buffers freed. It fails after a
// minute.
func waitClients(t *testing.T, rdb *redis.Client, clients int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		m := readRedisMemory(t, rdb)
		if m.clients <= clients {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d clients still connected after a minute, want %d", m.clients, clients)
		}
		<-tick.C
	}
}

// pauseWrites stops the server's writes and, with them, its expiring of
// keys (CLIENT PAUSE WRITE, for at most 10 minutes): the keys stay as
// they are while they are read, those past their expiry included (they
// read as gone). The returned func, also called at cleanup, resumes.
func pauseWrites(t *testing.T, rdb *redis.Client) func() {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, rdb.Do(ctx, "CLIENT", "PAUSE", 600000, "WRITE").Err())
	var once sync.Once
	resume := func() {
		once.Do(func() { require.NoError(t, rdb.Do(ctx, "CLIENT", "UNPAUSE").Err()) })
	}
	t.Cleanup(resume)
	return resume
}

// settledMemory polls, while writes are paused (pauseWrites), until the
// memory figures stay the same over two reads 250 ms apart, over two of
// redis-server's 100 ms cron ticks: a keyspace hash table that was
// resizing (two tables at once) has finished. It returns the memory then
// and fails after a minute.
func settledMemory(t *testing.T, rdb *redis.Client) redisMemory {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	last := readRedisMemory(t, rdb)
	for {
		<-tick.C
		m := readRedisMemory(t, rdb)
		if m == last {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("memory not settled after a minute: %+v, then %+v", last, m)
		}
		last = m
	}
}

// keyFamily is the keys of one shape: their Redis type, count, how many
// of them have an expiry, their summed MEMORY USAGE in bytes, and one of
// them.
type keyFamily struct {
	pattern, typ   string
	example        string
	keys, expiring int
	bytes          int64
}

// keyFamilies reads every key back (SCAN, COUNT 1000), with its type and
// PTTL, and sums MEMORY USAGE (SAMPLES 0: exact) by family: the key with
// its ID parts as "*" (idPart) and its type. It returns them the most
// bytes first, and the count of keys SCAN listed that read as gone (type
// none: past their expiry), counted in no family. SCAN lists no key past
// its expiry.
func keyFamilies(t *testing.T, rdb *redis.Client) ([]keyFamily, int) {
	t.Helper()
	ctx := context.Background()
	byName := map[string]*keyFamily{}
	gone := 0
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, "*", 1000).Result()
		require.NoError(t, err)
		if len(keys) > 0 {
			pipe := rdb.Pipeline()
			usage := make([]*redis.IntCmd, len(keys))
			types := make([]*redis.StatusCmd, len(keys))
			ttls := make([]*redis.DurationCmd, len(keys))
			for i, k := range keys {
				usage[i] = pipe.MemoryUsage(ctx, k, 0)
				types[i] = pipe.Type(ctx, k)
				ttls[i] = pipe.PTTL(ctx, k)
			}
			_, err := pipe.Exec(ctx)
			require.NoError(t, err)
			for i, k := range keys {
				typ := types[i].Val()
				if typ == "none" {
					gone++
					continue
				}
				pattern := idPart.ReplaceAllString(k, "*")
				f := byName[pattern+" "+typ]
				if f == nil {
					f = &keyFamily{pattern: pattern, typ: typ, example: k}
					byName[pattern+" "+typ] = f
				}
				f.keys++
				f.bytes += usage[i].Val()
				if ttls[i].Val() > 0 {
					f.expiring++
				}
			}
		}
		cursor = next
		if cursor == 0 {
			break
		}
	}
	out := make([]keyFamily, 0, len(byName))
	for _, f := range byName {
		out = append(out, *f)
	}
	slices.SortFunc(out, func(a, b keyFamily) int {
		if a.bytes != b.bytes {
			return int(b.bytes - a.bytes)
		}
		return strings.Compare(a.pattern, b.pattern)
	})
	return out, gone
}

// backlogRun is one side's figures.
type backlogRun struct {
	bytesPerSend float64 // used_memory's growth per waiting send
}

// measureBacklog is one side's measurement: enqueue (which enqueues the
// sends on rdb's server and returns when all are), then the figures,
// logged on sum and in the family table. rdb must be the only client
// connected when it is called.
func measureBacklog(t *testing.T, sum *stressSummary, rdb *redis.Client, sends int, enqueue func()) backlogRun {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())
	before := readRedisMemory(t, rdb)
	start := time.Now()
	enqueue()
	enqueued := time.Since(start)
	waitClients(t, rdb, before.clients)
	// Before the pause: asynq's Inspector reads by script, which a write
	// pause holds.
	qi, err := asynq.NewInspectorFromRedisClient(rdb).GetQueueInfo(tasks.DefaultQueue(tasks.TypeWhatsAppSend))
	require.NoError(t, err)
	require.Equal(t, sends, qi.Pending+qi.Scheduled, "waiting sends (pending %d, scheduled %d, active %d, retry %d, archived %d)",
		qi.Pending, qi.Scheduled, qi.Active, qi.Retry, qi.Archived)
	resume := pauseWrites(t, rdb)
	after := settledMemory(t, rdb)
	keys, err := rdb.DBSize(ctx).Result()
	require.NoError(t, err)

	scanStart := time.Now()
	families, gone := keyFamilies(t, rdb)
	scanned := time.Since(scanStart)
	resume()
	var usageSum int64
	live := 0
	for _, f := range families {
		usageSum += f.bytes
		live += f.keys
	}

	n := float64(sends)
	r := backlogRun{bytesPerSend: float64(after.used-before.used) / n}
	sum.add("sends", sends)
	sum.add("enqueue_s", enqueued)
	sum.add("enqueue_per_s", n/enqueued.Seconds())
	sum.add("pending", qi.Pending)
	sum.add("scheduled", qi.Scheduled)
	sum.add("used_memory_before", before.used)
	sum.add("used_memory_after", after.used)
	sum.add("bytes_per_send", r.bytesPerSend)
	sum.add("dataset_bytes_per_send", float64(after.dataset-before.dataset)/n)
	sum.add("scripts_bytes", after.scripts-before.scripts)
	sum.add("keyspace_table_bytes_per_send", float64(after.main-before.main)/n)
	sum.add("expiry_table_bytes_per_send", float64(after.expires-before.expires)/n)
	sum.add("keys", keys)
	sum.add("keys_per_send", float64(keys)/n)
	sum.add("memory_usage_sum_bytes_per_send", float64(usageSum)/n)
	sum.add("families", len(families))
	sum.add("keys_live", live)
	sum.add("keys_gone_while_read", gone)
	sum.add("family_scan_s", scanned)
	sum.report(t)
	logFamilies(t, families, usageSum, before, after, sends)
	return r
}

// logFamilies logs the family table: each family's type, keys, keys with
// an expiry, MEMORY USAGE in all and per send, its share of the sum and
// one of its keys;
// then the sum, the growth of the keyspace's hash tables (MEMORY STATS:
// the main table's entries are in MEMORY USAGE too, its buckets and the
// expiry table are not) and used_memory's growth.
func logFamilies(t *testing.T, families []keyFamily, usageSum int64, before, after redisMemory, sends int) {
	t.Helper()
	per := func(n int64) float64 { return float64(n) / float64(sends) }
	var b strings.Builder
	fmt.Fprintf(&b, "\n  %-46s %-6s %8s %8s %12s %10s %6s  %s", "family", "type", "keys", "expiring", "bytes", "bytes/send", "share", "e.g.")
	for _, f := range families {
		fmt.Fprintf(&b, "\n  %-46s %-6s %8d %8d %12d %10.1f %5.1f%%  %s", f.pattern, f.typ, f.keys, f.expiring, f.bytes,
			per(f.bytes), 100*float64(f.bytes)/float64(max(usageSum, 1)), f.example)
	}
	row := func(name string, n int64) {
		fmt.Fprintf(&b, "\n  %-46s %-6s %8s %8s %12d %10.1f", name, "", "", "", n, per(n))
	}
	row("MEMORY USAGE sum (SAMPLES 0, exact)", usageSum)
	row("keyspace table growth (MEMORY STATS main)", after.main-before.main)
	row("expiry table growth (MEMORY STATS expires)", after.expires-before.expires)
	row("used_memory growth", after.used-before.used)
	t.Logf("backlog memory by key family, %d waiting sends:%s", sends, b.String())
}

// TestBenchBacklogMemory is the issue 22 memory measurement (see the
// comment on benchBacklogEnv): the Redis memory per waiting send of a
// backlog enqueued with `sluice send` against plain asynq's for the same
// sends. It asserts only that every send waits in the queue; the figures
// are logged.
func TestBenchBacklogMemory(t *testing.T) {
	sz := backlogSetup(t)
	size := fmt.Sprintf("%d sends over %d numbers", sz.sends, sz.numbers)

	// 1. Sluice: `sluice send`, no worker.
	var sluice backlogRun
	t.Run("sluice", func(t *testing.T) {
		bin := sluiceBinary(t)
		sum := newStressSummary(t, stressScale{name: size}, 0)
		rs := redistest.Start(t)
		rdb := rs.Client(t)
		env := workerEnv(rs)
		dir := t.TempDir()
		// No worker runs and no send leaves: the provider's URL is never
		// called.
		cfgPath := filepath.Join(dir, "sluice.yaml")
		cfg := "channels:\n  whatsapp:\n    base_url: \"http://127.0.0.1:9\"\n  sms:\n    enabled: false\n  webhook:\n    enabled: false\n  http:\n    enabled: false\n"
		require.NoError(t, os.WriteFile(cfgPath, []byte(cfg), 0o600))
		csvs := make([]string, sz.numbers)
		for n := range csvs {
			csvs[n] = filepath.Join(dir, fmt.Sprintf("number-%d.csv", n))
			writeCSV(t, csvs[n], sz.perNumber(n), func(i int) string { return fmt.Sprintf("%s,Ann,%d", recipientN(i), i) })
		}
		sluice = measureBacklog(t, sum, rdb, sz.sends, func() {
			sendCampaigns(t, bin, env, cfgPath, csvs)
		})
	})
	if t.Failed() {
		return
	}

	// 2. Plain asynq, the same sends, on a fresh redis-server.
	var plain backlogRun
	t.Run("plain_asynq", func(t *testing.T) {
		sum := newStressSummary(t, stressScale{name: size}, 0)
		rs := redistest.Start(t)
		rdb := rs.Client(t)
		plain = measureBacklog(t, sum, rdb, sz.sends, func() {
			// Its own connection, closed when done: measureBacklog waits
			// for the enqueuing clients to leave.
			c := redis.NewClient(&redis.Options{Addr: rs.Addr})
			defer c.Close()
			client := asynq.NewClientFromRedisClient(c)
			ctx := context.Background()
			enqueuePlain(ctx, t, client, sz.numbers, sz.perNumber)
		})
	})
	if t.Failed() {
		return
	}

	// 3. The ratio the issue asks to report.
	sum := newStressSummary(t, stressScale{name: size}, 0)
	sum.add("memory_per_send_ratio", sluice.bytesPerSend/plain.bytesPerSend)
	sum.report(t)
}
