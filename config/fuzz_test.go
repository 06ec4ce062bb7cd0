package config

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/throttle"
)

// FuzzParse checks that Parse never panics, returns exactly one of a config
// and an error, that every config it accepts holds the invariants the worker
// relies on, and that every error line carries the file name.
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile("../sluice.example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	for _, s := range []string{
		"",
		"channels: {whatsapp: {limits: [{name: a, key: 'whatsapp:n:{to}', algorithm: gcra, rate: 80/s}]}}",
		"channels: {sms: {limits: [{name: c, key: 'sms:a:{account_sid}', algorithm: concurrency, max: 3, lease: 1s, cost: 3}]}}",
		"channels: {webhook: {limits: [{name: d, key: 'webhook:h:{host}', algorithm: fixed_window, rate: 1/6s}]}}",
		"channels: {whatsapp: {limits: [{name: t, key: 'whatsapp:t:{phone_number_id}', algorithm: distinct, rate: 250/1d, member: '{to}'}]}}",
		"channels: {whatsapp: {limits: [{name: p, key: 'whatsapp:p:{to}', algorithm: min_interval, interval: 6s}]}}",
		"channels: {http: {limits: [{name: s, key: 'http:h:{host}', algorithm: sliding_window_counter, rate: 5/5m}]}}",
		"worker: {delayed_task_check_interval: 2s, concurrency: x}\nredis: {db: -1}",
		"a: &a [*a]\nchannels: &c {http: *c}",
		"channels:\n  http:\n    limits: &l [*l]\n",
		"cleanup: {schedule: '@every 1s'}",
		"redis: {url_env: 'redis://:pw@h'}",
		"- [",
		"channels: {sms: {headroom: 0%, max_margin: 0, hold: 10s, tenant_weights: {a: 2}, max_payload_bytes: 16384}}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yaml", data)
		if err != nil {
			if cfg != nil {
				t.Fatalf("Parse returned both a config and %v", err)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "fuzz.yaml:") {
					t.Fatalf("error line without position: %q", line)
				}
			}
			return
		}
		if cfg == nil {
			t.Fatal("Parse returned neither a config nor an error")
		}
		if d := cfg.Worker.DelayedTaskCheckInterval; d <= 0 || d > time.Second {
			t.Fatalf("delayed_task_check_interval %v accepted", d)
		}
		if len(cfg.Channels) != len(channelNames) {
			t.Fatalf("channels %v", cfg.Channels)
		}
		for name, ch := range cfg.Channels {
			// The settings are within the table's bounds.
			s := ch.ChannelSettings
			if s.Headroom < 0 || s.Headroom > throttle.MaxHeadroom || s.Hold < time.Second || s.Hold > 10*time.Second ||
				s.MaxMargin < 0 || s.MaxMargin > 500*time.Millisecond || s.Timeout <= 0 || s.ThrottleBackoff <= 0 ||
				s.MaxRetryAfter <= 0 || s.MaxPayloadBytes < 1 {
				t.Fatalf("channels.%s: accepted settings %+v", name, s)
			}
			for tenant, w := range s.TenantWeights {
				if w < 1 || w > throttle.MaxTenantWeight {
					t.Fatalf("channels.%s: accepted weight %v for %q", name, w, tenant)
				}
			}
			names := map[string]bool{}
			for _, r := range ch.Rules() {
				if err := r.Limit.Validate(); err != nil {
					t.Fatalf("channels.%s: accepted invalid limit: %v", name, err)
				}
				if err := r.Check(name, fieldNames(name)); err != nil {
					t.Fatalf("channels.%s: accepted a bad rule: %v", name, err)
				}
				if (r.Limit.Algorithm == throttle.Distinct) != (r.Member != "") {
					t.Fatalf("channels.%s: limit %q: %s rule with member %q", name, r.Limit.Name, r.Limit.Algorithm, r.Member)
				}
				if r.Cost < 1 || r.Cost > r.Limit.Capacity() {
					t.Fatalf("channels.%s: limit %q: accepted cost %d", name, r.Limit.Name, r.Cost)
				}
				if names[r.Limit.Name] {
					t.Fatalf("channels.%s: duplicate limit %q accepted", name, r.Limit.Name)
				}
				names[r.Limit.Name] = true
			}
		}
	})
}
