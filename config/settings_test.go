package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

// snake is a Go field name as a YAML key: MaxPayloadBytes → max_payload_bytes.
func snake(name string) string {
	var b strings.Builder
	for i, r := range name {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// TestSettingsTableComplete checks that every ChannelSettings field has
// exactly one row, keyed by the field's name, with a doc, a default and
// bounds in its description, and that every row but timeout lands in the
// worker.Channel field of the same name.
func TestSettingsTableComplete(t *testing.T) {
	st := reflect.TypeFor[ChannelSettings]()
	require.Equal(t, st.NumField(), len(channelSettings), "one row per ChannelSettings field")
	keys := map[string]bool{}
	for _, r := range channelSettings {
		require.False(t, keys[r.name()], "row %s given twice", r.name())
		keys[r.name()] = true
	}
	wt := reflect.TypeFor[worker.Channel]()
	for i := range st.NumField() {
		f := st.Field(i)
		key := snake(f.Name)
		r := settingNamed(key)
		require.NotNil(t, r, "field %s has no row %q", f.Name, key)
		text := r.describe()
		require.Regexp(t, `(Default|by default)[ ,]`, text, "%s: default", key)
		switch f.Type.Kind() {
		case reflect.Bool:
			require.Contains(t, text, "true or false", "%s: values", key)
		case reflect.String:
			require.Contains(t, text, "task field", "%s: values", key)
		default:
			require.Regexp(t, `(> 0|at most|to \d|\d to)`, text, "%s: bounds", key)
		}
		require.Greater(t, len(text), 60, "%s: doc", key)

		// A distinct value in the field lands in the worker field of the
		// same name (timeout goes to the HTTP client instead).
		// ChannelSettings always holds the values in effect: start from
		// the defaults, change one.
		s := defaultSettings("sms")
		var base worker.Channel
		s.Apply(&base)
		v := reflect.ValueOf(&s).Elem().Field(i)
		switch f.Type.Kind() {
		case reflect.Int64:
			v.SetInt(int64(1234 * time.Millisecond))
		case reflect.Int:
			v.SetInt(1234)
		case reflect.Float64:
			v.SetFloat(0.0123)
		case reflect.Map:
			v.Set(reflect.ValueOf(map[string]float64{"acme": 3}))
		case reflect.Bool:
			v.SetBool(!v.Bool())
		case reflect.String:
			v.SetString("sender")
		default:
			t.Fatalf("%s: no test value for kind %s", f.Name, f.Type.Kind())
		}
		var ch worker.Channel
		s.Apply(&ch)
		wf, ok := wt.FieldByName(f.Name)
		if key == "timeout" {
			require.False(t, ok, "timeout is the HTTP client's, not a worker.Channel field")
			require.Equal(t, base, ch, "timeout lands in no worker field")
			continue
		}
		require.True(t, ok, "worker.Channel has no field %s", f.Name)
		require.Equal(t, wf.Type, f.Type, "%s: config and worker types differ", f.Name)
		require.Equal(t, v.Interface(), reflect.ValueOf(ch).FieldByIndex(wf.Index).Interface(), f.Name)
	}
}

// TestSettingsDefaults checks that an omitted setting is the row's default,
// the worker's own: a channel's Apply of defaults gives the worker the
// values its zero fields mean.
func TestSettingsDefaults(t *testing.T) {
	cfg, err := Parse("empty.yaml", []byte("channels: {whatsapp: {}, sms: {}, webhook: {}, http: {}}"))
	require.NoError(t, err)
	for _, name := range channelNames {
		cc := cfg.Channels[name]
		require.Equal(t, defaultSettings(name), cc.ChannelSettings, name)
		var ch worker.Channel
		cc.ChannelSettings.Apply(&ch)
		require.Equal(t, throttle.DefaultHeadroom, ch.Headroom, name)
		require.Equal(t, throttle.DefaultHold, ch.Hold, name)
		require.Equal(t, worker.DefaultMaxMargin, ch.MaxMargin, name)
		require.Equal(t, worker.DefaultThrottleBackoff, ch.ThrottleBackoff, name)
		require.Nil(t, ch.TenantWeights, name)
	}
	require.Equal(t, worker.DefaultProbeEvery, cfg.Channels["whatsapp"].ProbeEvery)
	require.Equal(t, worker.DefaultMaxRetryAfter, cfg.Channels["sms"].MaxRetryAfter)
	require.Equal(t, time.Hour, cfg.Channels["http"].MaxRetryAfter)
	require.Zero(t, cfg.Channels["webhook"].ProbeEvery, "webhook takes no probe_every")
}

// TestSettingsExplicitZero checks that a 0 the row allows is kept as set,
// not taken for unset, and reaches the worker as its named none; a 0 the
// row does not allow is refused.
func TestSettingsExplicitZero(t *testing.T) {
	cfg, err := Parse("zero.yaml", []byte("channels: {sms: {headroom: 0%, max_margin: 0s}}"))
	require.NoError(t, err)
	sms := cfg.Channels["sms"]
	require.Zero(t, sms.Headroom)
	require.Zero(t, sms.MaxMargin)
	var ch worker.Channel
	sms.ChannelSettings.Apply(&ch)
	require.Equal(t, worker.NoHeadroom, ch.Headroom)
	require.Equal(t, worker.FixedMargin, ch.MaxMargin)

	// The other channels keep their defaults.
	require.Equal(t, throttle.DefaultHeadroom, cfg.Channels["whatsapp"].Headroom)

	for _, key := range []string{"probe_every", "timeout", "throttle_backoff", "max_retry_after", "hold"} {
		_, err := Parse("zero.yaml", []byte("channels: {sms: {"+key+": 0s}}"))
		require.Error(t, err, key)
	}
	_, err = Parse("zero.yaml", []byte("channels: {sms: {max_payload_bytes: 0}}"))
	require.ErrorContains(t, err, "want >= 1, got 0")
}

// TestSettingsBounds decodes each setting at and past its bounds.
func TestSettingsBounds(t *testing.T) {
	tests := []struct {
		key, value string
		want       any    // the decoded field, when valid
		err        string // the error's text after the path, when not
	}{
		{"probe_every", "1ms", time.Millisecond, ""},
		{"probe_every", "-1s", nil, "want a duration > 0, got -1s"},
		{"timeout", "1ns", time.Nanosecond, ""},
		{"timeout", "fast", nil, `want a duration such as 100ms, 15s or 1m, got "fast"`},
		{"throttle_backoff", "0s", nil, "want a duration > 0, got 0s"},
		{"max_retry_after", "168h", 168 * time.Hour, ""},
		{"max_retry_after", "168h1s", nil, "want > 0, at most 168h: a longer cap would let a provider park tasks for that long, got 168h1s"},
		{"max_payload_bytes", "1", 1, ""},
		{"max_payload_bytes", "16384", 16384, ""},
		{"max_payload_bytes", "16385", nil, "want at most 16384: the cap of sms:send payloads (tasks.MaxPayloadBytes), got 16385"},
		{"max_payload_bytes", "1.5", nil, `want a whole number, got "1.5"`},
		{"headroom", "0%", 0.0, ""},
		{"headroom", "50%", 0.5, ""},
		{"headroom", "50.1%", nil, "want 0% to 50%, got 50.1%"},
		{"headroom", "-1%", nil, "want 0% to 50%, got -1%"},
		{"headroom", "0.01", nil, `want a percentage such as 1%, got "0.01"`},
		{"max_margin", "0", time.Duration(0), ""},
		{"max_margin", "500ms", 500 * time.Millisecond, ""},
		{"max_margin", "501ms", nil, "want 0 to 500ms: the widest the measured pacing margin may make the spacing, got 501ms"},
		{"max_margin", "-1ms", nil, "want 0 to 500ms: the widest the measured pacing margin may make the spacing, got -1ms"},
		{"hold", "1s", time.Second, ""},
		{"hold", "10s", 10 * time.Second, ""},
		{"hold", "999ms", nil, "want 1s to 10s: asynq brings a planned send back at the whole second of its slot, so the hold must span a second, got 999ms"},
		{"hold", "10001ms", nil, "want 1s to 10s: asynq brings a planned send back at the whole second of its slot, so the hold must span a second, got 10001ms"},
		{"tenant_weights", "{acme: 1, globex: 1000}", map[string]float64{"acme": 1, "globex": 1000}, ""},
		{"tenant_weights", "{acme: 1001}", nil, "want a weight of 1 to 1000, got 1001"},
		{"tenant_weights", "{acme: 0}", nil, "want >= 1, got 0"},
	}
	for _, tt := range tests {
		t.Run(tt.key+"="+tt.value, func(t *testing.T) {
			cfg, err := Parse("s.yaml", []byte("channels:\n  sms:\n    "+tt.key+": "+tt.value+"\n"))
			if tt.err != "" {
				require.Error(t, err)
				require.Contains(t, err.Error(), "s.yaml:3:", "the error says where")
				require.Contains(t, err.Error(), "channels.sms."+tt.key)
				require.True(t, strings.HasSuffix(err.Error(), ": "+tt.err), "got %q, want it to end %q", err, tt.err)
				return
			}
			require.NoError(t, err)
			s := cfg.Channels["sms"].ChannelSettings
			got := reflect.ValueOf(s).FieldByNameFunc(func(n string) bool { return snake(n) == tt.key }).Interface()
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tt.key, diff)
			}
		})
	}
}

// TestSettingsPerChannel checks that a row limited to some channels is an
// unknown field on the others.
func TestSettingsPerChannel(t *testing.T) {
	_, err := Parse("s.yaml", []byte("channels: {webhook: {probe_every: 1m}}"))
	require.ErrorContains(t, err, "channels.webhook.probe_every: unknown field")
	require.Equal(t, []string{"probe_every", "timeout"}, settingNames("sms")[:2])
	require.Equal(t, "timeout", settingNames("webhook")[0])
}
