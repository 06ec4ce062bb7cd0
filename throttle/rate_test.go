package throttle_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/throttle"
)

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want throttle.Rate
	}{
		{"80/s", throttle.PerSecond(80)},
		{"1/6s", throttle.Rate{Limit: 1, Period: 6 * time.Second}},
		{"100/1m", throttle.PerMinute(100)},
		{"250/1d", throttle.PerDay(250)},
		{"10000/24h", throttle.PerDay(10000)},
		{" 5 / 500ms ", throttle.Rate{Limit: 5, Period: 500 * time.Millisecond}},
	} {
		got, err := throttle.ParseRate(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
	for _, tc := range []struct{ in, bad string }{
		{"80", "want N/period"},
		{"x/s", `count "x"`},
		{"0/s", `count "0"`},
		{"-1/s", `count "-1"`},
		{"80/x", `unknown unit "x"`},
		{"80/", "missing unit"},
		{"80/0s", `count "0"`},
		{"1/400d", "longer than a year"},
		{"80/s/s", `unknown unit "s/s"`},
	} {
		_, err := throttle.ParseRate(tc.in)
		require.ErrorContains(t, err, tc.bad, tc.in)
		require.ErrorContains(t, err, `rate "`+tc.in+`"`, "the error names the whole input")
	}
}

func TestWindowedAlgorithmsTakeOnlyTheListedWindows(t *testing.T) {
	for _, a := range throttle.Algorithms {
		if !a.Windowed() {
			continue
		}
		for _, w := range throttle.Windows {
			require.NoError(t, throttle.Limit{Name: "w", Algorithm: a, Rate: throttle.Rate{Limit: 5, Period: w}}.Validate(), "%s %v", a, w)
		}
		err := throttle.Limit{Name: "w", Algorithm: a, Rate: throttle.Rate{Limit: 5, Period: 6 * time.Second}}.Validate()
		require.ErrorContains(t, err, "window 6s: "+string(a)+" needs one of 1s, 30s, 1m, 5m, 1h, 1d")
	}
	// GCRA spreads over any period: the WhatsApp pair limit is 1/6s.
	require.NoError(t, throttle.Limit{Name: "pair", Algorithm: throttle.GCRA, Rate: throttle.Rate{Limit: 1, Period: 6 * time.Second}}.Validate())
}

func TestParseAlgorithm(t *testing.T) {
	for in, want := range map[string]throttle.Algorithm{
		"gcra": throttle.GCRA, "token_bucket": throttle.GCRA, "leaky_bucket": throttle.GCRA,
		"cooldown": throttle.MinInterval, "sliding_window_log": throttle.SlidingWindowLog, "distinct": throttle.Distinct,
	} {
		got, err := throttle.ParseAlgorithm(in)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	_, err := throttle.ParseAlgorithm("sliding")
	require.ErrorContains(t, err, `algorithm "sliding": want one of gcra, fixed_window, sliding_window_log`)
}

// FuzzParseRate: any input is parsed or rejected with an error naming it,
// never a panic, and an accepted rate survives String → ParseRate.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"80/s", "1/6s", "250/1d", "10000/24h", "5/500ms", "x/s", "1/", "/s", "9223372036854775807/365d", "1/9999999999999999999s", "1/-1s", "1/1e3s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := throttle.ParseRate(s)
		if err != nil {
			if !strings.Contains(err.Error(), "rate ") {
				t.Fatalf("error %q does not say it is about the rate", err)
			}
			return
		}
		if r.Limit <= 0 || r.Period < time.Millisecond || r.Period > 365*24*time.Hour {
			t.Fatalf("ParseRate(%q) accepted %+v", s, r)
		}
		back, err := throttle.ParseRate(r.String())
		if err != nil || back != r {
			t.Fatalf("ParseRate(%q) = %+v; String %q parses to %+v, %v", s, r, r.String(), back, err)
		}
	})
}

func FuzzParsePeriod(f *testing.F) {
	for _, s := range []string{"s", "6s", "1m", "5m", "1h", "1d", "500ms", "0s", "ms", "99999999999999999999d", "1µs", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := throttle.ParsePeriod(s)
		if err != nil {
			return
		}
		if d < time.Millisecond || d > 365*24*time.Hour {
			t.Fatalf("ParsePeriod(%q) = %v", s, d)
		}
		if back, err := throttle.ParsePeriod(throttle.FormatPeriod(d)); err != nil || back != d {
			t.Fatalf("ParsePeriod(%q) = %v; FormatPeriod %q parses to %v, %v", s, d, throttle.FormatPeriod(d), back, err)
		}
	})
}

func FuzzParseAlgorithm(f *testing.F) {
	for _, s := range []string{"gcra", "token_bucket", "cooldown", "distinct", "GCRA", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := throttle.ParseAlgorithm(s)
		if err != nil {
			return
		}
		if _, err := throttle.ParseAlgorithm(string(a)); err != nil {
			t.Fatalf("ParseAlgorithm(%q) = %q, which does not parse: %v", s, a, err)
		}
	})
}
