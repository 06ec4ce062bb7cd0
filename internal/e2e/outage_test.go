//go:build unix

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/emulator"
	"github.com/sluice-dev/sluice/internal/redistest"
)

// Volumes of TestRedisOutage: issue 19's campaign.
const (
	outageWhatsApp   = 1000 // to one number, 1,000 distinct recipients
	outageSMS        = 500
	outageSMSSenders = 20
	// outageAt is how many WhatsApp sends the emulator has accepted when
	// Redis is stopped: mid-campaign.
	outageAt = 300
	// outageSettle bounds the wait for the campaign to finish after Redis
	// is back: the tasks that were in flight come back through asynq's
	// recoverer, up to about 2 minutes after their lease ended.
	outageSettle = 5 * time.Minute
)

// TestRedisOutage measures what a Redis outage mid-campaign costs
// (docs/redis-outages.md): a private redis-server with appendonly yes and
// appendfsync everysec, the strict emulators, 2 `sluice serve` processes,
// 1,000 WhatsApp sends and 500 SMS over 20 senders through `sluice send`.
// Once 300 WhatsApp sends are accepted, Redis is stopped (mode shutdown:
// SHUTDOWN, as `redis-cli shutdown`; mode kill: SIGKILL, as `kill -9`) for
// the outage's length, then started again from the same AOF. The test waits
// (at most 5 minutes after the restart) until every task is completed and
// reports per channel: lost (rows the emulator never accepted), duplicates
// (rows it accepted more than once), throttle responses, the sends the
// workers kept while Redis was down and the reruns they completed without
// sending, and the time from enqueue to the last completion.
//
// A measurement, never part of `make test`: it runs only with
// SLUICE_E2E_OUTAGE=1 (`make e2e-outage`, about 3 minutes per outage).
// SLUICE_E2E_OUTAGE_MODES (default "shutdown,kill") and
// SLUICE_E2E_OUTAGE_DOWN (default "10s,30s,60s") choose the runs; each is a
// subtest named mode_length ("shutdown_10s"). It fails on a lost send, and
// on a duplicate after a SHUTDOWN (which syncs the AOF); after a kill -9 the
// AOF may miss up to a second of writes, and duplicates are only reported.
func TestRedisOutage(t *testing.T) {
	if os.Getenv("SLUICE_E2E_OUTAGE") != "1" {
		t.Skip("a measurement of several minutes per outage: set SLUICE_E2E_OUTAGE=1 (make e2e-outage)")
	}
	modes := strings.Split(envOr("SLUICE_E2E_OUTAGE_MODES", "shutdown,kill"), ",")
	var downs []time.Duration
	for _, s := range strings.Split(envOr("SLUICE_E2E_OUTAGE_DOWN", "10s,30s,60s"), ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		require.NoError(t, err, "SLUICE_E2E_OUTAGE_DOWN")
		downs = append(downs, d)
	}
	for _, mode := range modes {
		mode = strings.TrimSpace(mode)
		require.Contains(t, []string{"shutdown", "kill"}, mode, "SLUICE_E2E_OUTAGE_MODES")
		for _, down := range downs {
			t.Run(fmt.Sprintf("%s_%s", mode, down), func(t *testing.T) { runOutage(t, mode, down) })
		}
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func runOutage(t *testing.T, mode string, down time.Duration) {
	rs := redistest.StartWith(t, redistest.Options{AppendOnly: true})
	rdb := rs.Client(t)
	emu, err := emulator.Start(emulator.Options{}) // strict by default
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, emu.Close()) })
	bin, env, dir := sluiceBinary(t), workerEnv(rs), t.TempDir()
	var workers []*worker
	var cfgPath string
	for i, addr := range freeAddrs(t, 2) {
		cfg := fmt.Sprintf("http:\n  listen: %q\nworker:\n  shutdown_timeout: 5s\nchannels:\n  whatsapp:\n    base_url: %q\n  sms:\n    base_url: %q\n  webhook:\n    enabled: false\n  http:\n    enabled: false\n",
			addr, emu.WhatsAppURL(), emu.TwilioURL())
		cfgPath = filepath.Join(dir, fmt.Sprintf("sluice-%d.yaml", i))
		require.NoError(t, os.WriteFile(cfgPath, []byte(cfg), 0o600))
		workers = append(workers, startWorker(t, bin, fmt.Sprintf("worker %d", i), cfgPath, addr, env))
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	waitFor(t, workers, 30*time.Second, "2 asynq servers registered", func() (bool, string) {
		pids, err := serverPIDs(insp)
		return err == nil && len(pids) == 2, fmt.Sprint(pids, err)
	})

	start := time.Now()
	sendIssue19Campaign(t, bin, env, cfgPath, dir, outageWhatsApp, outageSMS, outageSMSSenders)
	t.Logf("enqueued %d WhatsApp and %d SMS rows in %v", outageWhatsApp, outageSMS, time.Since(start).Round(time.Millisecond))

	waitFor(t, workers, 60*time.Second, "the campaign under way", func() (bool, string) {
		n := emu.Stats()[emulator.ChannelWhatsApp].Unique
		return n >= outageAt, strconv.Itoa(n)
	})
	before := emu.Stats()
	stopped := time.Now()
	if mode == "kill" {
		require.NoError(t, rs.Kill())
	} else {
		require.NoError(t, rs.Shutdown())
	}
	// A real wait: the outage's length is what is measured.
	time.Sleep(down)
	require.NoError(t, rs.Restart(), "restart Redis from its AOF")
	restarted := time.Now()
	t.Logf("Redis stopped (%s) %v after enqueueing, at whatsapp %d/%d and sms %d/%d accepted; down %v",
		mode, stopped.Sub(start).Round(time.Millisecond), before[emulator.ChannelWhatsApp].Unique, outageWhatsApp,
		before[emulator.ChannelSMS].Unique, outageSMS, restarted.Sub(stopped).Round(time.Millisecond))

	// Done when no task is left to run (archived ones count as lost).
	finished, status := waitCampaignDone(t, insp, emu, workers, outageWhatsApp, outageSMS, restarted, outageSettle, "Redis' restart")

	// The report.
	hc := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	already := map[string]int{}
	kept, reruns := 0, 0
	for _, w := range workers {
		for ch, n := range outcomeCounts(t, hc, w, "already_sent") {
			already[ch] += n
		}
		kept += strings.Count(w.stderr.String(), "kept to record when Redis answers")
		reruns += strings.Count(w.stderr.String(), "task came back after its send")
	}
	st := emu.Stats()
	lost := 0
	var b strings.Builder
	for _, c := range []struct {
		ch   string
		want int
	}{{emulator.ChannelWhatsApp, outageWhatsApp}, {emulator.ChannelSMS, outageSMS}} {
		s := st[c.ch]
		l := max(c.want-s.Unique, 0)
		lost += l
		fmt.Fprintf(&b, "%s: %d rows, lost %d, duplicates %d, throttle responses %d %v, already_sent %d; ",
			c.ch, c.want, l, s.Duplicates, s.Throttled, s.ThrottledByCode, already[c.ch])
	}
	total := "did not finish"
	if !finished.IsZero() {
		total = fmt.Sprintf("%v (last completion %v after the restart)", finished.Sub(start).Round(time.Second), finished.Sub(restarted).Round(time.Second))
	}
	duplicates := st[emulator.ChannelWhatsApp].Duplicates + st[emulator.ChannelSMS].Duplicates
	t.Logf("outage %s for %v: %ssends kept in memory while Redis was down %d, reruns completed without a send %d; total time %s; %s",
		mode, down, b.String(), kept, reruns, total, status)
	if lost > 0 {
		t.Errorf("%d rows were never accepted by the emulators", lost)
	}
	if duplicates > 0 && mode == "shutdown" {
		t.Errorf("%d rows were accepted twice after a SHUTDOWN, which loses no write", duplicates)
	}
}

// sendIssue19Campaign enqueues issue 19's campaign with `sluice send`
// (cfgPath's configuration, files in dir): wa WhatsApp sends to numberA,
// a template to distinct recipients, and sms SMS over senders From numbers.
func sendIssue19Campaign(t *testing.T, bin string, env []string, cfgPath, dir string, wa, sms, senders int) {
	t.Helper()
	froms := make([]string, senders)
	for i := range froms {
		froms[i] = fmt.Sprintf("+1202555%04d", 1000+i)
	}
	waCSV, smsCSV := filepath.Join(dir, "whatsapp.csv"), filepath.Join(dir, "sms.csv")
	writeCSV(t, waCSV, wa, func(i int) string { return fmt.Sprintf("%s,Ann,%d", recipientN(i), i) })
	writeCSV(t, smsCSV, sms, func(i int) string { return fmt.Sprintf("%s,Bo,%d", recipientN(i), i) })
	runCLI(t, bin, env, "--config", cfgPath, "send", "--channel", "whatsapp", "--csv", waCSV,
		"--phone-number-id", numberA, "--template", "order_update", "--lang", "en_US", "--params", "name,order_id")
	runCLI(t, bin, env, "--config", cfgPath, "send", "--channel", "sms", "--csv", smsCSV,
		"--from", strings.Join(froms, ","), "--body", "Hi {name}, order {order_id} shipped.")
}

// waitCampaignDone polls until no task of the whatsapp and sms queues is
// left to run, failing the test as soon as one of workers exits, and
// reports (with an error) a campaign unfinished settle after from (since
// says what from is). It returns when the campaign finished (zero if it
// did not) and its last status: the emulators' counts against wa and sms
// sends, and the queues'.
func waitCampaignDone(t *testing.T, insp *asynq.Inspector, emu *emulator.Server, workers []*worker, wa, sms int, from time.Time, settle time.Duration, since string) (time.Time, string) {
	t.Helper()
	deadline := from.Add(settle)
	for {
		left, s, err := tasksLeftOn(context.Background(), insp)
		st := emu.Stats()
		status := fmt.Sprintf("whatsapp %d/%d, sms %d/%d accepted; %s", st[emulator.ChannelWhatsApp].Unique, wa,
			st[emulator.ChannelSMS].Unique, sms, s)
		if err == nil && left == 0 {
			return time.Now(), status
		}
		for _, w := range workers {
			require.False(t, w.exited(), "%s exited: %v", w.name, w.waitErr)
		}
		if time.Now().After(deadline) {
			t.Errorf("the campaign did not finish within %v of %s: %s", settle, since, status)
			return time.Time{}, status
		}
		time.Sleep(250 * time.Millisecond) // Redis and the emulators have no change notification
	}
}

// tasksLeft counts the tasks of the whatsapp and sms queues that are not
// completed: pending, active, scheduled, retry and archived.
func tasksLeft(insp *asynq.Inspector) (int, string, error) {
	left := 0
	var b strings.Builder
	qs, err := campaignQueues(insp)
	if err != nil {
		return 0, err.Error(), err
	}
	for _, q := range qs {
		qi, err := insp.GetQueueInfo(q)
		if err != nil {
			return 0, err.Error(), err
		}
		left += qi.Pending + qi.Active + qi.Scheduled + qi.Retry + qi.Archived
		fmt.Fprintf(&b, "%s: pending %d, active %d, scheduled %d, retry %d, archived %d, completed %d; ",
			q, qi.Pending, qi.Active, qi.Scheduled, qi.Retry, qi.Archived, qi.Completed)
	}
	return left, b.String(), nil
}

// campaignQueues are the whatsapp and sms queues and their queue groups
// ("whatsapp.g3", channels.<name>.queue_groups) that exist in asynq (a
// queue that never held a task fails GetQueueInfo; with queue groups the
// plain queues may hold none), sorted.
func campaignQueues(insp *asynq.Inspector) ([]string, error) {
	have, err := insp.Queues()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, q := range have {
		if q == "whatsapp" || q == "sms" || strings.HasPrefix(q, "whatsapp.g") || strings.HasPrefix(q, "sms.g") {
			out = append(out, q)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no whatsapp or sms queue exists yet")
	}
	slices.Sort(out)
	return out, nil
}

// outcomeCounts reads sluice_tasks_total{outcome} by channel from a
// worker's /metrics.
func outcomeCounts(t *testing.T, hc *http.Client, w *worker, outcome string) map[string]int {
	t.Helper()
	resp, err := hc.Get("http://" + w.httpAddr + "/metrics")
	require.NoError(t, err, w.name)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: GET /metrics", w.name)
	out := map[string]int{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		m := metricLine.FindStringSubmatch(sc.Text())
		if m == nil || m[1] != "sluice_tasks_total" {
			continue
		}
		labels := map[string]string{}
		for _, lp := range labelPair.FindAllStringSubmatch(m[2], -1) {
			labels[lp[1]] = lp[2]
		}
		if labels["outcome"] == outcome {
			v, err := strconv.ParseFloat(m[3], 64)
			require.NoError(t, err)
			out[labels["channel"]] += int(v)
		}
	}
	require.NoError(t, sc.Err())
	return out
}
