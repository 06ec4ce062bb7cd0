package config

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestParseBoundsEveryValue: no value of the file is unbounded (issue 7: a
// 5 MB key_prefix was accepted), and the errors stay short: they give sizes,
// never the value.
func TestParseBoundsEveryValue(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("a", 5<<20)
	rules := make([]string, maxRules+1)
	for i := range rules {
		rules[i] = fmt.Sprintf("{name: r%d, key: \"webhook:h:{host}\", algorithm: gcra, rate: 1/s}", i)
	}
	for _, c := range []struct{ name, yaml, want string }{
		{"5 MB key_prefix", "redis: {key_prefix: " + huge + "}", "sluice.yaml: file is 5242901 bytes, want at most 1048576"},
		{"100 KiB key_prefix", "redis: {key_prefix: " + huge[:100<<10] + "}", "redis.key_prefix: value is 102400 bytes, want at most 2048"},
		{"65-byte key_prefix", "redis: {key_prefix: " + strings.Repeat("k", 65) + "}", "redis.key_prefix: 65 bytes, want at most 64"},
		{"huge base_url", "channels: {whatsapp: {base_url: \"https://" + strings.Repeat("h", 3000) + "\"}}", "channels.whatsapp.base_url: value is 3008 bytes"},
		{"huge key template", "channels: {http: {limits: [{name: a, key: \"http:" + strings.Repeat("x", 3000) + "\", algorithm: gcra, rate: 1/s}]}}", "limits[0].key: value is 3005 bytes"},
		{"too many rules", "channels: {webhook: {limits: [" + strings.Join(rules, ", ") + "]}}", "channels.webhook.limits: 33 rules, want at most 32"},
		{"payload cap over the ceiling", "channels: {webhook: {max_payload_bytes: 2000000}}", "channels.webhook.max_payload_bytes: want at most 1048576"},
		{"payload cap zero", "channels: {sms: {max_payload_bytes: 0}}", "channels.sms.max_payload_bytes: want >= 1"},
		{"bad CIDR", "egress: {allow_cidrs: [127.0.0.1]}", "egress.allow_cidrs[0]: want a CIDR"},
		{"CIDRs not a list", "egress: {allow_cidrs: 10.0.0.0/8}", "egress.allow_cidrs: want a list of CIDRs"},
		{"negative max_retry_after", "channels: {webhook: {max_retry_after: -1s}}", "channels.webhook.max_retry_after: want a duration > 0"},
		{"max_retry_after of years", "channels: {webhook: {max_retry_after: 1000000h}}", "channels.webhook.max_retry_after: want > 0, at most 168h: a longer cap would let a provider park tasks for that long, got 1000000h"},
		{"500 KB mapping key", "redis:\n  ? " + huge[:500<<10] + "\n  : 1\n", "unknown field (want mode, addrs"},
	} {
		_, err := Parse("sluice.yaml", []byte(c.yaml))
		require.Error(t, err, c.name)
		require.Contains(t, err.Error(), c.want, c.name)
		require.Less(t, len(err.Error()), 1024, "%s: the error does not repeat the value", c.name)
	}

	_, err := Parse("big.yaml", []byte("# "+huge))
	require.ErrorContains(t, err, "big.yaml: file is 5242882 bytes, want at most 1048576")
	path := filepath.Join(t.TempDir(), "big.yaml")
	require.NoError(t, os.WriteFile(path, []byte("# "+huge), 0o600))
	_, err = Load(path)
	require.ErrorContains(t, err, "file is over 1048576 bytes")
}

func TestEgressAndCapsDecode(t *testing.T) {
	t.Parallel()
	cfg, err := Parse("sluice.yaml", []byte(`
egress: {allow_cidrs: [127.0.0.0/8, "::1/128", 10.1.2.3/16]}
channels:
  webhook: {max_retry_after: 10m, max_payload_bytes: 4096}
`))
	require.NoError(t, err)
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("10.1.0.0/16")}, cfg.Egress.AllowCIDRs)
	require.Equal(t, 10*time.Minute, cfg.Channels["webhook"].MaxRetryAfter)
	require.Equal(t, 4096, cfg.Channels["webhook"].MaxPayloadBytes)
	d := Default()
	require.Empty(t, d.Egress.AllowCIDRs, "nothing private is admitted by default")
	for ch, want := range map[string]struct {
		wait  time.Duration
		bytes int
	}{"whatsapp": {24 * time.Hour, 64 << 10}, "sms": {24 * time.Hour, 16 << 10}, "webhook": {time.Hour, 1 << 20}, "http": {time.Hour, 1 << 20}} {
		require.Equal(t, want.wait, d.Channels[ch].MaxRetryAfter, ch)
		require.Equal(t, want.bytes, d.Channels[ch].MaxPayloadBytes, ch)
	}
}
