package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/emulator"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/throttle"
)

// defaultRule returns the default configuration's rule of channel named name.
func defaultRule(t *testing.T, channel, name string) rules.Rule {
	t.Helper()
	r, ok := config.Default().Channels[channel].Rule(name)
	require.True(t, ok, "no default rule %s/%s", channel, name)
	return r
}

// consume takes one unit n times and returns the last decision.
func consume(t *testing.T, lim throttle.Limiter, n int, req throttle.Request) throttle.Decision {
	t.Helper()
	var d throttle.Decision
	for range n {
		var err error
		d, err = lim.Consume(context.Background(), req)
		require.NoError(t, err)
	}
	return d
}

// A closed port: commands that must fail before connecting are given it.
const unreachableRedis = "redis://127.0.0.1:1/0"

func TestLimitsSetIsSeenByLimitersAndUnsetRestores(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	daily := defaultRule(t, "whatsapp", "daily")
	key := "whatsapp:daily:+12025550123"
	req := throttle.Request{Key: key, Limit: daily.Limit}

	// A worker's limiter, already running (its override snapshot is loaded).
	const refresh = 200 * time.Millisecond
	lim := throttle.NewRedis(rdb, throttle.Options{OverrideRefresh: refresh})
	capacity := func() int64 {
		d, err := lim.Status(ctx, req)
		require.NoError(t, err)
		return d.Limits[0].Limit
	}
	require.Equal(t, int64(250), capacity())

	r := run(t, "limits", "set", key, "--rate", "1000/1d", "--redis", srv.URL())
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	require.Equal(t, "override "+key+": rate 1000/d (every worker within 1s)\n", r.stdout)
	set := time.Now()
	// Honoured within the limiter's refresh (200ms), well under the 1s the
	// output promises on an idle host; how soon is timing, logged (the
	// refresh period itself is checked in internal/app). The wait bounds
	// a hang.
	require.Eventually(t, func() bool { return capacity() == 1000 }, 30*time.Second, 10*time.Millisecond)
	t.Logf("override honoured %v after limits set returned (refresh %v)", time.Since(set).Round(time.Millisecond), refresh)

	// A pattern, and the list of overrides.
	r = run(t, "limits", "set", "whatsapp:number:*", "--rate", "1000/s", "--redis", srv.URL())
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	r = run(t, "limits", "overrides", "--redis", srv.URL())
	require.Equal(t, 0, r.code)
	require.Regexp(t, `KEY\s+RATE\s+BURST\s+MAX\s+INTERVAL\s+SET AT\n`, r.stdout)
	require.Regexp(t, `whatsapp:daily:\+12025550123\s+1000/d\s+-\s+-\s+-\s+20`, r.stdout)
	require.Regexp(t, `whatsapp:number:\*\s+1000/s\s+-`, r.stdout)
	r = run(t, "limits", "overrides", "--json", "--redis", srv.URL())
	require.Equal(t, 0, r.code)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list))
	require.Len(t, list, 2)
	require.Equal(t, key, list[0]["key"])
	require.Equal(t, "1000/d", list[0]["rate"])
	require.NotEmpty(t, list[0]["set_at"])
	require.Equal(t, "whatsapp:number:*", list[1]["key"])

	r = run(t, "limits", "unset", key, "--redis", srv.URL())
	require.Equal(t, 0, r.code)
	require.Equal(t, "removed override "+key+"\n", r.stdout)
	require.Eventually(t, func() bool { return capacity() == 250 }, 5*time.Second, 10*time.Millisecond, "the configured limit again")
	r = run(t, "limits", "unset", key, "--redis", srv.URL())
	require.Equal(t, 0, r.code)
	require.Equal(t, "no override for "+key+"\n", r.stdout)

	all, err := lim.Overrides(ctx)
	require.NoError(t, err)
	require.Len(t, all, 1, "only the pattern is left")
}

func TestLimitsSetValidatesBeforeConnecting(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"bad rate", []string{"whatsapp:daily:+12025550123", "--rate", "10/x"}, `--rate: rate "10/x": period "x": unknown unit "x"`},
		{"nothing to set", []string{"whatsapp:daily:+12025550123"}, "nothing to set: give --rate, --burst, --max or --interval"},
		{"burst 0", []string{"whatsapp:pair:1:2", "--burst", "0"}, "--burst: want >= 1, got 0"},
		{"interval below 1ms", []string{"whatsapp:pair:1:2", "--interval", "10us"}, "--interval: want a duration >= 1ms"},
		{"flag the rule does not use", []string{"whatsapp:daily:+12025550123", "--interval", "6s"}, `rule "daily" (fixed_window) does not use --interval (it uses --rate)`},
		{"window a fixed window cannot have", []string{"whatsapp:daily:+12025550123", "--rate", "10/6s"}, "window 6s: fixed_window needs one of 1s, 30s, 1m, 5m, 1h, 1d"},
		{"pattern checked against its rules", []string{"whatsapp:pair:*", "--max", "3"}, `rule "pair" (gcra) does not use --max (it uses --rate and --burst)`},
		{"star inside the key", []string{"whatsapp:*:x", "--rate", "1/s"}, "'*' may only end a pattern"},
		{"braces", []string{"sluice:{whatsapp}:daily:x", "--rate", "1/s"}, "braces are not allowed"},
		{"flag that does not parse", []string{"whatsapp:pair:1:2", "--burst", "x"}, `sluice: limits set: invalid argument "x" for "--burst"`},
		{"no key", nil, "sluice: limits set: accepts 1 arg(s), received 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := run(t, append(append([]string{"limits", "set"}, c.args...), "--redis", unreachableRedis)...)
			require.Equal(t, 2, r.code, "usage error")
			require.Contains(t, r.stderr, c.want)
		})
	}
	// Valid input does try to connect, and fails with 1.
	r := run(t, "limits", "set", "whatsapp:daily:+12025550123", "--rate", "10/1d", "--redis", unreachableRedis)
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "redis at redis://127.0.0.1:1")
}

// eventsLimit is 10 per day: the 10th consume raises limits.warning (fewer
// than 10% left), the 11th is blocked and raises limits.exceeded.
var eventsLimit = throttle.Limit{Name: "daily", Algorithm: throttle.FixedWindow, Rate: throttle.PerDay(10)}

func produceEvents(t *testing.T, lim throttle.Limiter, key string) {
	t.Helper()
	d := consume(t, lim, 11, throttle.Request{Key: key, Limit: eventsLimit})
	require.False(t, d.Allowed)
}

func TestEventsTail(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lim := app.NewLimiter(config.Default(), srv.Client(t), nil)
	for i := range 3 {
		produceEvents(t, lim, fmt.Sprintf("sms:test:%d", i))
	}

	r := run(t, "events", "tail", "--from-start", "--count", "4", "--redis", srv.URL())
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Len(t, lines, 4)
	ts := `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z `
	require.Regexp(t, "^"+ts+`limits\.warning sms:test:0 name=daily remaining=0 threshold=1 limit=10$`, lines[0])
	require.Regexp(t, "^"+ts+`limits\.exceeded sms:test:0 name=daily limit=10 window=1d reset=\d{4}-\d\d-\d\dT00:00:00Z$`, lines[1])
	require.Contains(t, lines[2], "limits.warning sms:test:1 ")
	require.Contains(t, lines[3], "limits.exceeded sms:test:1 ")

	r = run(t, "events", "tail", "--from-start", "--type", "limits.exceeded", "--count", "3", "--json", "--redis", srv.URL())
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	lines = strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Len(t, lines, 3)
	for i, line := range lines {
		var e map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &e), line)
		require.Equal(t, "limits.exceeded", e["type"])
		require.Equal(t, fmt.Sprintf("sms:test:%d", i), e["key"])
		require.Equal(t, "daily", e["name"])
		require.EqualValues(t, 10, e["limit"])
		require.Equal(t, "1d", e["window"])
		require.EqualValues(t, 0, int64(e["reset"].(float64))%(24*3600*1000), "reset at 00:00 UTC, in Unix ms")
		require.Greater(t, e["at"], float64(0))
		require.NotEmpty(t, e["id"])
	}

	// Without --from-start only new events are printed: keep producing
	// until the tail has seen one.
	var stdout, stderr bytes.Buffer
	done := make(chan int)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- Execute(ctx, []string{"events", "tail", "--count", "1", "--json", "--redis", srv.URL()}, &stdout, &stderr)
	}()
	var code int
	for i := 0; ; i++ {
		produceEvents(t, lim, fmt.Sprintf("sms:new:%d", i))
		select {
		case code = <-done:
		case <-time.After(50 * time.Millisecond):
			continue
		}
		break
	}
	require.Equal(t, 0, code, "stderr: %s", stderr.String())
	var e map[string]any
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &e), stdout.String())
	require.True(t, strings.HasPrefix(e["key"].(string), "sms:new:"), "an old event was printed: %v", e)

	// Interrupted (Ctrl-C), a tail ends cleanly within a read's block.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	code = Execute(ctx, []string{"events", "tail", "--redis", srv.URL()}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr: %s", stderr.String())
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestEventsTailValidatesFlags(t *testing.T) {
	t.Parallel()
	r := run(t, "events", "tail", "--type", "limits.blocked", "--redis", unreachableRedis)
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, `--type "limits.blocked": want one of `+strings.Join(throttle.EventTypes, ", "))
	r = run(t, "events", "tail", "--count", "-1", "--redis", unreachableRedis)
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "--count: want >= 0")
}

func TestLimitsStats(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	lim := app.NewLimiter(config.Default(), rdb, nil)
	daily := defaultRule(t, "whatsapp", "daily")
	for i, n := range []int{1, 5, 2} {
		consume(t, lim, n, throttle.Request{Key: fmt.Sprintf("whatsapp:daily:+1202555010%d", i), Limit: daily.Limit})
	}
	conc := defaultRule(t, "sms", "concurrency")
	consume(t, lim, 1, throttle.Request{Key: "sms:account:" + emulator.DefaultTwilioAccountSID, Limit: conc.Limit})
	// Sluice's own keys (overrides, events) are not limiter keys.
	require.NoError(t, lim.SetOverride(context.Background(), "http:host:*", throttle.Override{Rate: throttle.PerSecond(5)}))

	r := run(t, "limits", "stats", "--redis", srv.URL())
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	require.Regexp(t, `(?m)^keys\s+4$`, r.stdout)
	require.Regexp(t, `(?m)^  hash\s+3$`, r.stdout)
	require.Regexp(t, `(?m)^  zset\s+1$`, r.stdout)
	require.Regexp(t, `(?m)^memory\s+\d+ bytes \(\d+ bytes per key\)$`, r.stdout)
	require.Contains(t, r.stdout, "top 4 keys by use of their limit:")
	require.Regexp(t, `KEY\s+LIMIT\s+USED\s+OF\s+SHARE\s+BYTES\nwhatsapp:daily:\+12025550101\s+daily\s+5\s+250\s+2%\s+\d+\n`, r.stdout)

	r = run(t, "limits", "stats", "--prefix", "whatsapp:", "--top", "1", "--json", "--redis", srv.URL())
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	var st statsJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Equal(t, int64(3), st.Keys)
	require.Equal(t, map[string]int64{"hash": 3}, st.ByType)
	require.Positive(t, st.Bytes)
	require.InDelta(t, float64(st.Bytes)/3, st.BytesPerKey, 0.01)
	require.Equal(t, []keyUseJSON{{Key: "whatsapp:daily:+12025550101", Name: "daily", Used: 5, Limit: 250, Share: 0.02, Bytes: st.Top[0].Bytes}}, st.Top)

	r = run(t, "limits", "stats", "--top", "-1", "--redis", unreachableRedis)
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "--top: want >= 0, got -1")
}

func TestLimitsShowJSON(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lim := app.NewLimiter(config.Default(), srv.Client(t), nil)
	daily := defaultRule(t, "whatsapp", "daily")
	key := "whatsapp:daily:+12025550123"
	consume(t, lim, 3, throttle.Request{Key: key, Limit: daily.Limit})

	showJSON := func(args ...string) map[string]any {
		t.Helper()
		r := run(t, append([]string{"limits", "show", "--json", "--redis", srv.URL()}, args...)...)
		require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
		var got map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
		return got
	}
	got := showJSON(key)
	reset := got["reset"].(float64)
	require.Equal(t, map[string]any{"name": "daily", "limit": 250.0, "allowed": true, "remaining": 247.0, "reset": reset, "retryAfter": 0.0}, got)
	require.Zero(t, int64(reset)%(24*3600*1000), "a day window resets at 00:00 UTC")
	require.Greater(t, int64(reset), time.Now().UnixMilli())

	// Blocked: the pair limit, 1 per 6 s, was just used.
	pair := defaultRule(t, "whatsapp", "pair")
	pairKey := "whatsapp:pair:106540352242922:+12025550123"
	consume(t, lim, 1, throttle.Request{Key: pairKey, Limit: pair.Limit})
	got = showJSON(pairKey)
	require.Equal(t, false, got["allowed"])
	require.Equal(t, 0.0, got["remaining"])
	require.Equal(t, 1.0, got["limit"])
	require.InDelta(t, 6000, got["retryAfter"], 1000)

	// An override shows in the decision and in the text.
	r := run(t, "limits", "set", key, "--rate", "1000/1d", "--redis", srv.URL())
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	got = showJSON(key)
	require.Equal(t, 1000.0, got["limit"])
	require.Equal(t, 997.0, got["remaining"])
	r = run(t, "limits", "show", key, "--redis", srv.URL())
	require.Equal(t, 0, r.code)
	require.Regexp(t, `rule\s+daily \(fixed_window 250/d\)\n`, r.stdout)
	require.Regexp(t, `override\s+rate 1000/d \(set on whatsapp:daily:\+12025550123 at `, r.stdout)
	require.Regexp(t, `remaining\s+997 of 1000\n`, r.stdout)

	// No rule matches: there is no decision to print.
	r = run(t, "limits", "show", "--json", "whatsapp:nothing:x", "--redis", srv.URL())
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "no configured rule matches the key")
}

func TestLimitsShowDistinctRule(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	path := writeFile(t, "sluice.yaml", `channels:
  whatsapp:
    limits:
      - name: tier
        key: "whatsapp:tier:{phone_number_id}"
        algorithm: distinct
        rate: 2/1d
        member: "{to}"
`)
	cfg, err := config.Load(path)
	require.NoError(t, err)
	rule := cfg.Channels["whatsapp"].Rules()[0]
	lim := app.NewLimiter(cfg, srv.Client(t), nil)
	key := "whatsapp:tier:106540352242922"
	for _, to := range []string{"+12025550101", "+12025550102"} {
		consume(t, lim, 1, throttle.Request{Key: key, Limit: rule.Limit, Member: to})
	}

	r := run(t, "limits", "show", key, "--config", path, "--redis", srv.URL())
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	require.Regexp(t, `members\s+2\n`, r.stdout)
	require.Regexp(t, `rule\s+tier \(distinct 2/d of \{to\}\)\n`, r.stdout)
	require.Regexp(t, `for\s+a new member\n`, r.stdout)
	require.Regexp(t, `remaining\s+0 of 2\n`, r.stdout)
	require.Regexp(t, `allowed now\s+false\n`, r.stdout)

	r = run(t, "limits", "show", key, "--json", "--member", "+12025550101", "--config", path, "--redis", srv.URL())
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	require.Contains(t, r.stdout, `"allowed":true`, "a member already counted passes")
}

// A campaign enqueued with send is planned at enqueue: send reports when its
// last send is expected, limits show reports the number's backlog and when
// it drains, and a high-priority enqueue for the same number is due now.
func TestSendPlansAndLimitsShowsTheBacklog(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var b strings.Builder
	b.WriteString("to,name,priority\n")
	for i := range 800 {
		fmt.Fprintf(&b, "+1202555%04d,Ann,\n", 1000+i)
	}
	b.WriteString("+12025559999,Urgent,high\n")
	path := writeFile(t, "planned.csv", b.String())
	start := time.Now()
	r := run(t, "send", "--channel", "whatsapp", "--csv", path, "--phone-number-id", "106540352242922",
		"--template", "order_update", "--params", "name", "--redis", srv.URL())
	took := time.Since(start)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "801 enqueued")
	// The time printed is in whole seconds; "(in …)" is exact, counted from
	// a moment between start and now, and the plan starts at another: each
	// is up to the run's length off on a busy host.
	in := expectedIn(t, r.stdout)
	// 800 bulk sends at 78.8/s: about 10s out.
	require.InDelta(t, 800/78.8, in.Seconds(), 1.5+took.Seconds(), "last send expected in %v; send took %v", in, took)

	// A second campaign on the number, sent right after the first, is served
	// in turns with it (1:1) instead of behind it: its 80 sends are planned
	// among the first campaign's remaining ones, not after them.
	var b2 strings.Builder
	b2.WriteString("to,name\n")
	for i := range 80 {
		fmt.Fprintf(&b2, "+1202556%04d,Bo\n", 1000+i)
	}
	r = run(t, "send", "--channel", "whatsapp", "--csv", writeFile(t, "second.csv", b2.String()), "--phone-number-id", "106540352242922",
		"--template", "order_update", "--params", "name", "--tenant", "shop-2", "--redis", srv.URL())
	require.Equal(t, 0, r.code, r.stderr)
	insp := asynq.NewInspectorFromRedisClient(srv.Client(t))
	qi, err := insp.GetQueueInfo("whatsapp")
	require.NoError(t, err)
	require.Positive(t, qi.Scheduled, "bulk sends beyond the current second are scheduled for their slot")

	// The plans in Redis tell, whenever they were made. asynq keeps a
	// scheduled task's time in whole seconds, so the test compares counts,
	// not instants: behind the first campaign, none of the first's sends
	// would be planned after the second's first second; in turns, the
	// first's remaining sends take every other place from there on. The
	// first campaign still had some 2s of sends to plan when the second was
	// sent, even on a host slow enough to take 7s over the first enqueue (a
	// CI run did).
	var first, second []time.Time
	for page := 1; ; page++ {
		ts, err := insp.ListScheduledTasks("whatsapp", asynq.PageSize(500), asynq.Page(page))
		require.NoError(t, err)
		for _, ti := range ts {
			var p struct{ Tenant string }
			require.NoError(t, json.Unmarshal(ti.Payload, &p))
			switch p.Tenant {
			case "planned":
				first = append(first, ti.NextProcessAt)
			case "shop-2":
				second = append(second, ti.NextProcessAt)
			}
		}
		if len(ts) < 500 {
			break
		}
	}
	require.NotEmpty(t, first, "scheduled sends of the first campaign, whose tenant is the campaign's name by default")
	require.NotEmpty(t, second, "scheduled sends of the second campaign")
	secondFrom, secondTo, firstTo := slices.MinFunc(second, time.Time.Compare), slices.MaxFunc(second, time.Time.Compare), slices.MaxFunc(first, time.Time.Compare)
	firstAfter := 0
	for _, at := range first {
		if at.After(secondFrom) {
			firstAfter++
		}
	}
	t.Logf("second campaign planned %v–%v; the first's last at %v, %d of its sends after the second's first second",
		secondFrom.Format(time.TimeOnly), secondTo.Format(time.TimeOnly), firstTo.Format(time.TimeOnly), firstAfter)
	require.Positive(t, firstAfter, "the second campaign waited behind the first: its first send at %v, the first's last at %v", secondFrom, firstTo)

	r = run(t, "limits", "show", "whatsapp:number:106540352242922", "--redis", srv.URL())
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `paced at\s+78.8/s \(80/s less headroom 1.5%\)`, r.stdout)
	require.Regexp(t, `backlog\s+880 planned sends`, r.stdout, "the high-priority row holds no place")
	require.Regexp(t, `drains\s+\S+ \(in `, r.stdout)

	r = run(t, "enqueue", "whatsapp", "--phone-number-id", "106540352242922", "--to", "+12025559998",
		"--template", "order_update", "--priority", "high", "--redis", srv.URL())
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `enqueued whatsapp:send id=\S+ queue=whatsapp eta=\S+ \(now\)\n`, r.stdout, "not \"(in now)\"")

	r = run(t, "enqueue", "whatsapp", "--phone-number-id", "106540352242922", "--to", "+12025559997",
		"--template", "order_update", "--priority", "urgent", "--redis", srv.URL())
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, `priority: "urgent": want "high" or "bulk"`)
}

// expectedIn returns the "(in …)" of send's "last send expected at …".
func expectedIn(t *testing.T, stdout string) time.Duration {
	t.Helper()
	m := regexp.MustCompile(`last send expected at \S+ \((?:in ([^)]+)|now)\)`).FindStringSubmatch(stdout)
	require.NotNil(t, m, stdout)
	if m[1] == "" {
		return 0 // (now)
	}
	d, err := time.ParseDuration(m[1])
	require.NoError(t, err, stdout)
	return d
}
