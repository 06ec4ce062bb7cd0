//go:build unix

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/emulator"
	"github.com/sluice-dev/sluice/internal/redistest"
)

// Volumes of a chaos scenario: issue 19's campaign.
const (
	chaosWhatsApp = 1000 // one number at 80/s: 12.5 s
	chaosSMS      = 500  // 20 senders at 1/s: 25 s
	chaosSenders  = 20
	chaosAt       = 300 // WhatsApp sends accepted when the fault starts: mid-campaign
	chaosSettle   = 5 * time.Minute
)

// chaosScenarios are TestChaos's faults, by name.
var chaosScenarios = []string{"worker-kill", "redis-restart", "redis-kill", "sentinel-failover", "cluster-master-loss", "cluster-spread-master-loss", "provider-storm"}

// TestChaos runs the campaign of issue 19 (1,000 WhatsApp sends to one
// number, 500 SMS over 20 senders, through `sluice send`, two `sluice
// serve` processes, the strict emulators) through one fault each, with
// real processes:
//
//   - worker-kill: one worker killed with SIGKILL mid-campaign;
//   - redis-restart: Redis (appendonly yes, appendfsync everysec) stopped
//     with SHUTDOWN for 10 s, then started from its AOF;
//   - redis-kill: the same Redis killed with SIGKILL for 10 s;
//   - sentinel-failover: the master behind a Sentinel killed, its replica
//     promoted, the workers following through the Sentinel;
//   - cluster-master-loss: the master of a 3-master cluster (a replica each)
//     that holds the campaign's limiter keys killed, its replica promoted;
//   - cluster-spread-master-loss: the same with spread_by (whatsapp by
//     phone_number_id, sms by sender) and 12 queue groups a channel, the
//     master of the WhatsApp number's own scope killed;
//   - provider-storm: WhatsApp answers every request for 30 s with 503s,
//     then 429s (Retry-After 5 s), then requests held past the client's
//     timeout, 10 s each, then recovers.
//
// Each logs a line: enqueued, delivered, duplicates, lost, archived (with
// their last errors), the most accepted in any 1-second span per sender
// against its cap, provider throttles, and the times to the last delivery
// and the last completion. It fails on a lost send, on an archived one,
// and on a provider throttle (the strict emulators refuse a send over a
// cap, so that is how an exceeded cap shows) but the storm's own 429s;
// duplicates are reported, and fail only the SHUTDOWN and the storm runs
// (a process or a master that dies between the provider's acceptance and
// asynq's record, or a replica promoted before it had a write, may send
// one again). The storm never accepts a request it answers late, so the
// case of a provider that accepts and then answers past the timeout is
// not covered.
//
// Never in `make test`: SLUICE_E2E_CHAOS=1 (`make chaos`, about 14
// minutes); SLUICE_CHAOS_SCENARIOS picks some ("worker-kill,redis-kill").
func TestChaos(t *testing.T) {
	if os.Getenv("SLUICE_E2E_CHAOS") != "1" {
		t.Skip("about 10 minutes of faults with real processes: set SLUICE_E2E_CHAOS=1 (make chaos)")
	}
	names := chaosScenarios
	if v := os.Getenv("SLUICE_CHAOS_SCENARIOS"); v != "" {
		names = strings.Split(v, ",")
	}
	for _, name := range names {
		name = strings.TrimSpace(name)
		require.Contains(t, chaosScenarios, name, "SLUICE_CHAOS_SCENARIOS")
		t.Run(name, func(t *testing.T) { runChaos(t, name) })
	}
}

// chaosRedis is the Redis a scenario runs on and its fault.
type chaosRedis struct {
	rdb  redis.UniversalClient
	yaml string // the workers' redis section ("" for REDIS_URL)
	url  string // REDIS_URL for a single server
	// fault breaks Redis and, when the scenario brings it back, returns
	// once it is back; it says what it did.
	fault func(t *testing.T) string
	// spread adds channels.<name>.spread_by and queue_groups to the
	// workers' whatsapp and sms sections.
	spread bool
}

func chaosRedisFor(t *testing.T, name string) chaosRedis {
	switch name {
	case "sentinel-failover":
		st := redistest.StartSentinel(t)
		return chaosRedis{rdb: st.Client(t),
			yaml: fmt.Sprintf("redis:\n  mode: sentinel\n  addrs: [%s]\n  master_name: %s\n", st.Sentinel.Addr, st.MasterName),
			fault: func(t *testing.T) string {
				require.NoError(t, st.Master.Kill())
				return fmt.Sprintf("master %s killed (SIGKILL); the Sentinel promotes %s after %v", st.Master.Addr, st.Replica.Addr, redistest.DownAfter)
			}}
	case "cluster-master-loss", "cluster-spread-master-loss":
		// Without spread_by the channel's limiter keys share {whatsapp};
		// with it the number's are on {whatsapp/<number>}: the master
		// killed is the one that paces the number.
		spread := name == "cluster-spread-master-loss"
		tag := "{whatsapp}"
		if spread {
			tag = "{whatsapp/" + numberA + "}"
		}
		cl := redistest.StartCluster(t, 3, 1)
		cc := cl.Client(t)
		return chaosRedis{rdb: cc, spread: spread,
			yaml: fmt.Sprintf("redis:\n  mode: cluster\n  addrs: [%s]\n", strings.Join(cl.Addrs(), ", ")),
			fault: func(t *testing.T) string {
				m, err := cc.MasterForKey(context.Background(), "sluice:"+tag)
				require.NoError(t, err)
				addr := m.Options().Addr
				i := slices.IndexFunc(cl.Masters, func(s *redistest.Server) bool { return s.Addr == addr })
				require.GreaterOrEqual(t, i, 0, "the master of %s, %s, is one of the cluster's", tag, addr)
				require.NoError(t, cl.Masters[i].Kill())
				return fmt.Sprintf("master %s (the %s limiter keys' slot) killed (SIGKILL); its replica %s takes over after about %v",
					addr, tag, cl.Replicas[i][0].Addr, 2*redistest.NodeTimeout)
			}}
	}
	rs := redistest.StartWith(t, redistest.Options{AppendOnly: true})
	c := chaosRedis{rdb: rs.Client(t), url: rs.URL(), fault: func(*testing.T) string { return "" }}
	switch name {
	case "redis-restart", "redis-kill":
		c.fault = func(t *testing.T) string {
			if name == "redis-kill" {
				require.NoError(t, rs.Kill())
			} else {
				require.NoError(t, rs.Shutdown())
			}
			time.Sleep(10 * time.Second) // the outage's length is the fault
			require.NoError(t, rs.Restart(), "restart Redis from its AOF")
			return fmt.Sprintf("Redis %s, down 10 s, restarted from its AOF", map[bool]string{true: "killed (SIGKILL)", false: "stopped (SHUTDOWN)"}[name == "redis-kill"])
		}
	}
	return c
}

func runChaos(t *testing.T, name string) {
	r := chaosRedisFor(t, name)
	emu, err := emulator.Start(emulator.Options{}) // strict by default
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, emu.Close()) })
	bin, env, dir := sluiceBinary(t), workerEnvURL(r.url), t.TempDir()
	var workers []*worker
	var cfgPath string
	waSpread, smsSpread := "", ""
	if r.spread {
		// and queue groups, so that asynq's work spreads too (12: four a
		// master of the three)
		waSpread, smsSpread = "\n    spread_by: phone_number_id\n    queue_groups: 12", "\n    spread_by: sender\n    queue_groups: 12"
	}
	for i, addr := range freeAddrs(t, 2) {
		cfg := r.yaml + fmt.Sprintf("http:\n  listen: %q\nworker:\n  shutdown_timeout: 5s\nchannels:\n  whatsapp:\n    base_url: %q\n    timeout: 2s%s\n  sms:\n    base_url: %q%s\n  webhook:\n    enabled: false\n  http:\n    enabled: false\n",
			addr, emu.WhatsAppURL(), waSpread, emu.TwilioURL(), smsSpread)
		cfgPath = filepath.Join(dir, fmt.Sprintf("sluice-%d.yaml", i))
		require.NoError(t, os.WriteFile(cfgPath, []byte(cfg), 0o600))
		workers = append(workers, startWorker(t, bin, fmt.Sprintf("worker %d", i), cfgPath, addr, env))
	}
	insp := asynq.NewInspectorFromRedisClient(r.rdb)
	waitFor(t, workers, time.Minute, "2 asynq servers registered", func() (bool, string) {
		pids, err := serverPIDs(insp)
		return err == nil && len(pids) == 2, fmt.Sprint(pids, err)
	})

	start := time.Now()
	sendIssue19Campaign(t, bin, env, cfgPath, dir, chaosWhatsApp, chaosSMS, chaosSenders)

	waitFor(t, workers, time.Minute, "the campaign under way", func() (bool, string) {
		n := emu.Stats()[emulator.ChannelWhatsApp].Unique
		return n >= chaosAt, strconv.Itoa(n)
	})
	faultAt := time.Now()
	var what string
	switch name {
	case "worker-kill":
		require.NoError(t, workers[0].cmd.Process.Kill())
		workers[0].signalled = true // its exit is the fault, not a failure
		what = fmt.Sprintf("worker 0 (pid %d) killed (SIGKILL)", workers[0].cmd.Process.Pid)
	case "provider-storm":
		phase := func(o emulator.FaultOptions) {
			emu.FaultWith(emulator.ChannelWhatsApp, numberA, o)
			time.Sleep(10 * time.Second) // the storm's length is the fault
		}
		phase(emulator.FaultOptions{Code: emulator.Bare503, Count: -1})
		phase(emulator.FaultOptions{Code: emulator.Bare429, Count: -1, RetryAfter: 5 * time.Second})
		phase(emulator.FaultOptions{Code: emulator.Bare503, Count: -1, Delay: 3 * time.Second}) // past the 2 s timeout
		emu.ClearFaults()
		what = "WhatsApp answered 503 for 10 s, 429 (Retry-After 5 s) for 10 s, then held requests past the 2 s client timeout for 10 s"
	default:
		what = r.fault(t)
	}
	faultEnd := time.Now()
	t.Logf("%s: %s, %v after the enqueue, at whatsapp %d/%d accepted", name, what, faultAt.Sub(start).Round(time.Millisecond),
		emu.Stats()[emulator.ChannelWhatsApp].Unique, chaosWhatsApp)

	live := workers
	if name == "worker-kill" {
		live = workers[1:]
	}
	finished, _ := waitCampaignDone(t, insp, emu, live, chaosWhatsApp, chaosSMS, faultEnd, chaosSettle, "the fault's end")

	// The report.
	st := emu.Stats()
	records := emu.Records()
	var b strings.Builder
	lost := 0
	for _, c := range []struct {
		ch   string
		want int
		cap  int
	}{{emulator.ChannelWhatsApp, chaosWhatsApp, 80}, {emulator.ChannelSMS, chaosSMS, 1}} {
		s := st[c.ch]
		l := max(c.want-s.Unique, 0)
		lost += l
		worst, over := 0, 0
		for _, n := range emulator.MaxInSpan(records, c.ch, time.Second) {
			worst = max(worst, n)
			if n > c.cap {
				over++
			}
		}
		fmt.Fprintf(&b, "%s: enqueued %d, delivered %d, duplicates %d, lost %d, max in any 1s %d (cap %d, senders over it %d), provider throttles %d %v; ",
			c.ch, c.want, s.Unique, s.Duplicates, l, worst, c.cap, over, s.Throttled, s.ThrottledByCode)
		if over > 0 {
			t.Errorf("%s: %d senders over the cap of %d in some 1-second span", c.ch, over, c.cap)
		}
		// The emulators refuse a send over a cap (and record only what they
		// accept), so a cap Sluice would have exceeded shows as a throttle:
		// none is allowed but the storm's own 429s.
		throttles := s.Throttled
		if name == "provider-storm" && c.ch == emulator.ChannelWhatsApp {
			throttles -= s.ThrottledByCode["429"]
		}
		if throttles > 0 {
			t.Errorf("%s: %d provider throttles %v: a cap was exceeded", c.ch, throttles, s.ThrottledByCode)
		}
	}
	archived := archivedReasons(t, insp)
	var lastDelivery time.Time
	for _, rec := range records {
		if rec.At.After(lastDelivery) {
			lastDelivery = rec.At
		}
	}
	total := "did not finish"
	if !finished.IsZero() {
		// a send the provider accepted before the fault may complete in
		// asynq only once its lease has run out (the recoverer), so the
		// last delivery and the last completion are told apart
		total = fmt.Sprintf("%v (last delivery %v and last completion %v after the fault's end)", finished.Sub(start).Round(time.Second),
			lastDelivery.Sub(faultEnd).Round(100*time.Millisecond), finished.Sub(faultEnd).Round(time.Second))
	}
	t.Logf("chaos %s: %sarchived %d %v; total %s", name, b.String(), len(archived), archived, total)
	if lost > 0 {
		t.Errorf("%d rows were never accepted by the emulators", lost)
	}
	if len(archived) > 0 {
		t.Errorf("%d tasks archived: %v", len(archived), archived)
	}
	if d := st[emulator.ChannelWhatsApp].Duplicates + st[emulator.ChannelSMS].Duplicates; d > 0 && (name == "redis-restart" || name == "provider-storm") {
		t.Errorf("%d rows accepted twice in %s, which loses no write and kills no process", d, name)
	}
}

// tasksLeftOn is tasksLeft with a deadline: through a failover a call may
// hang until the client's own timeouts end it.
func tasksLeftOn(ctx context.Context, insp *asynq.Inspector) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	type res struct {
		n   int
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() { n, s, err := tasksLeft(insp); ch <- res{n, s, err} }()
	select {
	case r := <-ch:
		return r.n, r.s, r.err
	case <-ctx.Done():
		return 0, "the inspector did not answer within 10 s", ctx.Err()
	}
}

// archivedReasons lists the archived tasks of the whatsapp and sms queues
// by their last error, with counts.
func archivedReasons(t *testing.T, insp *asynq.Inspector) []string {
	t.Helper()
	counts := map[string]int{}
	qs, err := campaignQueues(insp)
	if err != nil {
		t.Logf("queues: %v", err)
		qs = []string{"whatsapp", "sms"}
	}
	for _, q := range qs {
		tis, err := insp.ListArchivedTasks(q, asynq.PageSize(1000))
		if err != nil {
			t.Logf("archived tasks of %s: %v", q, err)
			continue
		}
		for _, ti := range tis {
			counts[q+": "+ti.LastErr]++
		}
	}
	var out []string
	for k, n := range counts {
		out = append(out, fmt.Sprintf("%d × %s", n, k))
	}
	sort.Strings(out)
	return out
}
