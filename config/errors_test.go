package config

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"
)

// doc joins lines with "\n": line i of the file is lines[i-1], so positions in
// the expected errors can be read off the test.
func doc(lines ...string) []byte { return []byte(strings.Join(lines, "\n") + "\n") }

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		yaml []byte
		want []string // the error's lines, in order
	}{
		{
			name: "bad rate unit",
			yaml: doc(
				"channels:",
				"  whatsapp:",
				"    limits:",
				"      - name: throughput",
				`        key: "whatsapp:number:{phone_number_id}"`,
				"        algorithm: gcra",
				"        rate: 80/x",
			),
			want: []string{`sluice.yaml:7:15: channels.whatsapp.limits[0].rate: rate "80/x": period "x": unknown unit "x" (want ms, s, m, h or d)`},
		},
		{
			name: "bad pacing",
			yaml: doc(
				"channels:",
				"  whatsapp:",
				"    headroom: 0.01",
				"  sms:",
				"    headroom: 60%",
				"  webhook:",
				"    hold: 500ms",
			),
			want: []string{
				`sluice.yaml:3:15: channels.whatsapp.headroom: want a percentage such as 1%, got "0.01"`,
				`sluice.yaml:5:15: channels.sms.headroom: want 0% to 50%, got 60%`,
				`sluice.yaml:7:11: channels.webhook.hold: want 1s to 10s: asynq brings a planned send back at the whole second of its slot, so the hold must span a second, got 500ms`,
			},
		},
		{
			name: "bad tenant weights",
			yaml: doc(
				"channels:",
				"  whatsapp:",
				"    tenant_weights:",
				"      acme: 0",
				"      globex: 1.5",
				"      initech: 5000",
				"      acme: 2",
				"  sms:",
				"    tenant_weights: [acme]",
			),
			want: []string{
				`sluice.yaml:4:13: channels.whatsapp.tenant_weights.acme: want >= 1, got 0`,
				`sluice.yaml:5:15: channels.whatsapp.tenant_weights.globex: want a whole number, got "1.5"`,
				`sluice.yaml:6:16: channels.whatsapp.tenant_weights.initech: want a weight of 1 to 1000, got 5000`,
				`sluice.yaml:7:7: channels.whatsapp.tenant_weights.acme: tenant given twice`,
				`sluice.yaml:9:21: channels.sms.tenant_weights: want a mapping of tenant: weight, got a list`,
			},
		},
		{
			name: "spread_by",
			yaml: doc(
				"channels:",
				"  whatsapp:",
				"    spread_by: to",
				"  sms:",
				"    spread_by: phone_number_id",
				"  webhook:",
				"    spread_by: host",
			),
			want: []string{
				`sluice.yaml:3:16: channels.whatsapp.spread_by: limits[0] (throughput) is gcra and its key "whatsapp:number:{phone_number_id}" does not name {to}: a send's gcra limits are paced together in one scope, so each must name the field`,
				`sluice.yaml:5:16: channels.sms.spread_by: "phone_number_id" is not a field of sms tasks (want one of: from, messaging_service_sid, to, sender, account_sid, segments)`,
			},
		},
		{
			name: "queue_groups",
			yaml: doc(
				"channels:",
				"  whatsapp:",
				"    queue_groups: 8",
				"  sms:",
				"    spread_by: sender",
				"    queue_groups: 65",
				"  webhook:",
				"    queue: sms.g0",
				"    queue_groups: 0",
			),
			want: []string{
				`sluice.yaml:3:19: channels.whatsapp.queue_groups: 8 queue groups need spread_by: a send's group is chosen by its spread_by value`,
				`sluice.yaml:6:19: channels.sms.queue_groups: want at most 64, got 65`,
				`sluice.yaml:9:19: channels.webhook.queue_groups: want >= 1, got 0`,
			},
		},
		{
			name: "queue groups of two channels",
			yaml: doc(
				"channels:",
				"  sms:",
				"    spread_by: sender",
				"    queue_groups: 4",
				"  webhook:",
				"    queue: sms.g3",
			),
			want: []string{
				`sluice.yaml:6:5: channels.webhook: queue "sms.g3" is also the sms channel's: each channel needs queues of its own (queue, queue_groups)`,
			},
		},
		{
			name: "redis modes",
			yaml: doc(
				"redis:",
				"  mode: cluster",
				"  addr: 127.0.0.1:6379",
				"  db: 3",
				"  master_name: mymaster",
			),
			want: []string{
				`sluice.yaml:2:9: redis.addrs: required with mode cluster: host:port of some of the cluster's nodes`,
				`sluice.yaml:3:9: redis.addr: only with mode single: with mode cluster the servers are addrs (and --redis URL, for one server, overrides the mode)`,
				`sluice.yaml:4:7: redis.db: 3: a cluster has database 0 only`,
				`sluice.yaml:5:16: redis.master_name: only with mode sentinel`,
			},
		},
		{
			name: "redis sentinel and single",
			yaml: doc(
				"redis:",
				"  mode: sentinel",
				"  addrs: [10.0.0.1:26379, 10.0.0.1:26379, nohost]",
			),
			want: []string{
				`sluice.yaml:2:9: redis.master_name: required with mode sentinel: the name the Sentinels monitor the master under`,
				`sluice.yaml:3:27: redis.addrs[1]: 10.0.0.1:26379 given twice`,
				`sluice.yaml:3:43: redis.addrs[2]: want host:port, got "nohost"`,
			},
		},
		{
			name: "redis tls",
			yaml: doc(
				"redis:",
				"  mode: cluster",
				"  addrs: [10.0.0.1:7000]",
				"  tls: true",
				"  tls_ca_file: testdata/no-such-ca.pem",
				"  tls_server_name: redis.example.com:6379",
			),
			want: []string{
				`sluice.yaml:5:16: redis.tls_ca_file: read testdata/no-such-ca.pem: no such file or directory`,
				`sluice.yaml:6:20: redis.tls_server_name: want the host name the servers' certificates carry, got "redis.example.com:6379"`,
			},
		},
		{
			name: "redis tls needs a cluster or a sentinel, and tls: true",
			yaml: doc(
				"redis:",
				"  tls: true",
				"  tls_server_name: redis.example.com",
			),
			want: []string{
				`sluice.yaml:2:8: redis.tls: only with mode cluster or sentinel (a single server takes TLS with a rediss:// URL)`,
				`sluice.yaml:3:20: redis.tls_server_name: only with mode cluster or sentinel (a single server takes TLS with a rediss:// URL)`,
			},
		},
		{
			name: "redis tls files only with tls",
			yaml: doc(
				"redis:",
				"  mode: sentinel",
				"  addrs: [10.0.0.1:26379]",
				"  master_name: m",
				"  tls_server_name: redis.example.com",
			),
			want: []string{
				`sluice.yaml:5:20: redis.tls_server_name: only with tls: true`,
			},
		},
		{
			name: "redis single takes no addrs",
			yaml: doc("redis:", "  mode: single", "  addrs: [10.0.0.1:6379]", "  mode2: x"),
			want: []string{
				`sluice.yaml:3:10: redis.addrs: only with mode cluster or sentinel (a single server's address is addr, its credentials are in its URL)`,
				`sluice.yaml:4:3: redis.mode2: unknown field (want mode, addrs, master_name, username_env, password_env, sentinel_username_env, sentinel_password_env, tls, tls_ca_file, tls_server_name, url_env, addr, db or key_prefix)`,
			},
		},
		{
			name: "unknown channel",
			yaml: doc(
				"redis:",
				"  addr: 127.0.0.1:6379",
				"worker:",
				"  concurrency: 10",
				"channels:",
				"  whatsapp:",
				"    enabled: false",
				"    queue: wa",
				"  telegram:",
				"    enabled: true",
			),
			want: []string{`sluice.yaml:9:3: channels.telegram: unknown channel (want whatsapp, sms, webhook or http)`},
		},
		{
			name: "unknown section and fields",
			yaml: doc(
				"reddis:",
				"  addr: x",
				"worker:",
				"  concurency: 5",
				"channels:",
				"  sms:",
				"    token_env: WHATSAPP_TOKEN",
				"    limits:",
				`      - {name: sender, key: "sms:sender:{sender}", algorithm: gcra, rate: 1/s, burts: 2}`,
			),
			want: []string{
				`sluice.yaml:1:1: reddis: unknown section (want redis, worker, http, cleanup, events, egress or channels)`,
				`sluice.yaml:4:3: worker.concurency: unknown field (want concurrency, delayed_task_check_interval, task_check_interval, shutdown_timeout or max_retry)`,
				// The settings table's keys, in its order (today probe_every,
				// timeout, throttle_backoff, …, tenant_weights).
				`sluice.yaml:7:5: channels.sms.token_env: unknown field (want enabled, queue, priority, base_url, account_sid_env, auth_token_env, ` +
					strings.Join(settingNames("sms"), ", ") + `, adaptive, limits or retry)`,
				`sluice.yaml:9:80: channels.sms.limits[0].burts: unknown field (want name, key, algorithm, rate, burst, cost, max, lease, interval or member)`,
			},
		},
		{
			name: "bad algorithm",
			yaml: doc(
				"channels:",
				"  webhook:",
				"    limits:",
				`      - {name: host, key: "webhook:host:{host}", algorithm: leaky, rate: 10/s}`,
			),
			want: []string{`sluice.yaml:4:61: channels.webhook.limits[0].algorithm: algorithm "leaky": want one of gcra, fixed_window, sliding_window_log, sliding_window_counter, min_interval, concurrency, distinct (aliases token_bucket, leaky_bucket, cooldown)`},
		},
		{
			name: "placeholder not a field of the channel",
			yaml: doc(
				"channels:",
				"  whatsapp:",
				"    limits:",
				"      - name: pair",
				"        key: whatsapp:pair:{phone_number_id}:{phone}",
				"        algorithm: gcra",
				"        rate: 1/6s",
			),
			want: []string{`sluice.yaml:5:14: channels.whatsapp.limits[0].key: key "whatsapp:pair:{phone_number_id}:{phone}": placeholder {phone} is not a field of whatsapp tasks (want {phone_number_id}, {to})`},
		},
		{
			name: "scope is not the channel",
			yaml: doc(
				"channels:",
				"  whatsapp:",
				"    limits:",
				"      - name: throughput",
				"        key: sms:number:{phone_number_id}",
				"        algorithm: gcra",
				"        rate: 80/s",
			),
			want: []string{`sluice.yaml:5:14: channels.whatsapp.limits[0].key: key "sms:number:{phone_number_id}": scope "sms" must be the channel name "whatsapp"`},
		},
		{
			name: "empty key segment and unclosed placeholder",
			yaml: doc(
				"channels:",
				"  webhook:",
				"    limits:",
				"      - {name: a, key: 'webhook::{host}', algorithm: gcra, rate: 10/s}",
				"      - {name: b, key: 'webhook:{host', algorithm: gcra, rate: 10/s}",
				"      - {name: c, key: 'webhook', algorithm: gcra, rate: 10/s}",
			),
			want: []string{
				`sluice.yaml:4:24: channels.webhook.limits[0].key: key "webhook::{host}": segment 2 is empty`,
				`sluice.yaml:5:24: channels.webhook.limits[1].key: key "webhook:{host": "{" without "}"`,
				`sluice.yaml:6:24: channels.webhook.limits[2].key: key "webhook": want at least two segments, webhook:<what>[:…]`,
			},
		},
		{
			name: "duplicate limit name",
			yaml: doc(
				"channels:",
				"  http:",
				"    limits:",
				"      - {name: host, key: 'http:host:{host}', algorithm: gcra, rate: 10/s}",
				"      - {name: host, key: 'http:url:{url}', algorithm: gcra, rate: 1/s}",
			),
			want: []string{`sluice.yaml:5:16: channels.http.limits[1].name: duplicate limit name "host" (first at line 4); names are unique per channel`},
		},
		{
			name: "fixed window of 6s",
			yaml: doc(
				"channels:",
				"  whatsapp:",
				"    limits:",
				"      - name: pair",
				"        key: whatsapp:pair:{phone_number_id}:{to}",
				"        algorithm: fixed_window",
				"        rate: 1/6s",
			),
			want: []string{`sluice.yaml:7:15: channels.whatsapp.limits[0].rate: limit "pair": rate 1/6s: window 6s: fixed_window needs one of 1s, 30s, 1m, 5m, 1h, 1d`},
		},
		{
			name: "sliding window log of 6s names the window",
			yaml: doc(
				"channels:",
				"  whatsapp:",
				"    limits:",
				"      - name: pair",
				"        key: whatsapp:pair:{phone_number_id}:{to}",
				"        algorithm: sliding_window_log",
				"        rate: 1/6s",
			),
			want: []string{`sluice.yaml:7:15: channels.whatsapp.limits[0].rate: limit "pair": rate 1/6s: window 6s: sliding_window_log needs one of 1s, 30s, 1m, 5m, 1h, 1d`},
		},
		{
			name: "min_interval and distinct fields",
			yaml: doc(
				"channels:",
				"  whatsapp:",
				"    limits:",
				"      - {name: a, key: 'whatsapp:pair:{to}', algorithm: min_interval}",
				"      - {name: b, key: 'whatsapp:pair:{to}', algorithm: cooldown, interval: 6s, rate: 1/6s}",
				"      - {name: c, key: 'whatsapp:pair:{to}', algorithm: min_interval, interval: 6s, cost: 2}",
				"      - {name: d, key: 'whatsapp:pair:{to}', algorithm: min_interval, interval: 100us}",
				"      - {name: e, key: 'whatsapp:pair:{to}', algorithm: gcra, rate: 1/6s, member: '{to}'}",
				"      - {name: f, key: 'whatsapp:tier:{phone_number_id}', algorithm: distinct, rate: 250/1d}",
				"      - {name: g, key: 'whatsapp:tier:{phone_number_id}', algorithm: distinct, member: '{to}'}",
				"      - {name: h, key: 'whatsapp:tier:{phone_number_id}', algorithm: distinct, rate: 250/1d, member: '{phone}'}",
				"      - {name: i, key: 'whatsapp:tier:{phone_number_id}', algorithm: distinct, rate: 250/1d, member: 'all'}",
				"      - {name: j, key: 'whatsapp:tier:{phone_number_id}', algorithm: distinct, rate: 250/1d, member: '{to}', cost: 2}",
				"      - {name: k, key: 'whatsapp:tier:{phone_number_id}', algorithm: distinct, rate: 250/24h, member: '{to}', interval: 1s}",
			),
			want: []string{
				`sluice.yaml:4:9: channels.whatsapp.limits[0].interval: required by algorithm min_interval (a duration such as 6s: the least time between two tasks)`,
				`sluice.yaml:5:87: channels.whatsapp.limits[1].rate: not used by algorithm min_interval (it uses interval)`,
				`sluice.yaml:6:91: channels.whatsapp.limits[2].cost: 2 is more than the limit admits at once (1, one task per interval): no task could ever pass`,
				`sluice.yaml:7:81: channels.whatsapp.limits[3].interval: want at least 1ms, got 100µs`,
				`sluice.yaml:8:83: channels.whatsapp.limits[4].member: not used by algorithm gcra (it uses rate and burst)`,
				`sluice.yaml:9:9: channels.whatsapp.limits[5].member: required by algorithm distinct (a template such as {to}: the subject counted)`,
				`sluice.yaml:10:9: channels.whatsapp.limits[6].rate: required by algorithm distinct (N/window: N distinct members per window of 1s, 30s, 1m, 5m, 1h or 1d)`,
				`sluice.yaml:11:102: channels.whatsapp.limits[7].member: member "{phone}": placeholder {phone} is not a field of whatsapp tasks (want {phone_number_id}, {to})`,
				`sluice.yaml:12:102: channels.whatsapp.limits[8].member: member "all": want at least one placeholder naming a task field ({phone_number_id}, {to}); a constant member counts once`,
				`sluice.yaml:13:116: channels.whatsapp.limits[9].cost: not used by algorithm distinct: a new member counts 1, a member already counted 0 (omit cost)`,
				`sluice.yaml:14:121: channels.whatsapp.limits[10].interval: not used by algorithm distinct (it uses rate and member)`,
			},
		},
		{
			name: "bad durations",
			yaml: doc(
				"worker:",
				"  shutdown_timeout: 30",
				"channels:",
				"  sms:",
				"    timeout: fast",
				"    throttle_backoff: -1s",
			),
			want: []string{
				`sluice.yaml:2:21: worker.shutdown_timeout: want a duration such as 100ms, 15s or 1m, got "30"`,
				`sluice.yaml:5:14: channels.sms.timeout: want a duration such as 100ms, 15s or 1m, got "fast"`,
				`sluice.yaml:6:23: channels.sms.throttle_backoff: want a duration > 0, got -1s`,
			},
		},
		{
			name: "delayed task check interval over 1s",
			yaml: doc(
				"worker:",
				"  delayed_task_check_interval: 5s",
			),
			want: []string{`sluice.yaml:2:32: worker.delayed_task_check_interval: 5s is longer than 1s: asynq moves due retry and scheduled tasks to pending only this often, so every throttled task would wait up to 5s past its RetryAfter`},
		},
		{
			name: "field rules by algorithm",
			yaml: doc(
				"channels:",
				"  sms:",
				"    limits:",
				"      - {name: a, key: 'sms:account:{account_sid}', algorithm: concurrency, rate: 100/s}",
				"      - {name: b, key: 'sms:sender:{sender}', algorithm: gcra}",
				"      - {name: c, key: 'sms:sender:{sender}', algorithm: gcra, rate: 1/s, lease: 5s}",
				"      - {name: d, key: 'sms:sender:{sender}', algorithm: gcra, rate: 1/s, burst: 0}",
				"      - {name: e, key: 'sms:to:{to}', algorithm: fixed_window, rate: 10/1m, cost: 11}",
				"      - {name: f, key: 'sms:to:{to}', algorithm: gcra, rate: 1/s, burst: 2, cost: 3}",
				"      - {name: g, key: 'sms:to:{to}', algorithm: token_bucket, rate: 1/s, cost: 0}",
			),
			want: []string{
				`sluice.yaml:4:9: channels.sms.limits[0].max: required by algorithm concurrency (leases held at once)`,
				`sluice.yaml:4:83: channels.sms.limits[0].rate: not used by algorithm concurrency (it uses max and lease)`,
				`sluice.yaml:5:9: channels.sms.limits[1].rate: required by algorithm gcra (N/period such as 80/s, 1/6s or 250/1d)`,
				`sluice.yaml:6:82: channels.sms.limits[2].lease: not used by algorithm gcra (it uses rate and burst)`,
				`sluice.yaml:7:82: channels.sms.limits[3].burst: want >= 1, got 0`,
				`sluice.yaml:8:83: channels.sms.limits[4].cost: 11 is more than the limit admits at once (10, its rate count): no task could ever pass`,
				`sluice.yaml:9:83: channels.sms.limits[5].cost: 3 is more than the limit admits at once (2, its burst): no task could ever pass`,
				`sluice.yaml:10:81: channels.sms.limits[6].cost: want >= 1, got 0`,
			},
		},
		{
			name: "cost names a whole-number field",
			yaml: doc(
				"channels:",
				"  sms:",
				"    limits:",
				"      - {name: a, key: 'sms:sender:{sender}', algorithm: gcra, rate: 1/s, cost: pages}",
				"      - {name: b, key: 'sms:to:{to}', algorithm: distinct, rate: 10/1d, member: '{to}', cost: segments}",
				"  whatsapp:",
				"    limits:",
				"      - {name: c, key: 'whatsapp:number:{phone_number_id}', algorithm: gcra, rate: 80/s, cost: segments}",
			),
			want: []string{
				`sluice.yaml:4:81: channels.sms.limits[0].cost: want a whole number or segments, got "pages"`,
				`sluice.yaml:5:95: channels.sms.limits[1].cost: limit "b": cost segments: a distinct limit counts a new member 1 (omit cost)`,
				`sluice.yaml:8:96: channels.whatsapp.limits[0].cost: want a whole number, got "segments"`,
			},
		},
		{
			name: "missing required rule fields",
			yaml: doc(
				"channels:",
				"  http:",
				"    limits:",
				"      - rate: 10/s",
				"      - {}",
				"      - host",
			),
			want: []string{
				`sluice.yaml:4:9: channels.http.limits[0].name: required`,
				`sluice.yaml:4:9: channels.http.limits[0].key: required`,
				`sluice.yaml:4:9: channels.http.limits[0].algorithm: required (gcra, fixed_window, sliding_window_log, sliding_window_counter, min_interval, concurrency or distinct)`,
				`sluice.yaml:5:9: channels.http.limits[1].name: required`,
				`sluice.yaml:5:9: channels.http.limits[1].key: required`,
				`sluice.yaml:5:9: channels.http.limits[1].algorithm: required (gcra, fixed_window, sliding_window_log, sliding_window_counter, min_interval, concurrency or distinct)`,
				`sluice.yaml:6:9: channels.http.limits[2]: want a limit rule mapping (name, key, algorithm, rate, burst, cost, max, lease, interval, member), got "host"`,
			},
		},
		{
			name: "bad retry budgets",
			yaml: doc(
				"channels:",
				"  whatsapp:",
				"    retry: {max_age: 0s}",
				"  sms:",
				"    retry: {}",
				"  webhook:",
				"    retry:",
				"      schedule: [5s, soon, 200h]",
				"      max_attempts: 0",
				"      every: 1m",
				"  http:",
				"    retry:",
				"      schedule: 5s",
				"      max_age: 1000h",
			),
			want: []string{
				`sluice.yaml:3:22: channels.whatsapp.retry.max_age: want a duration > 0, got 0s`,
				`sluice.yaml:5:12: channels.sms.retry: want a schedule, max_attempts or max_age: a budget that never ends would retry a failing task forever`,
				`sluice.yaml:8:22: channels.webhook.retry.schedule[1]: want a duration such as 100ms, 15s or 1m, got "soon"`,
				`sluice.yaml:8:28: channels.webhook.retry.schedule[2]: want at most 168h0m0s, got 200h0m0s`,
				`sluice.yaml:9:21: channels.webhook.retry.max_attempts: want >= 1, got 0`,
				`sluice.yaml:10:7: channels.webhook.retry.every: unknown field (want schedule, max_attempts or max_age)`,
				`sluice.yaml:13:17: channels.http.retry.schedule: want a list of waits such as [5s, 5m, 30m, 2h], got "5s"`,
				`sluice.yaml:14:16: channels.http.retry.max_age: want at most 720h0m0s, got 1000h0m0s`,
			},
		},
		{
			name: "wrong value types",
			yaml: doc(
				"redis:",
				"  db: -1",
				"  addr: localhost",
				"  key_prefix: 'a b'",
				"worker:",
				"  concurrency: many",
				"  max_retry: 1.5",
				"http:",
				"  listen: [127.0.0.1]",
				"cleanup:",
				"  schedule: every minute",
				"  batch:",
				"channels:",
				"  whatsapp:",
				"    enabled: maybe",
				"    priority: 0",
				"    base_url: graph.facebook.com",
				"    api_version: 23",
				"    queue: 'wa queue'",
				"    limits: {name: x}",
			),
			want: []string{
				`sluice.yaml:2:7: redis.db: want >= 0, got -1`,
				`sluice.yaml:3:9: redis.addr: want host:port, got "localhost"`,
				`sluice.yaml:4:15: redis.key_prefix: want a non-empty prefix without spaces or braces, got "a b"`,
				`sluice.yaml:6:16: worker.concurrency: want a whole number, got "many"`,
				`sluice.yaml:7:14: worker.max_retry: want a whole number, got "1.5"`,
				`sluice.yaml:9:11: http.listen: want a single value, got a list`,
				`sluice.yaml:11:13: cleanup.schedule: cron spec "every minute": expected exactly 5 fields, found 2: [every minute]`,
				`sluice.yaml:12:9: cleanup.batch: no value (omit the field to keep its default)`,
				`sluice.yaml:15:14: channels.whatsapp.enabled: want true or false, got "maybe"`,
				`sluice.yaml:16:15: channels.whatsapp.priority: want >= 1, got 0`,
				`sluice.yaml:17:15: channels.whatsapp.base_url: want an absolute http(s) URL without query, got "graph.facebook.com"`,
				`sluice.yaml:18:18: channels.whatsapp.api_version: want a Graph API version such as v23.0, got "23"`,
				`sluice.yaml:19:12: channels.whatsapp.queue: want a queue name (letters, digits, _ . : -), got "wa queue"`,
				`sluice.yaml:20:13: channels.whatsapp.limits: want a list of limit rules ([] for none), got a mapping`,
			},
		},
		{
			name: "bad events fields",
			yaml: doc(
				"events:",
				"  max_len: 0",
				"  warn_at: 1.5",
				"  warn: 0.1",
			),
			want: []string{
				`sluice.yaml:2:12: events.max_len: want >= 1, got 0`,
				`sluice.yaml:3:12: events.warn_at: want a share of the capacity >= 0 and < 1 (0 turns warnings off), got 1.5`,
				`sluice.yaml:4:3: events.warn: unknown field (want enabled, max_len or warn_at)`,
			},
		},
		{
			name: "warn_at not a number",
			yaml: doc("events: {warn_at: ten percent}"),
			want: []string{`sluice.yaml:1:19: events.warn_at: want a share of the capacity between 0 and 1 such as 0.1, got "ten percent"`},
		},
		{
			name: "field given twice",
			yaml: doc(
				"channels:",
				"  whatsapp:",
				"    timeout: 10s",
				"    timeout: 20s",
				"channels:",
				"  sms: {}",
			),
			want: []string{
				`sluice.yaml:4:5: channels.whatsapp.timeout: field given twice (first at line 3)`,
				`sluice.yaml:5:1: channels: section given twice (first at line 1)`,
			},
		},
		{
			name: "multiple errors reported sorted by position",
			// The decoder finds the rule's unknown field (line 8) before it
			// checks that the rule (line 5) has a key; the output is sorted.
			yaml: doc(
				"worker:",
				"  delayed_task_check_interval: 2s",
				"channels:",
				"  whatsapp:",
				"    limits:",
				"      - name: throughput",
				"        algorithm: gcra",
				"        rate: 80/s",
				"        per: number",
				"  telegram: {}",
				"redis:",
				"  db: x",
			),
			want: []string{
				`sluice.yaml:2:32: worker.delayed_task_check_interval: 2s is longer than 1s: asynq moves due retry and scheduled tasks to pending only this often, so every throttled task would wait up to 2s past its RetryAfter`,
				`sluice.yaml:6:9: channels.whatsapp.limits[0].key: required`,
				`sluice.yaml:9:9: channels.whatsapp.limits[0].per: unknown field (want name, key, algorithm, rate, burst, cost, max, lease, interval or member)`,
				`sluice.yaml:10:3: channels.telegram: unknown channel (want whatsapp, sms, webhook or http)`,
				`sluice.yaml:12:7: redis.db: want a whole number, got "x"`,
			},
		},
		{
			name: "YAML syntax error keeps yaml's line",
			// The unclosed "[" is on line 3; yaml.v3 reports parser errors
			// one line early (go-yaml/yaml#205). Its line is passed on as is.
			yaml: doc(
				"redis:",
				"  addr: 127.0.0.1:6379",
				"  db: [0",
				"worker:",
			),
			want: []string{`sluice.yaml:2: yaml: did not find expected ',' or ']'`},
		},
		{
			name: "root is not a mapping",
			yaml: doc("- redis"),
			want: []string{`sluice.yaml:1:1: want a mapping of redis, worker, http, cleanup, events, egress or channels, got a list`},
		},
		{
			name: "two documents",
			yaml: doc("worker: {concurrency: 1}", "---", "worker: {concurrency: 2}"),
			want: []string{`sluice.yaml:2:1: a second YAML document; want one document`},
		},
		{
			name: "merge keys",
			yaml: doc(
				"channels:",
				"  sms: &sms {timeout: 5s}",
				"  http:",
				"    <<: *sms",
			),
			want: []string{`sluice.yaml:4:5: channels.http.<<: merge keys (<<) are not supported; write the fields out`},
		},
		{
			name: "webhook endpoints held apart",
			yaml: doc(
				"channels:",
				"  webhook:",
				"    endpoints:",
				"      billing: {secret_env: BILLING, previous_secret_env: WEBHOOK_SECRET, urls: ['https://b.example/hooks/']}",
				"      crm: {secret_env: BILLING, urls: ['https://c.example/in']}",
				"      all: {secret_env: ALL, urls: ['https://b.example/']}",
				"      crm2: {secret_env: CRM2, urls: ['https://c.example/in/v2', 'https://d.example/']}",
			),
			want: []string{
				`sluice.yaml:4:59: channels.webhook.endpoints.billing.previous_secret_env: WEBHOOK_SECRET is the default secret (signing_secret_env, previous_signing_secret_env)'s too: each endpoint's secret signs for its own urls only, so give it a variable (and a secret) of its own`,
				`sluice.yaml:5:25: channels.webhook.endpoints.crm.secret_env: BILLING is endpoint billing's too: each endpoint's secret signs for its own urls only, so give it a variable (and a secret) of its own`,
				`sluice.yaml:6:37: channels.webhook.endpoints.all.urls[0]: overlaps endpoint billing's urls: a URL under both would belong to two endpoints, each signing it with its own secret; give each its own paths`,
				`sluice.yaml:7:39: channels.webhook.endpoints.crm2.urls[0]: overlaps endpoint crm's urls: a URL under both would belong to two endpoints, each signing it with its own secret; give each its own paths`,
			},
		},
		{
			name: "webhook endpoints",
			yaml: doc(
				"channels:",
				"  webhook:",
				"    endpoints:",
				"      billing: {urls: [https://b.example/]}",
				"      crm: {secret_env: CRM, previous_secret_env: CRM, urls: [https://c.example/]}",
				"      bad name: {secret_env: X}",
				"      ops: {secret_env: whsec_AAAA, urls: [https://o.example/]}",
				"      mail: {secret_env: MAIL, secret: X}",
				"      shop: {secret_env: SHOP}",
				"      a: {secret_env: A, urls: https://a.example/}",
				"      b: {secret_env: B, urls: []}",
				"      c: {secret_env: C, urls: ['https://c.example/?t=SECRET', 'hooks.example.com/x', 'https://c.example/a/../b']}",
			),
			want: []string{
				`sluice.yaml:4:16: channels.webhook.endpoints.billing.secret_env: required: the environment variable holding the endpoint's whsec_ secret`,
				`sluice.yaml:5:12: channels.webhook.endpoints.crm.previous_secret_env: names the same variable as secret_env`,
				`sluice.yaml:6:7: channels.webhook.endpoints: want an endpoint name (1 to 64 letters, digits, _ . : / -) as key, got "bad name"`,
				`sluice.yaml:7:25: channels.webhook.endpoints.ops.secret_env: want the name of an environment variable (A-Z, 0-9 and _), not its value; the value is not shown`,
				`sluice.yaml:8:32: channels.webhook.endpoints.mail.secret: unknown field (want secret_env, previous_secret_env or urls)`,
				`sluice.yaml:9:13: channels.webhook.endpoints.shop.urls: required: the URL prefixes the endpoint's secret may sign for, such as [https://hooks.example.com/billing/]; without them anyone who may enqueue could have the secret sign for a URL of theirs`,
				`sluice.yaml:10:32: channels.webhook.endpoints.a.urls: want a list of URL prefixes such as [https://hooks.example.com/billing/], got "https://a.example/"`,
				`sluice.yaml:11:32: channels.webhook.endpoints.b.urls: 0 entries, want 1 to 32`,
				`sluice.yaml:12:33: channels.webhook.endpoints.c.urls[0]: must not hold a query: the prefix is matched on scheme, host and path`,
				`sluice.yaml:12:64: channels.webhook.endpoints.c.urls[1]: want an absolute http or https URL such as https://hooks.example.com/billing/`,
				`sluice.yaml:12:87: channels.webhook.endpoints.c.urls[2]: its path must not hold a segment of dots and spaces only, such as ".."`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := Parse("sluice.yaml", tt.yaml)
			require.Error(t, err)
			require.Nil(t, cfg)
			if diff := cmp.Diff(tt.want, strings.Split(err.Error(), "\n")); diff != "" {
				t.Errorf("Parse error lines mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseErrorIsPositioned(t *testing.T) {
	t.Parallel()
	_, err := Parse("a.yaml", doc("worker:", "  concurrency: 0"))
	var e *Error
	require.ErrorAs(t, err, &e)
	want := Error{File: "a.yaml", Line: 2, Column: 16, Path: "worker.concurrency", Err: e.Err}
	if diff := cmp.Diff(want, *e, cmpopts.EquateErrors()); diff != "" {
		t.Errorf("error mismatch (-want +got):\n%s", diff)
	}
	require.EqualError(t, e.Err, "want >= 1, got 0")
}

// A secret pasted where the name of its variable belongs must not be echoed.
func TestParseErrorsDoNotShowSecrets(t *testing.T) {
	t.Parallel()
	secrets := []string{
		"redis://:hunter2@redis.internal:6379/0",
		"EAAGm0PX4ZCpsBAExampleToken",
		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		"3f9c1e0d2b4a59687766554433221100",
	}
	for _, field := range []string{"redis.url_env", "channels.whatsapp.token_env", "channels.webhook.signing_secret_env", "channels.sms.auth_token_env",
		"channels.whatsapp.app_secret_env", "channels.whatsapp.verify_token_env"} {
		for _, secret := range secrets {
			section, key, _ := strings.Cut(field, ".")
			var y string
			if section == "redis" {
				y = "redis:\n  " + key + ": '" + secret + "'\n"
			} else {
				ch, k, _ := strings.Cut(key, ".")
				y = "channels:\n  " + ch + ":\n    " + k + ": '" + secret + "'\n"
			}
			_, err := Parse("s.yaml", []byte(y))
			require.Error(t, err, "%s = %s", field, secret)
			require.Contains(t, err.Error(), field+": want the name of an environment variable")
			require.NotContains(t, err.Error(), secret)
		}
	}
}

func TestParseReadErrors(t *testing.T) {
	t.Parallel()
	_, err := Load("testdata/does-not-exist.yaml")
	require.Error(t, err)
	require.ErrorIs(t, err, fs.ErrNotExist)
}
