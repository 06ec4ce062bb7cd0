package config

import (
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
)

// ignoreLine drops rules.Rule.Line, a position in the file, from comparisons
// with Default (whose rules have Line 0).
var ignoreLine = cmpopts.IgnoreFields(rules.Rule{}, "Line")

func TestExampleFileIsDefault(t *testing.T) {
	t.Parallel()
	got, err := Load("../sluice.example.yaml")
	require.NoError(t, err)
	if diff := cmp.Diff(Default(), got, ignoreLine); diff != "" {
		t.Errorf("sluice.example.yaml differs from Default() (-want +got):\n%s", diff)
	}
	for name, ch := range got.Channels {
		for _, r := range ch.Rules() {
			require.Positive(t, r.Line, "channels.%s limit %q has no line", name, r.Limit.Name)
		}
	}
}

func TestDefaultIsValid(t *testing.T) {
	t.Parallel()
	d := Default()
	require.ElementsMatch(t, channelNames, slices.Collect(maps.Keys(d.Channels)))
	for name, ch := range d.Channels {
		require.Equal(t, name, ch.Name)
		for _, r := range ch.Rules() {
			require.NoError(t, r.Check(name, fieldNames(name)))
			require.GreaterOrEqual(t, r.Cost, int64(1))
			require.LessOrEqual(t, r.Cost, r.Limit.Capacity())
		}
	}
	require.LessOrEqual(t, d.Worker.DelayedTaskCheckInterval, time.Second)
}

func TestDefaultReturnsFreshValues(t *testing.T) {
	t.Parallel()
	a := Default()
	a.Channels["whatsapp"].Limits[0].Limit.Rate = throttle.PerSecond(1)
	a.Channels["sms"].Enabled = false
	if diff := cmp.Diff(Default().Channels["whatsapp"].Limits[0].Limit.Rate, throttle.PerSecond(80)); diff != "" {
		t.Errorf("Default shares state (-want +got):\n%s", diff)
	}
	require.True(t, Default().Channels["sms"].Enabled)

	rs := Default().Channels["sms"].Rules()
	rs[0].Cost = 9
	require.Equal(t, int64(1), Default().Channels["sms"].Rules()[0].Cost)
	var nilChannel *ChannelConfig
	require.Nil(t, nilChannel.Rules())
}

func TestParseMergesWithDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		yaml []byte
		want func(c *Config) // edits Default() into the expected result
	}{
		{name: "empty file", yaml: nil, want: func(*Config) {}},
		{name: "only comments", yaml: doc("# nothing here"), want: func(*Config) {}},
		{name: "empty sections", yaml: doc("redis:", "worker: {}", "channels:", "  sms:"), want: func(*Config) {}},
		{
			name: "redis cluster",
			yaml: doc("redis:", "  mode: cluster", "  addrs: [10.0.0.1:7000, '10.0.0.2:7000']", "  password_env: REDIS_PASSWORD"),
			want: func(c *Config) {
				c.Redis.Mode, c.Redis.Addrs, c.Redis.PasswordEnv = RedisCluster, []string{"10.0.0.1:7000", "10.0.0.2:7000"}, "REDIS_PASSWORD"
			},
		},
		{
			name: "redis sentinel",
			yaml: doc("redis:", "  mode: sentinel", "  addrs: ['[::1]:26379']", "  master_name: mymaster", "  db: 2", "  sentinel_password_env: SENTINEL_PASSWORD", "  sentinel_username_env: SENTINEL_USER"),
			want: func(c *Config) {
				c.Redis.Mode, c.Redis.Addrs, c.Redis.MasterName, c.Redis.DB, c.Redis.SentinelPasswordEnv = RedisSentinel, []string{"[::1]:26379"}, "mymaster", 2, "SENTINEL_PASSWORD"
				c.Redis.SentinelUsernameEnv = "SENTINEL_USER"
			},
		},
		{
			name: "webhook endpoints with secrets of their own, one rotating",
			yaml: doc(
				"channels:",
				"  webhook:",
				"    previous_signing_secret_env: WEBHOOK_SECRET_OLD",
				"    endpoints:",
				"      billing: {secret_env: BILLING_SECRET, urls: [https://billing.example.com/hooks/]}",
				"      crm/v2:",
				"        secret_env: CRM_SECRET",
				"        previous_secret_env: CRM_SECRET_OLD",
				"        urls:",
				"          - https://crm.example.com/in",
				"          - https://crm-eu.example.com/in",
			),
			want: func(c *Config) {
				wh := c.Channels["webhook"]
				wh.PreviousSigningSecretEnv = "WEBHOOK_SECRET_OLD"
				wh.Endpoints = map[string]WebhookEndpoint{
					"billing": {SecretEnv: "BILLING_SECRET", URLs: []string{"https://billing.example.com/hooks/"}},
					"crm/v2": {SecretEnv: "CRM_SECRET", PreviousSecretEnv: "CRM_SECRET_OLD",
						URLs: []string{"https://crm.example.com/in", "https://crm-eu.example.com/in"}},
				}
			},
		},
		{
			name: "one channel's limits replace its list only",
			yaml: doc(
				"channels:",
				"  whatsapp:",
				"    limits:",
				"      - name: throughput",
				`        key: "whatsapp:number:{phone_number_id}"`,
				"        algorithm: token_bucket",
				"        rate: 1000/s",
				"        burst: 20",
				"        cost: 2",
			),
			want: func(c *Config) {
				c.Channels["whatsapp"].Limits = []rules.Rule{{
					Limit: throttle.Limit{Name: "throughput", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1000), Burst: 20},
					Key:   "whatsapp:number:{phone_number_id}",
					Cost:  2,
					Line:  4,
				}}
			},
		},
		{
			name: "pacing",
			yaml: doc("channels:", "  whatsapp:", "    headroom: 2.5%", "    hold: 2s", "  sms:", "    headroom: 0%"),
			want: func(c *Config) {
				c.Channels["whatsapp"].Headroom, c.Channels["whatsapp"].Hold = 0.025, 2*time.Second
				c.Channels["sms"].Headroom = 0
			},
		},
		{
			name: "tenant weights",
			yaml: doc("channels:", "  whatsapp:", "    tenant_weights:", "      acme: 3", `      "big shop": 1`),
			want: func(c *Config) { c.Channels["whatsapp"].TenantWeights = map[string]float64{"acme": 3, "big shop": 1} },
		},
		{
			name: "empty limit list",
			yaml: doc("channels:", "  http:", "    limits: []"),
			want: func(c *Config) { c.Channels["http"].Limits = []rules.Rule{} },
		},
		{
			name: "disabled channel keeps the rest",
			yaml: doc("channels:", "  sms:", "    enabled: false"),
			want: func(c *Config) { c.Channels["sms"].Enabled = false },
		},
		{
			name: "scalars in several sections",
			yaml: doc(
				"redis:",
				"  url_env: ''",
				"  addr: redis.internal:6380",
				"  db: 3",
				"worker:",
				"  concurrency: 8",
				"  delayed_task_check_interval: 1s",
				"http:",
				"  listen: ''",
				"cleanup:",
				"  schedule: '*/5 * * * *'",
				"channels:",
				"  whatsapp:",
				"    base_url: http://127.0.0.1:8081",
				"    api_version: v24.0",
				"    token_env: WA_TOKEN",
				"    app_secret_env: META_APP_SECRET",
				"    verify_token_env: META_VERIFY_TOKEN",
				"    priority: 6",
				"  webhook:",
				"    queue: hooks",
				"    timeout: 30s",
				"    throttle_backoff: 2s",
			),
			want: func(c *Config) {
				c.Redis.URLEnv = ""
				c.Redis.Addr = "redis.internal:6380"
				c.Redis.DB = 3
				c.Worker.Concurrency = 8
				c.Worker.DelayedTaskCheckInterval = time.Second
				c.HTTP.Listen = ""
				c.Cleanup.Schedule = "*/5 * * * *"
				wa := c.Channels["whatsapp"]
				wa.BaseURL, wa.APIVersion, wa.TokenEnv, wa.Priority = "http://127.0.0.1:8081", "v24.0", "WA_TOKEN", 6
				wa.AppSecretEnv, wa.VerifyTokenEnv = "META_APP_SECRET", "META_VERIFY_TOKEN"
				wh := c.Channels["webhook"]
				wh.Queue, wh.Timeout, wh.ThrottleBackoff = "hooks", 30*time.Second, 2*time.Second
			},
		},
		{
			name: "concurrency rule gets the default lease, anchors resolve",
			yaml: doc(
				"channels:",
				"  sms:",
				"    timeout: &t 20s",
				"    throttle_backoff: *t",
				"    limits:",
				"      - {name: concurrency, key: 'sms:account:{account_sid}', algorithm: concurrency, max: 10}",
				"      - {name: pair, key: 'sms:pair:{from}:{to}', algorithm: fixed_window, rate: 30/30s, cost: 2}",
			),
			want: func(c *Config) {
				sms := c.Channels["sms"]
				sms.Timeout, sms.ThrottleBackoff = 20*time.Second, 20*time.Second
				sms.Limits = []rules.Rule{
					{Limit: throttle.Limit{Name: "concurrency", Algorithm: throttle.Concurrency, Max: 10, Lease: throttle.DefaultLease}, Key: "sms:account:{account_sid}", Cost: 1, Line: 6},
					{Limit: throttle.Limit{Name: "pair", Algorithm: throttle.FixedWindow, Rate: throttle.Rate{Limit: 30, Period: 30 * time.Second}}, Key: "sms:pair:{from}:{to}", Cost: 2, Line: 7},
				}
			},
		},
		{
			name: "sms cost in segments",
			yaml: doc(
				"channels:",
				"  sms:",
				"    limits:",
				"      - {name: sender, key: 'sms:sender:{sender}', algorithm: gcra, rate: 10/s, burst: 2, cost: segments}",
			),
			want: func(c *Config) {
				c.Channels["sms"].Limits = []rules.Rule{
					{Limit: throttle.Limit{Name: "sender", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(10), Burst: 2}, Key: "sms:sender:{sender}", Cost: 1, CostField: "segments", Line: 4},
				}
			},
		},
		{
			name: "events section",
			yaml: doc("events:", "  max_len: 500", "  warn_at: 0.25"),
			want: func(c *Config) { c.Events.MaxLen, c.Events.WarnAt = 500, 0.25 },
		},
		{
			name: "events off, warnings off",
			yaml: doc("events: {enabled: false, warn_at: 0}"),
			want: func(c *Config) { c.Events.Enabled, c.Events.WarnAt = false, 0 },
		},
		{
			name: "sliding windows, min_interval and distinct rules",
			yaml: doc(
				"channels:",
				"  whatsapp:",
				"    limits:",
				"      - {name: throughput, key: 'whatsapp:number:{phone_number_id}', algorithm: sliding_window_log, rate: 80/s, cost: 2}",
				"      - {name: minute, key: 'whatsapp:minute:{phone_number_id}', algorithm: sliding_window_counter, rate: 1000/1m}",
				"      - {name: pair, key: 'whatsapp:pair:{phone_number_id}:{to}', algorithm: min_interval, interval: 6s}",
				"      - {name: cool, key: 'whatsapp:cool:{to}', algorithm: cooldown, interval: 1m30s}",
				"      - name: tier",
				"        key: 'whatsapp:tier:{phone_number_id}'",
				"        algorithm: distinct",
				"        rate: 250/1d",
				"        member: '{to}'",
				"        cost: 1",
			),
			want: func(c *Config) {
				c.Channels["whatsapp"].Limits = []rules.Rule{
					{Limit: throttle.Limit{Name: "throughput", Algorithm: throttle.SlidingWindowLog, Rate: throttle.PerSecond(80)}, Key: "whatsapp:number:{phone_number_id}", Cost: 2, Line: 4},
					{Limit: throttle.Limit{Name: "minute", Algorithm: throttle.SlidingWindowCounter, Rate: throttle.PerMinute(1000)}, Key: "whatsapp:minute:{phone_number_id}", Cost: 1, Line: 5},
					{Limit: throttle.Limit{Name: "pair", Algorithm: throttle.MinInterval, Interval: 6 * time.Second}, Key: "whatsapp:pair:{phone_number_id}:{to}", Cost: 1, Line: 6},
					{Limit: throttle.Limit{Name: "cool", Algorithm: throttle.MinInterval, Interval: 90 * time.Second}, Key: "whatsapp:cool:{to}", Cost: 1, Line: 7},
					{Limit: throttle.Limit{Name: "tier", Algorithm: throttle.Distinct, Rate: throttle.PerDay(250)}, Key: "whatsapp:tier:{phone_number_id}", Member: "{to}", Cost: 1, Line: 8},
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse("sluice.yaml", tt.yaml)
			require.NoError(t, err)
			want := Default()
			tt.want(want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Parse mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadReadsFile(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/sluice.yaml"
	require.NoError(t, os.WriteFile(path, doc("worker:", "  concurrency: 0"), 0o600))
	_, err := Load(path)
	require.EqualError(t, err, path+":2:16: worker.concurrency: want >= 1, got 0")
}

// Tests below use t.Setenv, so they do not run in parallel.

func TestRedisURL(t *testing.T) {
	const env = "SLUICE_TEST_REDIS_URL"
	cfg := Default()
	cfg.Redis.URLEnv = env

	t.Setenv(env, "")
	got, err := cfg.RedisURL()
	require.NoError(t, err)
	require.Equal(t, "redis://127.0.0.1:6379/0", got, "unset or empty variable: addr and db")

	cfg.Redis.Addr, cfg.Redis.DB = "[::1]:6380", 2
	got, err = cfg.RedisURL()
	require.NoError(t, err)
	require.Equal(t, "redis://[::1]:6380/2", got)

	const secretURL = "rediss://:hunter2@redis.example.com:6380/1"
	t.Setenv(env, secretURL)
	got, err = cfg.RedisURL()
	require.NoError(t, err)
	require.Equal(t, secretURL, got, "the variable wins over addr")

	for _, bad := range []string{"hunter2", "http://:hunter2@h/0", "redis://:hunter2@/0", "redis://:hunter2@h:6379/%zz"} {
		t.Setenv(env, bad)
		_, err = cfg.RedisURL()
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), "env "+env+": ")
		require.NotContains(t, err.Error(), "hunter2")
	}

	cfg.Redis.URLEnv = ""
	got, err = cfg.RedisURL()
	require.NoError(t, err)
	require.Equal(t, "redis://[::1]:6380/2", got, `url_env "" never reads the environment`)
}

func TestSecret(t *testing.T) {
	const env = "SLUICE_TEST_TOKEN"
	cfg := Default()

	t.Setenv(env, "EAAG-secret-value")
	got, err := cfg.Secret(env)
	require.NoError(t, err)
	require.Equal(t, "EAAG-secret-value", got)

	t.Setenv(env, "")
	_, err = cfg.Secret(env)
	require.EqualError(t, err, "config: env SLUICE_TEST_TOKEN is empty")

	require.NoError(t, os.Unsetenv(env)) // t.Setenv restores it afterwards
	_, err = cfg.Secret(env)
	require.EqualError(t, err, "config: env SLUICE_TEST_TOKEN is not set")

	_, err = cfg.Secret("EAAG-secret-value")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "secret-value")
}

func TestAdaptiveSection(t *testing.T) {
	cfg, err := Parse("sluice.yaml", []byte("channels:\n  sms:\n    adaptive:\n      decrease: 50%\n      quiet: 10s\n  whatsapp:\n    adaptive: {enabled: false}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := throttle.AdaptOptions{Decrease: 0.5, Quiet: 10 * time.Second}.WithDefaults()
	if got := cfg.Channels["sms"].Adaptive; got != want {
		t.Errorf("sms adaptive %+v, want %+v", got, want)
	}
	if !cfg.Channels["whatsapp"].Adaptive.Disabled {
		t.Errorf("whatsapp adaptive %+v, want disabled", cfg.Channels["whatsapp"].Adaptive)
	}
	if got := cfg.Channels["webhook"].Adaptive; got != (throttle.AdaptOptions{}.WithDefaults()) {
		t.Errorf("webhook adaptive %+v, want the defaults", got)
	}
	for _, c := range []struct{ yaml, want string }{
		{"channels:\n  sms:\n    adaptive:\n      decrease: 150%\n", "sluice.yaml:4:17: channels.sms.adaptive.decrease: want more than 0 and less than 1, got 1.5"},
		{"channels:\n  sms:\n    adaptive:\n      floor: 0\n", "sluice.yaml:4:14: channels.sms.adaptive.floor: want more than 0, got 0"},
		{"channels:\n  sms:\n    adaptive:\n      quiet: 10ms\n", "sluice.yaml:4:14: channels.sms.adaptive.quiet: want at least 1s, got 10ms"},
		{"channels:\n  sms:\n    adaptive:\n      margin: lots\n", `sluice.yaml:4:15: channels.sms.adaptive.margin: want a fraction such as 25% or 0.25, got "lots"`},
		{"channels:\n  sms:\n    adaptive:\n      decrese: 50%\n", "sluice.yaml:4:7: channels.sms.adaptive.decrese: unknown field (want enabled, decrease, floor, increase, quiet, margin or ceiling_ttl)"},
	} {
		_, err := Parse("sluice.yaml", []byte(c.yaml))
		if err == nil || err.Error() != c.want {
			t.Errorf("%q: %v\nwant %s", c.yaml, err, c.want)
		}
	}
}

// channels.whatsapp.templates declares templates' shapes, checked at
// enqueue; a bad shape is an error naming its field.
func TestTemplatesSection(t *testing.T) {
	t.Parallel()
	cfg, err := Parse("sluice.yaml", []byte(doc(
		"channels:",
		"  whatsapp:",
		"    templates:",
		"      order_shipped: {header: image, body_params: 2, buttons: [quick_reply, url]}",
		"      hello_world: {}",
	)))
	require.NoError(t, err)
	require.Equal(t, map[string]tasks.TemplateShape{
		"order_shipped": {Header: "image", BodyParams: 2, Buttons: []string{"quick_reply", "url"}},
		"hello_world":   {},
	}, cfg.Channels["whatsapp"].Templates)

	_, err = Parse("sluice.yaml", []byte(doc(
		"channels:",
		"  whatsapp:",
		"    templates:",
		"      Bad-Name: {}",
		"      promo: {header: sticker}",
		"      coupon: {buttons: [copy_code, call]}",
	)))
	require.EqualError(t, err, strings.Join([]string{
		`sluice.yaml:4:7: channels.whatsapp.templates: want a template name (lower-case letters, digits and _) as key, got "Bad-Name"`,
		`sluice.yaml:5:14: channels.whatsapp.templates.promo.header: "sticker": want none, text, image, video, document or location`,
		`sluice.yaml:6:15: channels.whatsapp.templates.coupon.buttons[1]: "call": want quick_reply, url, copy_code or none`,
	}, "\n"))
}
