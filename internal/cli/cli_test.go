package cli

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/campaign"
	"github.com/sluice-dev/sluice/internal/dnstest"
	"github.com/sluice-dev/sluice/internal/emulator"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testutil"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

// TestMain fails the package if a test leaves goroutines behind (the asynq
// server, the emulators, progress bars).
// TestMain fails the package on leaked goroutines, except the limiter's
// reserve batcher, which exits by itself after a second idle
// (throttle/reserve_batch.go).
func TestMain(m *testing.M) {
	app.Resolver = testDNS // target names are resolved at enqueue, in child processes too
	if args, ok := os.LookupEnv(subprocessArgs); ok {
		// A test's child process: `sluice` with the real stdout and stderr.
		os.Exit(Execute(context.Background(), strings.Split(args, "\x1f"), os.Stdout, os.Stderr))
	}
	// The limiter's reserve batcher and the delivery store's RecordSent
	// batcher (throttle/coalesce) end a second after their last call.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/sluice-dev/sluice/throttle/coalesce.(*Batcher[...]).run"))
}

// testDNS answers the tests' target names in process: localhost-alias.test
// with 127.0.0.1, nowhere.test with NXDOMAIN, any other with a public
// address.
var testDNS = dnstest.Resolver(map[string]netip.Addr{
	"localhost-alias.test": netip.MustParseAddr("127.0.0.1"),
	"nowhere.test":         {},
}, dnstest.Public)

// result is what one Execute call did.
type result struct {
	code           int
	stdout, stderr string
}

// run executes the command line args as `sluice` would, with a deadline.
func run(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := Execute(ctx, args, &stdout, &stderr)
	r := result{code: code, stdout: stdout.String(), stderr: stderr.String()}
	t.Logf("sluice %s → exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	return r
}

// writeFile writes content to name in a fresh temporary directory.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

// position returns the 1-based line and column where marker starts in s.
func position(t *testing.T, s, marker string) (line, col int) {
	t.Helper()
	i := strings.Index(s, marker)
	require.GreaterOrEqual(t, i, 0, "marker %q in the test file", marker)
	before := s[:i]
	return strings.Count(before, "\n") + 1, i - strings.LastIndex(before, "\n")
}

func TestConfigCheckNamesFileLineColumnAndField(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, content string
		marker        string // where the error must point
		field, reason string
	}{
		{
			name: "bad rate",
			content: `channels:
  whatsapp:
    limits:
      - name: throughput
        key: "whatsapp:number:{phone_number_id}"
        algorithm: fixed_window
        rate: 80/x
`,
			marker: "80/x",
			field:  "channels.whatsapp.limits[0].rate",
			reason: `unknown unit "x"`,
		},
		{
			name: "unknown channel",
			content: `worker:
  concurrency: 10
channels:
  telegram:
    enabled: true
`,
			marker: "telegram",
			field:  "channels.telegram",
			reason: "unknown channel",
		},
		{
			name: "channel setting out of its bounds",
			content: `channels:
  sms:
    headroom: 0%
    hold: 500ms
`,
			marker: "500ms",
			field:  "channels.sms.hold",
			reason: "want 1s to 10s",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, "sluice.yaml", c.content)
			line, col := position(t, c.content, c.marker)
			r := run(t, "config", "check", path)
			require.NotEqual(t, 0, r.code, "exit code")
			want := fmt.Sprintf("%s:%d:%d: %s: ", path, line, col, c.field)
			require.Contains(t, r.stdout, want)
			require.Contains(t, r.stdout, c.reason)
			require.Contains(t, r.stderr, path+": invalid configuration")
		})
	}
}

func TestConfigCheckAcceptsTheExample(t *testing.T) {
	t.Parallel()
	r := run(t, "config", "check", "../../sluice.example.yaml")
	require.Equal(t, 0, r.code, "exit code; stderr: %s", r.stderr)
	require.Contains(t, r.stdout, "../../sluice.example.yaml: ok (4 channels enabled)")
	// Every default rule is listed.
	for _, rule := range []string{"throughput", "pair", "daily", "sender", "concurrency", "host"} {
		require.Contains(t, r.stdout, rule)
	}
}

// campaignCSV has a BOM, CRLF line endings, blank lines, two invalid
// numbers, an empty "to" and a duplicate row; lines 2, 4, 9 and 11 are valid.
const campaignCSV = "\ufeffto,name,order_id\r\n" + // 1
	"+1 (202) 555-0101,Ann,A-1\r\n" + // 2
	"\r\n" + // 3
	"+12125550102,Bob,B-2\r\n" + // 4
	"+1555,Bad,X-1\r\n" + // 5: too short
	"+99 123 456,Worse,X-2\r\n" + // 6: no such country code
	",Nobody,X-3\r\n" + // 7: empty to
	"+12025550101,Ann,A-1\r\n" + // 8: line 2 again, normalized
	"+13055550103,Cy,C-3\r\n" + // 9
	"  \r\n" + // 10
	"+14155550104,Dee,D-4\r\n" // 11

func TestSendCSVEnqueuesValidRowsOnceAndRejectsTheRest(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	insp := asynq.NewInspectorFromRedisClient(srv.Client(t))
	path := writeFile(t, "spring.csv", campaignCSV)
	args := []string{"send", "--channel", "whatsapp", "--csv", path,
		"--phone-number-id", "106540352242922", "--template", "order_update",
		"--params", "name,order_id", "--redis", srv.URL()}

	r := run(t, args...)
	require.Equal(t, 3, r.code, "exit code: some rows rejected")
	require.Contains(t, r.stdout, path+": 8 rows: 4 enqueued, 0 already enqueued, 4 rejected")
	rejects := strings.TrimSuffix(path, ".csv") + ".rejects.csv"
	require.Contains(t, r.stdout, "rejected rows written to "+rejects)
	for _, line := range []string{":5: ", ":6: ", ":7: ", ":8: "} {
		require.Contains(t, r.stderr, path+line, "each reject reported on stderr with its line")
	}

	// The rejects file holds exactly the bad rows, their lines and reasons.
	f, err := os.Open(rejects)
	require.NoError(t, err)
	defer f.Close()
	got, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	want := [][]string{
		{"line", "reason", "to", "name", "order_id"},
		{"5", `to: "+1555" is not a valid E.164 phone number`, "+1555", "Bad", "X-1"},
		{"6", `to: "+99 123 456" is not a valid E.164 phone number`, "+99 123 456", "Worse", "X-2"},
		{"7", "to: empty", "", "Nobody", "X-3"},
		{"8", "duplicate of line 2", "+12025550101", "Ann", "A-1"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rejects file (-want +got):\n%s", diff)
	}

	// The queue holds exactly the valid rows, as template sends.
	wantSends := []string{"+12025550101 Ann A-1", "+12125550102 Bob B-2", "+13055550103 Cy C-3", "+14155550104 Dee D-4"}
	requireQueued(t, insp, wantSends)

	// Running the same file again never sends twice.
	r = run(t, args...)
	require.Equal(t, 3, r.code, "exit code: the same rows are still rejected")
	require.Contains(t, r.stdout, path+": 8 rows: 0 enqueued, 4 already enqueued, 4 rejected")
	requireQueued(t, insp, wantSends)
}

// requireQueued checks that the whatsapp queue holds exactly one template
// send per entry of want ("to param1 param2"): pending, or scheduled for
// its planned second (a send planned as the current second ends goes to the
// next one).
func requireQueued(t *testing.T, insp *asynq.Inspector, want []string) {
	t.Helper()
	qi, err := insp.GetQueueInfo("whatsapp")
	require.NoError(t, err)
	require.Equal(t, len(want), qi.Pending+qi.Scheduled, "pending and scheduled")
	require.Equal(t, len(want), qi.Size, "size")
	list, err := insp.ListPendingTasks("whatsapp", asynq.PageSize(100))
	require.NoError(t, err)
	scheduled, err := insp.ListScheduledTasks("whatsapp", asynq.PageSize(100))
	require.NoError(t, err)
	list = append(list, scheduled...)
	var got []string
	for _, ti := range list {
		require.Equal(t, tasks.TypeWhatsAppSend, ti.Type)
		p, err := tasks.DecodeWhatsAppSend(ti.Payload)
		require.NoError(t, err)
		require.Equal(t, "106540352242922", p.PhoneNumberID)
		require.Equal(t, p.IdempotencyKey, ti.ID, "the task ID is the idempotency key")
		require.NotNil(t, p.Template)
		require.Equal(t, "order_update", p.Template.Name)
		got = append(got, p.To+" "+strings.Join(p.Template.Parameters, " "))
	}
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("queued sends (-want +got):\n%s", diff)
	}
}

func TestSendCSVWithoutToColumnFails(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	path := writeFile(t, "no-to.csv", "phone,name\n+12025550101,Ann\n")
	r := run(t, "send", "--channel", "whatsapp", "--csv", path,
		"--phone-number-id", "106540352242922", "--template", "order_update",
		"--params", "name", "--redis", srv.URL())
	require.NotEqual(t, 0, r.code, "exit code")
	require.Contains(t, r.stderr, "line 1")
	require.Contains(t, r.stderr, `"to"`)
	qi, err := asynq.NewInspectorFromRedisClient(srv.Client(t)).GetQueueInfo("whatsapp")
	if err == nil { // the queue does not exist when nothing was ever enqueued
		require.Equal(t, 0, qi.Size, "nothing enqueued")
	}
}

func TestWorkerArchivesMalformedPayloadWithoutRetry(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	emu := startWorker(t, rdb, nil)

	// A producer that skipped the tasks constructors.
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr})
	t.Cleanup(func() { _ = client.Close() })
	_, err := client.Enqueue(asynq.NewTask(tasks.TypeWhatsAppSend, []byte(`{"v":1,"to":"nope"}`)),
		asynq.Queue("whatsapp"), asynq.TaskID("malformed-1"), asynq.MaxRetry(5))
	require.NoError(t, err)

	insp := asynq.NewInspectorFromRedisClient(rdb)
	info := testutil.Task(t, insp, "whatsapp", "malformed-1", 10*time.Second, testutil.In(asynq.TaskStateArchived))
	require.Contains(t, info.LastErr, "malformed payload")
	require.Regexp(t, regexp.MustCompile(`payload: (phone_number_id|to): `), info.LastErr, "the reason names the field")
	require.Equal(t, 0, info.Retried, "archived at once, never retried")
	require.Empty(t, emu.Records(), "nothing reached the provider")
}

func TestLimitsListShowReset(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	cfg := config.Default()
	// A concurrency lease lives 30s: the key outlives the test, unlike a
	// per-second window.
	var rule rules.Rule
	for _, r := range cfg.Channels["sms"].Rules() {
		if r.Limit.Name == "concurrency" {
			rule = r
		}
	}
	require.Equal(t, throttle.Concurrency, rule.Limit.Algorithm)
	key := "sms:account:" + emulator.DefaultTwilioAccountSID
	lim := app.NewLimiter(cfg, rdb, nil)
	d, err := lim.Consume(context.Background(), throttle.Request{Key: key, Limit: rule.Limit})
	require.NoError(t, err)
	require.True(t, d.Allowed)

	r := run(t, "limits", "list", "--redis", srv.URL())
	require.Equal(t, 0, r.code)
	require.Equal(t, key+"\n", r.stdout)
	require.Contains(t, r.stderr, "1 keys")

	r = run(t, "limits", "show", key, "--redis", srv.URL())
	require.Equal(t, 0, r.code)
	require.Contains(t, r.stdout, "sluice:{sms}:account:"+emulator.DefaultTwilioAccountSID)
	require.Regexp(t, `leases\s+1\n`, r.stdout)
	require.Regexp(t, `rule\s+concurrency`, r.stdout)
	require.Regexp(t, `remaining\s+99 of 100\n`, r.stdout)

	r = run(t, "limits", "reset", key, "--redis", srv.URL())
	require.Equal(t, 0, r.code)
	require.Equal(t, "reset 1 keys\n", r.stdout)

	r = run(t, "limits", "list", "--redis", srv.URL())
	require.Equal(t, 0, r.code)
	require.Empty(t, r.stdout, "no keys after reset")
	r = run(t, "limits", "show", key, "--redis", srv.URL())
	require.Equal(t, 0, r.code)
	require.Contains(t, r.stdout, "none (unused: full capacity)")
	require.Regexp(t, `remaining\s+100 of 100\n`, r.stdout)
}

// startWorker runs a worker with the default configuration against the
// provider emulators, which it returns, recording deliveries in rec (nil:
// none), until the test ends.
func startWorker(t *testing.T, rdb redis.UniversalClient, rec worker.DeliveryRecorder) *emulator.Server {
	t.Helper()
	emu, err := emulator.Start(emulator.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, emu.Close()) })
	cfg := config.Default()
	cfg.Channels["whatsapp"].BaseURL = emu.WhatsAppURL()
	cfg.Channels["sms"].BaseURL = emu.TwilioURL()
	cfg.Worker.ShutdownTimeout = 2 * time.Second
	secrets := map[string]string{
		"WHATSAPP_TOKEN":     emulator.DefaultWhatsAppToken,
		"TWILIO_ACCOUNT_SID": emulator.DefaultTwilioAccountSID,
		"TWILIO_AUTH_TOKEN":  emulator.DefaultTwilioAuthToken,
		"WEBHOOK_SECRET":     emulator.DefaultWebhookSecret,
	}
	w, err := app.NewWorker(cfg, rdb, app.NewLimiter(cfg, rdb, nil), app.Options{
		Secrets: func(name string) (string, error) {
			if v, ok := secrets[name]; ok {
				return v, nil
			}
			return "", fmt.Errorf("no secret %s", name)
		},
		Logger:   slog.New(slog.DiscardHandler),
		Delivery: rec,
	})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Shutdown)
	return emu
}

// A row whose key is already another channel's task (asynq keeps IDs apart
// per queue only) is not that send: it goes to the rejects file with the
// reason, and the other rows are enqueued and counted.
func TestSendRejectsARowWhoseKeyAnotherChannelHolds(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	csvText := "to,name\n+12025550101,Ann\n+12125550102,Bob\n"
	path := writeFile(t, "taken.csv", csvText)
	res, err := campaign.Read(strings.NewReader(csvText), campaign.Options{})
	require.NoError(t, err)
	// The row's key, sent as a webhook for the campaign's tenant (the
	// campaign's name): the webhook's claim holds the namespaced key.
	key := campaign.IdempotencyKey("taken", "sms", res.Rows[1], res.Columns)
	r := run(t, "enqueue", "webhook", "--url", "https://93.184.215.14/h", "--event", "e", "--payload", "{}", "--key", key, "--tenant", "taken", "--redis", srv.URL())
	require.Equal(t, 0, r.code, r.stderr)

	r = run(t, "send", "--channel", "sms", "--csv", path, "--from", "+12025550100", "--body", "Hi {name}", "--redis", srv.URL())
	require.Equal(t, 3, r.code, "exit code: a row rejected")
	require.Contains(t, r.stdout, path+": 2 rows: 1 enqueued, 0 already enqueued, 1 rejected")
	rejects, err := os.ReadFile(strings.TrimSuffix(path, ".csv") + ".rejects.csv")
	require.NoError(t, err)
	require.Contains(t, string(rejects), "3,")
	require.Contains(t, string(rejects), "idempotency key already used for a task of another type (a webhook:deliver task)")
}
