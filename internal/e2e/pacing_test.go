//go:build unix

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/emulator"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/tasks"
)

// pacingScale is the size of TestPacedDeliveryUnderStrictProviders.
type pacingScale struct {
	name         string
	campaign     int // WhatsApp rows to number A through `sluice send`
	recipients   int // distinct WhatsApp recipients the rows cycle through
	smsSenders   int
	smsPerSender int // SMS rows per sender through `sluice send`
	plain        int // WhatsApp sends to number B through a plain asynq client
	plainSMS     int // SMS sends through a plain asynq client, over the same senders
	// minRatio is the least campaign rate against the cap, a timing claim
	// (timingClaim): the full run asserts the 0.98 on an idle host;
	// the small one logs its rate against 0.95 (the pacing runs at 0.985, 1.5%
	// headroom, and a short run loses its partial first and last seconds: it
	// measured 0.978-0.981 alone on an idle host).
	minRatio float64
	// headroom, when set, is channels.whatsapp.headroom and
	// channels.sms.headroom. The margin over any 1-second span at the
	// default 1.5% is 15ms; the small run is race-enabled on a 2-core
	// host, and on a host with CPU steal (7-12% here on 2026-11-23) a send
	// now and then reaches the emulator more than 15ms late: 20429 in 1 of
	// 4 runs with SMS at 1.5%, and one 130429 in a fresh clone with WhatsApp
	// at 1.5% (2026-11-25). The full run keeps the default.
	headroom string
}

var (
	// smallScale runs in `make test` (about 30s).
	smallScale = pacingScale{name: "small", campaign: 1200, recipients: 600, smsSenders: 20, smsPerSender: 8, plain: 400, plainSMS: 40, minRatio: 0.95, headroom: "2.5%"}
	// fullScale is the run (`make e2e-full`, about 7 minutes): 20,000
	// WhatsApp sends to one number and 2,000 SMS over 20 senders.
	fullScale = pacingScale{name: "full", campaign: 20000, recipients: 5000, smsSenders: 20, smsPerSender: 100, plain: 5000, plainSMS: 200, minRatio: 0.98}
)

const (
	numberA = "106540352242922" // the campaign's business number
	numberB = "106540352242933" // the plain asynq client's
	numberC = "106540352242944" // one send while A is backlogged
)

// TestPacedDeliveryUnderStrictProviders is the end-to-end run: three
// `sluice serve` processes on one redis-server against emulators that count
// the strictest reading (any 1-second span per number and sender, an exact
// 6s pair interval). A WhatsApp campaign to one number and SMS over many
// senders are enqueued with `sluice send` (slots planned at enqueue); while
// the campaign is backlogged a high-priority send to the same number and a
// send to another number are enqueued; then more sends come through a plain
// asynq client. It checks that no span holds more than a cap, every pair is
// 6s apart, every row is delivered once and none is lost, the probes are
// served ahead of the backlog, and the Redis work per send: dequeues and
// limiter calls (the workers' metrics) and Redis CPU.
//
// SLUICE_E2E_SCALE=full runs the full size (make e2e-full) and asserts the
// timing too: no provider throttle, the bottleneck at >= 0.98 of its cap,
// each probe delivered within 2s, at most 1.1 limiter calls per send. The
// small run logs those figures (claims_test.go).
func TestPacedDeliveryUnderStrictProviders(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: runs three workers for about 30s")
	}
	sc := smallScale
	if os.Getenv("SLUICE_E2E_SCALE") == "full" {
		sc = fullScale
	}
	c := startCluster(t, func(emu *emulator.Server) string {
		return fmt.Sprintf("  whatsapp:\n    base_url: %q\n%s  sms:\n    base_url: %q\n%s", emu.WhatsAppURL(), headroom(sc), emu.TwilioURL(), headroom(sc))
	})
	bin, rdb, emu, env, dir, workers, cfgPath, insp, hc := c.bin, c.rdb, c.emu, c.env, c.dir, c.workers, c.cfgPath, c.insp, c.hc
	ctx := context.Background()

	// Phase 1: the campaign through `sluice send`.
	senders := make([]string, sc.smsSenders)
	for i := range senders {
		senders[i] = fmt.Sprintf("+1202555%04d", 1000+i)
	}
	waCSV := filepath.Join(dir, "whatsapp.csv")
	smsCSV := filepath.Join(dir, "sms.csv")
	writeCSV(t, waCSV, sc.campaign, func(i int) string { return fmt.Sprintf("%s,Ann,%d", recipientN(i%sc.recipients), i) })
	writeCSV(t, smsCSV, sc.smsSenders*sc.smsPerSender, func(i int) string { return fmt.Sprintf("%s,Bo,%d", recipientN(i), i) })
	before := snapshot(t, hc, workers, rdb)
	enqStart := time.Now()
	runCLI(t, bin, env, "--config", cfgPath, "send", "--channel", "whatsapp", "--csv", waCSV,
		"--phone-number-id", numberA, "--template", "order_update", "--lang", "en_US", "--params", "name,order_id")
	runCLI(t, bin, env, "--config", cfgPath, "send", "--channel", "sms", "--csv", smsCSV,
		"--from", strings.Join(senders, ","), "--body", "Hi {name}, order {order_id} shipped.")
	t.Logf("%s: enqueued %d WhatsApp and %d SMS rows with sluice send in %v", sc.name, sc.campaign, sc.smsSenders*sc.smsPerSender, time.Since(enqStart).Round(time.Millisecond))

	// While number A is backlogged: a high-priority send to A, and a bulk
	// send to number C.
	underWay := min(sc.campaign/4, 1000)
	waitFor(t, workers, hangBound(time.Duration(underWay/80)*time.Second), "the campaign under way", func() (bool, string) {
		n := emu.Stats()[emulator.ChannelWhatsApp].Unique
		return n >= underWay, strconv.Itoa(n)
	})
	probes := map[string]time.Time{}
	for _, p := range []struct{ key, number, priority string }{{"e2e-high", numberA, "high"}, {"e2e-other-number", numberC, ""}} {
		args := []string{"--config", cfgPath, "enqueue", "whatsapp", "--phone-number-id", p.number, "--to", "+14155550199", "--template", "order_update", "--key", p.key}
		if p.priority != "" {
			args = append(args, "--priority", p.priority)
		}
		probes[p.key] = time.Now()
		out := runCLI(t, bin, env, args...)
		t.Logf("%s", strings.TrimSpace(out))
	}
	waWant := sc.campaign + 2
	smsWant := sc.smsSenders * sc.smsPerSender
	ideal := max(time.Duration(float64(sc.campaign)/78.8*float64(time.Second)), time.Duration(sc.smsPerSender)*time.Second)
	waitDelivered(t, workers, emu, insp, hangBound(ideal), waWant, smsWant)
	campaign := snapshot(t, hc, workers, rdb)
	records := emu.Records()
	for _, ch := range []string{emulator.ChannelWhatsApp, emulator.ChannelSMS} {
		st := emu.Stats()[ch]
		t.Logf("after sluice send: %s %d delivered, %d throttle responses %v", ch, st.Unique, st.Throttled, st.ThrottledByCode)
	}
	// Neither probe waited behind the campaign: each was delivered while
	// number A still had campaign sends to make (about 11s of them in the
	// small run). How soon is timing.
	for key, at := range probes {
		r, ok := recordByKey(records, key)
		require.True(t, ok, key)
		lat := r.At.Sub(at)
		behind := 0
		for _, c := range records {
			if c.Channel == emulator.ChannelWhatsApp && c.Sender == numberA && c.IdempotencyKey != key && c.At.After(r.At) {
				behind++
			}
		}
		t.Logf("%s: delivered %v after `sluice enqueue` started (the process included), ahead of %d campaign sends to %s", key, lat.Round(time.Millisecond), behind, numberA)
		require.Positive(t, behind, "%s waited behind the whole backlog of %s", key, numberA)
		timingClaim(t, lat < 2*time.Second, "%s delivered %v after `sluice enqueue` started, within 2s", key, lat.Round(time.Millisecond))
	}

	// Phase 2: sends from a plain asynq client, slotted at their first dequeue.
	client := asynq.NewClientFromRedisClient(rdb)
	for i := range sc.plain {
		_, err := tasks.EnqueueWhatsAppSend(ctx, client, tasks.WhatsAppSend{PhoneNumberID: numberB, To: recipientN(i % sc.recipients),
			Template: &tasks.Template{Name: "order_update", Language: "en_US"}, IdempotencyKey: fmt.Sprintf("plain-wa-%d", i)})
		require.NoError(t, err)
	}
	for i := range sc.plainSMS {
		_, err := tasks.EnqueueSMSSend(ctx, client, tasks.SMSSend{From: senders[i%len(senders)], To: recipientN(i), Body: "plain", IdempotencyKey: fmt.Sprintf("plain-sms-%d", i)})
		require.NoError(t, err)
	}
	// A plain send to another number behind the plain backlog: it waits in
	// the channel's FIFO queue until the workers have dequeued (and
	// planned) the sends before it, a few ms each.
	plainOther := time.Now()
	_, err := tasks.EnqueueWhatsAppSend(ctx, client, tasks.WhatsAppSend{PhoneNumberID: numberC, To: "+14155550198",
		Template: &tasks.Template{Name: "order_update", Language: "en_US"}, IdempotencyKey: "plain-other-number"})
	require.NoError(t, err)
	waitDelivered(t, workers, emu, insp, hangBound(time.Duration(float64(sc.plain)/78.8*float64(time.Second))), waWant+sc.plain+1, smsWant+sc.plainSMS)
	plain := snapshot(t, hc, workers, rdb)
	records = emu.Records()
	if r, ok := recordByKey(records, "plain-other-number"); ok {
		t.Logf("plain asynq client: a send to another number enqueued behind %d plain sends was delivered %v later", sc.plain+sc.plainSMS, r.At.Sub(plainOther).Round(time.Millisecond))
	}

	if path := os.Getenv("SLUICE_E2E_RECORDS"); path != "" {
		b, err := json.Marshal(records)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, b, 0o600))
	}

	// What the providers saw: each message once, none lost, and provider
	// throttles only as a busy host's late sends explain (none in the full
	// run).
	stats := emu.Stats()
	for ch, n := range map[string]int{emulator.ChannelWhatsApp: waWant + sc.plain + 1, emulator.ChannelSMS: smsWant + sc.plainSMS} {
		checkThrottles(t, ch, stats[ch], n, nil)
		require.Zero(t, stats[ch].Duplicates, "%s duplicates", ch)
		require.Zero(t, stats[ch].Rejected+stats[ch].Failed, "%s rejected or failed", ch)
	}
	require.Equal(t, waWant+sc.plain+1, stats[emulator.ChannelWhatsApp].Unique)
	require.Equal(t, smsWant+sc.plainSMS, stats[emulator.ChannelSMS].Unique)
	for sender, n := range emulator.MaxInSpan(records, emulator.ChannelWhatsApp, time.Second) {
		require.LessOrEqual(t, n, 80, "whatsapp %s: most sends in any 1-second span", sender)
		t.Logf("whatsapp %s: at most %d sends in any 1-second span (cap 80)", sender, n)
	}
	maxSMS := 0
	for sender, n := range emulator.MaxInSpan(records, emulator.ChannelSMS, time.Second) {
		require.LessOrEqual(t, n, 1, "sms %s: most sends in any 1-second span", sender)
		maxSMS = max(maxSMS, n)
	}
	t.Logf("sms: at most %d send per sender in any 1-second span (cap 1)", maxSMS)
	gap, repeats := emulator.MinPairGap(records)
	require.True(t, repeats, "the campaign repeats recipients")
	require.GreaterOrEqual(t, gap, 6*time.Second, "closest two messages from one number to one recipient")
	t.Logf("whatsapp pairs: closest two messages to one recipient %v apart (limit 6s)", gap.Round(time.Millisecond))

	// The bottleneck's rate, first to last send.
	waRate := rate(records, emulator.ChannelWhatsApp, numberA)
	timingClaim(t, waRate/80 >= sc.minRatio, "whatsapp %s (sluice send): %.2f sends/s from first to last = %.4f of the 80/s cap, at least %.2f",
		numberA, waRate, waRate/80, sc.minRatio)
	plainRate := rate(records, emulator.ChannelWhatsApp, numberB)
	t.Logf("whatsapp %s (plain asynq): %.2f sends/s = %.4f of the cap", numberB, plainRate, plainRate/80)
	// Each sender's campaign rows, before the plain client's sends.
	var campaignSMS []emulator.Record
	for _, r := range records {
		if !strings.HasPrefix(r.IdempotencyKey, "plain-") {
			campaignSMS = append(campaignSMS, r)
		}
	}
	var smsRates []float64
	for _, s := range senders {
		smsRates = append(smsRates, rate(campaignSMS, emulator.ChannelSMS, s))
	}
	slices.Sort(smsRates)
	timingClaim(t, smsRates[0] >= sc.minRatio, "sms (sluice send): per-sender rate min %.4f, median %.4f sends/s (cap 1), the slowest at least %.2f",
		smsRates[0], smsRates[len(smsRates)/2], sc.minRatio)

	// Redis work per delivered send.
	report := func(phase string, from, to workSnapshot, wa, sms int) (dqWA, callsWA float64) {
		d := to.minus(from)
		dqWA, callsWA = float64(d.dequeues["whatsapp"])/float64(wa), float64(d.calls["whatsapp"])/float64(wa)
		t.Logf("%s: whatsapp %d sends: %.3f dequeues/send, %.3f limiter calls/send; sms %d sends: %.3f dequeues/send, %.3f limiter calls/send %v; all: %.3f limiter calls/send; Redis CPU %.1f ms per 1,000 sends; holds: %s",
			phase, wa, dqWA, callsWA, sms, float64(d.dequeues["sms"])/float64(sms), float64(d.calls["sms"])/float64(sms), d.callsByOp["sms"],
			float64(d.calls["whatsapp"]+d.calls["sms"])/float64(wa+sms), d.redisCPU.Seconds()*1000/float64(wa+sms)*1000, d.holds)
		return dqWA, callsWA
	}
	// A paced send is dequeued once (twice from a plain client: once to be
	// slotted, once at its slot), however late the host runs it; a provider
	// throttle adds a retry and pauses the number, whose waiting sends come
	// back, so the figure is asserted only in a run that drew none. A send
	// that wakes up late takes a new slot (a second limiter call), so the
	// limiter calls per send are timing.
	waThrottled := drawnThrottles(stats[emulator.ChannelWhatsApp])
	dqClaim := func(dq, most float64, what string) {
		if waThrottled == 0 {
			require.LessOrEqual(t, dq, most, what)
			return
		}
		t.Logf("%s: %.3f (at most %.2f in a run without throttles; this one drew %d WhatsApp throttles)", what, dq, most, waThrottled)
	}
	dq, calls := report("sluice send", before, campaign, waWant, smsWant)
	dqClaim(dq, 1.05, "dequeues per WhatsApp send enqueued through Sluice")
	timingClaim(t, calls <= 1.1, "%.3f limiter calls per WhatsApp send, at most 1.1", calls)
	dq, _ = report("plain asynq client", campaign, plain, sc.plain, sc.plainSMS)
	dqClaim(dq, 2.05, "dequeues per WhatsApp send from a plain asynq client")
}

func headroom(sc pacingScale) string {
	if sc.headroom == "" {
		return ""
	}
	return "    headroom: " + sc.headroom + "\n"
}

// batchSendsEnv "1" runs the tests that start a cluster (startCluster:
// the pacing, stress, tenant, feedback and adaptive runs) with
// channels.<name>.batch_sends on WhatsApp and SMS: the producer carries
// each sender's second in a batch task (docs/pacing.md, Batch tasks).
const batchSendsEnv = "SLUICE_E2E_BATCH_SENDS"

// cluster is three `sluice serve` processes on one redis-server, against
// strict emulators, registered with asynq.
type cluster struct {
	bin     string
	rdb     *redis.Client
	emu     *emulator.Server
	env     []string
	dir     string
	workers []*worker
	cfgPath string // the last worker's configuration, for the CLI
	insp    *asynq.Inspector
	hc      *http.Client // for the workers' /metrics
}

// startCluster starts the emulators, a redis-server and three workers whose
// configuration's channels section is channels(emu) (the webhook and http
// channels are disabled), and waits until asynq has all three.
func startCluster(t *testing.T, channels func(*emulator.Server) string) *cluster {
	t.Helper()
	rs := redistest.Start(t)
	emu, err := emulator.Start(emulator.Options{}) // strict by default
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, emu.Close()) })
	c := &cluster{bin: sluiceBinary(t), rdb: rs.Client(t), emu: emu, env: workerEnv(rs), dir: t.TempDir()}
	addrs := freeAddrs(t, 3)
	for i, addr := range addrs {
		chans := channels(emu)
		if os.Getenv(batchSendsEnv) == "1" {
			for _, name := range []string{"whatsapp", "sms"} {
				chans = strings.Replace(chans, "  "+name+":\n", "  "+name+":\n    batch_sends: true\n", 1)
			}
		}
		cfg := fmt.Sprintf("http:\n  listen: %q\nworker:\n  shutdown_timeout: 5s\nchannels:\n%s  webhook:\n    enabled: false\n  http:\n    enabled: false\n",
			addr, chans)
		c.cfgPath = filepath.Join(c.dir, fmt.Sprintf("sluice-%d.yaml", i))
		require.NoError(t, os.WriteFile(c.cfgPath, []byte(cfg), 0o600))
		c.workers = append(c.workers, startWorker(t, c.bin, fmt.Sprintf("worker %d", i), c.cfgPath, addr, c.env))
	}
	c.insp = asynq.NewInspectorFromRedisClient(c.rdb)
	waitFor(t, c.workers, 2*time.Minute, "3 asynq servers registered", func() (bool, string) {
		pids, err := serverPIDs(c.insp)
		return err == nil && len(pids) == 3, fmt.Sprint(pids, err)
	})
	c.hc = &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	t.Cleanup(c.hc.CloseIdleConnections)
	return c
}

// recipientN is the i-th of 10,000 distinct valid US numbers, none ending
// in the emulator's magic suffixes.
func recipientN(i int) string {
	areas := []string{"202", "212", "305", "312", "415", "510", "617", "718", "805", "919"}
	return fmt.Sprintf("+1%s555%04d", areas[i/1000%len(areas)], 1000+i%1000)
}

func writeCSV(t *testing.T, path string, n int, row func(int) string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("to,name,order_id\n")
	for i := range n {
		b.WriteString(row(i))
		b.WriteByte('\n')
	}
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
}

func runCLI(t *testing.T, bin string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "sluice %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

// runCLIStdout runs the sluice CLI like runCLI and returns its standard
// output alone (for --json output).
func runCLIStdout(t *testing.T, bin string, env []string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "sluice %s:\n%s%s", strings.Join(args, " "), out, stderr.String())
	return out
}

func waitDelivered(t *testing.T, workers []*worker, emu *emulator.Server, insp *asynq.Inspector, timeout time.Duration, wa, sms int) {
	t.Helper()
	waitFor(t, workers, timeout, "all sends delivered and completed", func() (bool, string) {
		st := emu.Stats()
		var left int
		for q, n := range map[string]int{"whatsapp": wa, "sms": sms} {
			if n == 0 {
				continue // a channel the run does not use has no queue
			}
			qi, err := insp.GetQueueInfo(q)
			if err != nil {
				return false, err.Error()
			}
			left += qi.Pending + qi.Active + qi.Scheduled + qi.Retry + qi.Archived
		}
		s := fmt.Sprintf("whatsapp %d/%d (throttled %d), sms %d/%d (throttled %d), %d tasks not completed",
			st["whatsapp"].Unique, wa, st["whatsapp"].Throttled, st["sms"].Unique, sms, st["sms"].Throttled, left)
		return st["whatsapp"].Unique >= wa && st["sms"].Unique >= sms && left == 0, s
	})
}

func recordByKey(records []emulator.Record, key string) (emulator.Record, bool) {
	for _, r := range records {
		if r.IdempotencyKey == key {
			return r, true
		}
	}
	return emulator.Record{}, false
}

// rate is (n-1)/(last-first) over a sender's accepted sends.
func rate(records []emulator.Record, channel, sender string) float64 {
	first, last, n := span(records, func(r emulator.Record) bool { return r.Channel == channel && r.Sender == sender })
	if n < 2 {
		return 0
	}
	return float64(n-1) / last.Sub(first).Seconds()
}

// span returns the first and last acceptance times of the records keep
// selects, and how many it selects.
func span(records []emulator.Record, keep func(emulator.Record) bool) (first, last time.Time, n int) {
	for _, r := range records {
		if !keep(r) {
			continue
		}
		if n == 0 || r.At.Before(first) {
			first = r.At
		}
		if r.At.After(last) {
			last = r.At
		}
		n++
	}
	return first, last, n
}

// workSnapshot is the workers' counters summed over processes, and Redis'
// CPU time.
type workSnapshot struct {
	dequeues  map[string]int            // sluice_tasks_total by channel, every outcome
	sent      map[string]int            // sluice_tasks_total{outcome="sent"} by channel
	outcomes  map[string]map[string]int // sluice_tasks_total by channel and outcome
	calls     map[string]int            // sluice_limiter_calls_total by channel
	callsByOp map[string]map[string]int // by channel and op
	holdLE    map[string]float64        // sluice_hold_seconds cumulative buckets, all channels
	lateLE    map[string]float64        // sluice_hold_late_seconds cumulative buckets
	departLE  map[string]float64        // sluice_send_late_seconds cumulative buckets
	margin    map[string]float64        // sluice_pacing_margin_seconds{channel="whatsapp"} by part, the widest process's
	redisCPU  time.Duration
	holds     string
}

func (a workSnapshot) minus(b workSnapshot) workSnapshot {
	d := workSnapshot{dequeues: map[string]int{}, calls: map[string]int{}, callsByOp: map[string]map[string]int{}, holdLE: map[string]float64{}, lateLE: map[string]float64{}, departLE: map[string]float64{}, redisCPU: a.redisCPU - b.redisCPU}
	for k, v := range a.dequeues {
		d.dequeues[k] = v - b.dequeues[k]
	}
	for k, v := range a.calls {
		d.calls[k] = v - b.calls[k]
	}
	for ch, ops := range a.callsByOp {
		d.callsByOp[ch] = map[string]int{}
		for op, v := range ops {
			d.callsByOp[ch][op] = v - b.callsByOp[ch][op]
		}
	}
	for le, v := range a.holdLE {
		d.holdLE[le] = v - b.holdLE[le]
	}
	for le, v := range a.lateLE {
		d.lateLE[le] = v - b.lateLE[le]
	}
	for le, v := range a.departLE {
		d.departLE[le] = v - b.departLE[le]
	}
	d.margin = a.margin // a gauge: the later one
	total := d.holdLE["+Inf"]
	var parts []string
	for _, le := range []string{"0.1", "0.5", "1", "1.5"} {
		if total > 0 {
			parts = append(parts, fmt.Sprintf("%.1f%% <= %ss", 100*d.holdLE[le]/total, le))
		}
	}
	if late := d.lateLE["+Inf"]; late > 0 {
		parts = append(parts, fmt.Sprintf("woke late: %.2f%% > 2ms, %.3f%% > 5ms, %.3f%% > 10ms, %.3f%% > 15ms",
			100*(late-d.lateLE["0.002"])/late, 100*(late-d.lateLE["0.005"])/late, 100*(late-d.lateLE["0.01"])/late, 100*(late-d.lateLE["0.015"])/late))
	}
	d.holds = strings.Join(parts, ", ")
	return d
}

var metricLine = regexp.MustCompile(`^(sluice_tasks_total|sluice_limiter_calls_total|sluice_hold_seconds_bucket|sluice_hold_late_seconds_bucket|sluice_send_late_seconds_bucket|sluice_pacing_margin_seconds)\{([^}]*)\} ([0-9.e+-]+)$`)
var labelPair = regexp.MustCompile(`([a-z_]+)="([^"]*)"`)

// snapshot scrapes the workers' /metrics, summed over them, and Redis' CPU.
func snapshot(t *testing.T, hc *http.Client, workers []*worker, rdb redis.UniversalClient) workSnapshot {
	t.Helper()
	s := workSnapshot{dequeues: map[string]int{}, sent: map[string]int{}, outcomes: map[string]map[string]int{}, calls: map[string]int{}, callsByOp: map[string]map[string]int{}, holdLE: map[string]float64{}, lateLE: map[string]float64{}, departLE: map[string]float64{}, margin: map[string]float64{}}
	for _, w := range workers {
		resp, err := hc.Get("http://" + w.httpAddr + "/metrics")
		require.NoError(t, err, w.name)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: GET /metrics", w.name)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			m := metricLine.FindStringSubmatch(sc.Text())
			if m == nil {
				continue
			}
			labels := map[string]string{}
			for _, lp := range labelPair.FindAllStringSubmatch(m[2], -1) {
				labels[lp[1]] = lp[2]
			}
			v, err := strconv.ParseFloat(m[3], 64)
			require.NoError(t, err)
			switch m[1] {
			case "sluice_tasks_total":
				s.dequeues[labels["channel"]] += int(v)
				if labels["outcome"] == "sent" {
					s.sent[labels["channel"]] += int(v)
				}
				if s.outcomes[labels["channel"]] == nil {
					s.outcomes[labels["channel"]] = map[string]int{}
				}
				s.outcomes[labels["channel"]][labels["outcome"]] += int(v)
			case "sluice_limiter_calls_total":
				s.calls[labels["channel"]] += int(v)
				if s.callsByOp[labels["channel"]] == nil {
					s.callsByOp[labels["channel"]] = map[string]int{}
				}
				s.callsByOp[labels["channel"]][labels["op"]] += int(v)
			case "sluice_hold_seconds_bucket":
				s.holdLE[labels["le"]] += v
			case "sluice_hold_late_seconds_bucket":
				s.lateLE[labels["le"]] += v
			case "sluice_send_late_seconds_bucket":
				s.departLE[labels["le"]] += v
			case "sluice_pacing_margin_seconds":
				if labels["channel"] == "whatsapp" {
					s.margin[labels["part"]] = max(s.margin[labels["part"]], v)
				}
			}
		}
		resp.Body.Close()
		require.NoError(t, sc.Err())
	}
	info, err := rdb.Info(context.Background(), "cpu").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			s.redisCPU += time.Duration(f * float64(time.Second))
		}
	}
	return s
}
