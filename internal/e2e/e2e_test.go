//go:build unix

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/emulator"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testutil"
	"github.com/sluice-dev/sluice/tasks"
)

// TestMain removes the built binary and fails the package if a test leaves
// goroutines behind (emulator listeners, HTTP connections, process waiters).
func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	if code == 0 {
		// go-redis redials a node that refused a dial once a second, until
		// it answers or its pool is seen closed after a second's sleep; the
		// chaos scenarios kill masters for good, and a cluster client's
		// pool for one may outlive the test by that second or more.
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

// sluiceBinary builds ./cmd/sluice once per test binary, without -race: the
// workers are the system under test, the race detector runs in the tests'
// own packages. SLUICE_E2E_BIN names a built one instead: a machine with no
// Go toolchain runs the tests from a bundle (make device-bundle).
func sluiceBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if bin := os.Getenv("SLUICE_E2E_BIN"); bin != "" {
			if _, err := os.Stat(bin); err != nil {
				buildErr = fmt.Errorf("SLUICE_E2E_BIN: %w", err)
				return
			}
			buildBin = bin
			return
		}
		root, err := moduleRoot()
		if err != nil {
			buildErr = err
			return
		}
		if buildDir, err = os.MkdirTemp("", "sluice-e2e-"); err != nil {
			buildErr = err
			return
		}
		bin := filepath.Join(buildDir, "sluice")
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/sluice")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/sluice in %s: %w\n%s", root, err, out)
			return
		}
		buildBin = bin
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// moduleRoot walks up from the working directory (the package directory
// under go test) to the directory holding go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// syncBuffer is a bytes.Buffer that a process's output copier may write
// while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// worker is one `sluice serve` process.
type worker struct {
	name      string
	cmd       *exec.Cmd
	httpAddr  string // its /metrics listener
	stdout    syncBuffer
	stderr    syncBuffer
	done      chan struct{} // closed when the process has exited
	waitErr   error         // cmd.Wait's result, set before done is closed
	signalled bool
}

// exited reports whether the process has exited.
func (w *worker) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// startWorker runs `sluice serve --config cfgPath` with env added to the
// test's environment. At cleanup the process is killed if still running and
// its output is logged if the test failed.
func startWorker(t *testing.T, bin, name, cfgPath, httpAddr string, env []string) *worker {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--config", cfgPath)
	cmd.Env = append(os.Environ(), env...) // the last value of a duplicate key wins
	return startProcess(t, name, httpAddr, cmd)
}

// startProcess starts cmd as the worker name. At cleanup the process is
// killed if still running and its output is logged if the test failed.
func startProcess(t *testing.T, name, httpAddr string, cmd *exec.Cmd) *worker {
	t.Helper()
	w := &worker{name: name, httpAddr: httpAddr, done: make(chan struct{}), cmd: cmd}
	w.cmd.Stdout = &w.stdout
	w.cmd.Stderr = &w.stderr
	require.NoError(t, w.cmd.Start(), "start %s", name)
	go func() {
		w.waitErr = w.cmd.Wait()
		close(w.done)
	}()
	t.Cleanup(func() {
		if !w.exited() {
			_ = w.cmd.Process.Kill()
		}
		<-w.done
		if t.Failed() {
			t.Logf("--- %s (pid %d) exit: %v\nstdout:\n%s\nstderr:\n%s", name, w.cmd.Process.Pid, w.waitErr, w.stdout.String(), w.stderr.String())
		}
	})
	return w
}

// workerEnv is the environment of a `sluice serve` against rs and the
// emulators' default credentials.
func workerEnv(rs *redistest.Server) []string { return workerEnvURL(rs.URL()) }

// workerEnvURL is workerEnv with REDIS_URL url ("": unset, for a worker
// whose configuration names a cluster or a Sentinel).
func workerEnvURL(url string) []string {
	return []string{
		"REDIS_URL=" + url,
		"WHATSAPP_TOKEN=" + emulator.DefaultWhatsAppToken,
		"TWILIO_ACCOUNT_SID=" + emulator.DefaultTwilioAccountSID,
		"TWILIO_AUTH_TOKEN=" + emulator.DefaultTwilioAuthToken,
		"WEBHOOK_SECRET=" + emulator.DefaultWebhookSecret,
	}
}

// freeAddrs returns n distinct free loopback addresses. All n listeners are
// open at once while the ports are picked, so the kernel cannot hand the
// same just-closed port out twice (it did: two workers got one port).
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		addrs[i] = ln.Addr().String()
	}
	return addrs
}

// Volumes of the end-to-end run.
const (
	phoneNumberID = "106540352242922"
	whatsAppSends = 480 // 6 windows at 80/s from one phone number
	smsPerFrom    = 20  // 20 windows at 1/s per From
	webhookSends  = 40  // 2 receivers at 10/s
)

var smsFroms = []string{"+12025550100", "+12125550100", "+13055550100"}

// recipient returns the i-th of 500 distinct valid US numbers:
// +1{202,212,305,312,415}55501{00..99}. None ends in the emulator's magic
// suffixes 0000 and 0500.
func recipient(i int) string {
	areas := []string{"202", "212", "305", "312", "415"}
	return fmt.Sprintf("+1%s55501%02d", areas[i/100%len(areas)], i%100)
}

// TestThreeWorkersNeverExceedTheCap runs three `sluice serve` processes on
// one Redis against the emulators with the real provider limits, and checks
// that together they never go over a provider's cap (the emulators count
// any 1-second span and would answer 130429/20429/429: none in the full
// run, a busy host's few in the small one, checkThrottles), send every
// message exactly once, spread the work over all three processes, and shut
// down gracefully on SIGTERM.
//
// With SLUICE_TEST_CLUSTER=1 (make test-cluster) the same run goes on a
// 3-master Redis Cluster and through a Sentinel, the workers configured
// with redis.mode alone.
func TestThreeWorkersNeverExceedTheCap(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds the binary and runs for about 20s")
	}
	kinds := []string{config.RedisSingle}
	if os.Getenv("SLUICE_TEST_CLUSTER") == "1" {
		kinds = append(kinds, config.RedisCluster, config.RedisSentinel)
	}
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) { threeWorkers(t, kind) })
	}
}

// e2eRedis starts a Redis of kind (config.RedisSingle, RedisCluster,
// RedisSentinel) for the test: a client on it, the redis section of the
// workers' configuration, and REDIS_URL for a single server ("" else).
func e2eRedis(t *testing.T, kind string) (redis.UniversalClient, string, string) {
	t.Helper()
	switch kind {
	case config.RedisCluster:
		c := redistest.StartCluster(t, 3, 0)
		return c.Client(t), fmt.Sprintf("redis:\n  mode: cluster\n  addrs: [%s]\n", strings.Join(c.Addrs(), ", ")), ""
	case config.RedisSentinel:
		st := redistest.StartSentinel(t)
		return st.Client(t), fmt.Sprintf("redis:\n  mode: sentinel\n  addrs: [%s]\n  master_name: %s\n", st.Sentinel.Addr, st.MasterName), ""
	}
	rs := redistest.Start(t)
	return rs.Client(t), "", rs.URL()
}

func threeWorkers(t *testing.T, kind string) {
	start := time.Now()
	bin := sluiceBinary(t)
	t.Logf("sluice binary ready in %v", time.Since(start).Round(10*time.Millisecond))
	rdb, redisYAML, redisURL := e2eRedis(t, kind)

	emu, err := emulator.Start(emulator.Options{WebhookEndpoints: 2})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, emu.Close()) })

	env := workerEnvURL(redisURL)
	dir := t.TempDir()
	workers := make([]*worker, 3)
	addrs := freeAddrs(t, len(workers))
	// On a cluster and through a Sentinel, each sender's limits and pauses
	// take a scope of their own (spread_by), the setting a cluster wants:
	// the number's and the senders' paces in their scopes, the daily
	// window, the SMS account's concurrency and the channels' pauses in
	// the channels'.
	spread := map[string]string{}
	if kind != config.RedisSingle {
		// With queue groups too: these sends come from a plain asynq client,
		// so they are in the channels' own queues, which the workers serve
		// beside the groups.
		spread = map[string]string{"whatsapp": "\n    spread_by: phone_number_id\n    queue_groups: 6", "sms": "\n    spread_by: sender\n    queue_groups: 6", "webhook": "\n  webhook:\n    spread_by: host\n    queue_groups: 6"}
	}
	for i := range workers {
		addr := addrs[i]
		// Default limits and key prefix: the provider limits are the point.
		cfg := redisYAML + fmt.Sprintf(`http:
  listen: %q
worker:
  concurrency: 20
  shutdown_timeout: 5s
egress:
  allow_cidrs: ["127.0.0.0/8"] # the emulated webhook receivers
channels:
  whatsapp:
    base_url: %q%s
  sms:
    base_url: %q%s%s
  http:
    enabled: false
`, addr, emu.WhatsAppURL(), spread["whatsapp"], emu.TwilioURL(), spread["sms"], spread["webhook"])
		path := filepath.Join(dir, fmt.Sprintf("sluice-%d.yaml", i))
		require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
		workers[i] = startWorker(t, bin, fmt.Sprintf("worker %d", i), path, addr, env)
	}

	insp := asynq.NewInspectorFromRedisClient(rdb)
	// Every process is its own asynq server; wait until all three have
	// registered (their first heartbeat) before enqueuing, so none gets a
	// head start on the backlog.
	waitFor(t, workers, 2*time.Minute, "3 asynq servers registered", func() (bool, string) {
		pids, err := serverPIDs(insp)
		if err != nil {
			return false, err.Error()
		}
		return len(pids) == 3, fmt.Sprintf("servers with pids %v", pids)
	})
	require.ElementsMatch(t, workerPIDs(workers), mustServerPIDs(t, insp), "the registered asynq servers are the three processes")
	t.Logf("three workers registered %v after the test started", time.Since(start).Round(10*time.Millisecond))

	// Enqueue everything at once.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := asynq.NewClientFromRedisClient(rdb)
	want := map[string][]string{} // channel → idempotency keys
	for i := range whatsAppSends {
		key := fmt.Sprintf("e2e-wa-%03d", i)
		_, err := tasks.EnqueueWhatsAppSend(ctx, client, tasks.WhatsAppSend{
			PhoneNumberID:  phoneNumberID,
			To:             recipient(i),
			Template:       &tasks.Template{Name: "order_update", Language: "en_US", Parameters: []string{"Ann", strconv.Itoa(i)}},
			IdempotencyKey: key,
		})
		require.NoError(t, err)
		want[emulator.ChannelWhatsApp] = append(want[emulator.ChannelWhatsApp], key)
	}
	for i := range smsPerFrom * len(smsFroms) {
		key := fmt.Sprintf("e2e-sms-%02d", i)
		_, err := tasks.EnqueueSMSSend(ctx, client, tasks.SMSSend{
			From:           smsFroms[i%len(smsFroms)],
			To:             recipient(i),
			Body:           fmt.Sprintf("Order %d has shipped.", i),
			IdempotencyKey: key,
		})
		require.NoError(t, err)
		want[emulator.ChannelSMS] = append(want[emulator.ChannelSMS], key)
	}
	hooks := emu.WebhookURLs()
	for i := range webhookSends {
		key := fmt.Sprintf("e2e-wh-%02d", i)
		_, err := tasks.EnqueueWebhookDeliver(ctx, client, tasks.WebhookDeliver{
			URL:            hooks[i%len(hooks)],
			EventType:      "order.updated",
			Payload:        json.RawMessage(fmt.Sprintf(`{"order":%d}`, i)),
			Endpoint:       fmt.Sprintf("receiver-%d", i%len(hooks)),
			IdempotencyKey: key,
		})
		require.NoError(t, err)
		want[emulator.ChannelWebhook] = append(want[emulator.ChannelWebhook], key)
	}
	enqueued := time.Now()

	// Done when every message reached its provider and every task is
	// completed in asynq (a task completes after its handler counted it).
	queues := map[string]string{emulator.ChannelWhatsApp: "whatsapp", emulator.ChannelSMS: "sms", emulator.ChannelWebhook: "webhook"}
	// On a cluster and a Sentinel the senders' limiter keys take scopes
	// of their own: seen while they send (a paced key expires soon after).
	spreadSeen := map[string]bool{}
	if kind != config.RedisSingle {
		for _, tag := range []string{"{whatsapp/" + phoneNumberID + "}", "{sms/" + smsFroms[0] + "}", "{webhook/127.0.0.1%3A"} {
			spreadSeen[tag] = false
		}
	}
	// 20 SMS a sender at 1/s is the longest: 20s on an idle host.
	waitFor(t, workers, hangBound(20*time.Second), "all sends delivered and completed", func() (bool, string) {
		for tag, seen := range spreadSeen {
			if !seen {
				ks, err := testutil.AllKeys(ctx, rdb, "sluice:"+tag+"*")
				spreadSeen[tag] = err == nil && len(ks) > 0
			}
		}
		st := emu.Stats()
		var b strings.Builder
		ok := true
		for ch, keys := range want {
			qi, err := insp.GetQueueInfo(queues[ch])
			if err != nil {
				return false, err.Error()
			}
			// Size counts completed tasks too.
			left := qi.Pending + qi.Active + qi.Scheduled + qi.Retry + qi.Archived
			fmt.Fprintf(&b, "%s: unique %d/%d, throttled %d, completed %d, not completed %d (archived %d); ",
				ch, st[ch].Unique, len(keys), st[ch].Throttled, qi.Completed, left, qi.Archived)
			ok = ok && st[ch].Unique == len(keys) && qi.Completed == len(keys) && left == 0
		}
		return ok, b.String()
	})
	t.Logf("all %d sends delivered %v after enqueueing", len(want["whatsapp"])+len(want["sms"])+len(want["webhook"]), time.Since(enqueued).Round(10*time.Millisecond))

	// Still running: the three servers are registered.
	require.ElementsMatch(t, workerPIDs(workers), mustServerPIDs(t, insp), "three asynq servers while running")

	// No rejection, failure or duplicate on any channel; provider throttles
	// (a late send on a busy host) as checkThrottles allows.
	stats := emu.Stats()
	for ch, keys := range want {
		wantStats := emulator.ChannelStats{Accepted: len(keys), Unique: len(keys)}
		got := stats[ch]
		checkThrottles(t, ch, got, len(keys), nil)
		got.Throttled, got.ThrottledByCode = 0, nil
		if diff := cmp.Diff(wantStats, got); diff != "" {
			t.Errorf("%s emulator stats, throttles aside (-want +got):\n%s", ch, diff)
		}
	}

	// Every idempotency key was accepted exactly once.
	records := emu.Records()
	gotKeys := map[string]map[string]int{}
	for _, r := range records {
		if gotKeys[r.Channel] == nil {
			gotKeys[r.Channel] = map[string]int{}
		}
		gotKeys[r.Channel][r.IdempotencyKey]++
	}
	for ch, keys := range want {
		wantKeys := map[string]int{}
		for _, k := range keys {
			wantKeys[k] = 1
		}
		if diff := cmp.Diff(wantKeys, gotKeys[ch]); diff != "" {
			t.Errorf("%s: accepted idempotency keys and their counts (-want +got):\n%s", ch, diff)
		}
	}

	// Per sender, no 1-second span, wherever it starts, over the provider's
	// cap (the emulators refuse such a send; this checks what they accepted).
	caps := map[string]int{emulator.ChannelWhatsApp: 80, emulator.ChannelSMS: 1, emulator.ChannelWebhook: 10}
	for ch, limit := range caps {
		for sender, n := range emulator.MaxInSpan(records, ch, time.Second) {
			if n > limit {
				t.Errorf("%s sender %s: %d accepted within one second, cap %d", ch, sender, n, limit)
			}
		}
	}
	for tag, ok := range spreadSeen {
		require.True(t, ok, "no limiter key under %s while sending: spread_by did not spread", tag)
	}
	perSecond := countPerSecond(records)
	require.Len(t, perSecond[emulator.ChannelWhatsApp], 1, "one WhatsApp sender")
	require.Len(t, perSecond[emulator.ChannelSMS], len(smsFroms), "SMS senders")
	require.Len(t, perSecond[emulator.ChannelWebhook], len(hooks), "webhook receivers")
	logRates(t, records, perSecond)

	// The work was spread: every process sent, and together they sent each
	// message once (sluice_tasks_total{outcome="sent"} per process).
	hc := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	total := map[string]int{}
	for _, w := range workers {
		sent := snapshot(t, hc, []*worker{w}, rdb).sent
		n := 0
		for ch, c := range sent {
			total[ch] += c
			n += c
		}
		t.Logf("%s (pid %d) sent %v", w.name, w.cmd.Process.Pid, sent)
		require.Positive(t, n, "%s sent nothing: the work was not spread", w.name)
	}
	wantTotal := map[string]int{}
	for ch, keys := range want {
		wantTotal[ch] = len(keys)
	}
	if diff := cmp.Diff(wantTotal, total); diff != "" {
		t.Errorf("sends counted by the workers' metrics, summed over processes (-want +got):\n%s", diff)
	}

	// Graceful shutdown: SIGTERM, exit status 0, servers deregistered. The
	// workers are idle, so they exit at once on an idle host; the timeout
	// bounds a hang (shutdown_timeout is 5s).
	for _, w := range workers {
		require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM), w.name)
		w.signalled = true
	}
	stopping := time.Now()
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for _, w := range workers {
		select {
		case <-w.done:
		case <-timeout.C:
			t.Fatalf("%s did not exit within a minute of SIGTERM", w.name)
		}
		require.NoError(t, w.waitErr, "%s: exit status after SIGTERM", w.name)
		require.Equal(t, 0, w.cmd.ProcessState.ExitCode(), w.name)
		require.Contains(t, w.stderr.String(), "stopped", "%s logged its shutdown", w.name)
	}
	t.Logf("all three exited with status 0 %v after SIGTERM", time.Since(stopping).Round(10*time.Millisecond))
	require.Empty(t, mustServerPIDs(t, insp), "servers deregistered on shutdown")
}

// waitFor polls cond every 100ms until it holds, failing the test at the
// deadline or as soon as a worker exits on its own. Redis state and the
// emulators' counters have no change notification to wait on.
func waitFor(t *testing.T, workers []*worker, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, status := cond()
		if ok {
			return
		}
		for _, w := range workers {
			if w.exited() && !w.signalled {
				t.Fatalf("waiting for %s: %s exited: %v", what, w.name, w.waitErr)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v: %s", what, timeout, status)
		}
		<-tick.C
	}
}

func serverPIDs(insp *asynq.Inspector) ([]int, error) {
	servers, err := insp.Servers()
	if err != nil {
		return nil, err
	}
	pids := []int{}
	for _, s := range servers {
		pids = append(pids, s.PID)
	}
	slices.Sort(pids)
	return pids, nil
}

func mustServerPIDs(t *testing.T, insp *asynq.Inspector) []int {
	t.Helper()
	pids, err := serverPIDs(insp)
	require.NoError(t, err)
	return pids
}

func workerPIDs(workers []*worker) []int {
	pids := make([]int, 0, len(workers))
	for _, w := range workers {
		pids = append(pids, w.cmd.Process.Pid)
	}
	return pids
}

// countPerSecond groups records by channel, sender and calendar second.
func countPerSecond(records []emulator.Record) map[string]map[string]map[int64]int {
	out := map[string]map[string]map[int64]int{}
	for _, r := range records {
		if out[r.Channel] == nil {
			out[r.Channel] = map[string]map[int64]int{}
		}
		if out[r.Channel][r.Sender] == nil {
			out[r.Channel][r.Sender] = map[int64]int{}
		}
		out[r.Channel][r.Sender][r.At.Unix()]++
	}
	return out
}

// logRates logs each sender's per-second counts and the WhatsApp rate.
func logRates(t *testing.T, records []emulator.Record, perSecond map[string]map[string]map[int64]int) {
	t.Helper()
	for _, ch := range []string{emulator.ChannelWhatsApp, emulator.ChannelSMS, emulator.ChannelWebhook} {
		for sender, secs := range perSecond[ch] {
			keys := slices.Sorted(maps.Keys(secs))
			var b strings.Builder
			peak := 0
			for _, s := range keys {
				fmt.Fprintf(&b, " %d:%d", s-keys[0], secs[s])
				peak = max(peak, secs[s])
			}
			t.Logf("%s %s: max %d per second over %d seconds; per second from the first:%s", ch, sender, peak, len(keys), b.String())
		}
	}
	first, last, n := span(records, func(r emulator.Record) bool { return r.Channel == emulator.ChannelWhatsApp })
	if n > 1 {
		secs := last.Unix() - first.Unix() + 1
		t.Logf("whatsapp: %d messages in %d calendar seconds = %.1f msg/s (cap 80); first to last %v = %.1f msg/s",
			n, secs, float64(n)/float64(secs), last.Sub(first).Round(time.Millisecond), float64(n-1)/last.Sub(first).Seconds())
	}
}
