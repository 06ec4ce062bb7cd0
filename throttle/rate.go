package throttle

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Rate is Limit units per Period: "80/s" is Rate{Limit: 80, Period: time.Second}.
type Rate struct {
	Limit  int64         // units admitted per Period; > 0
	Period time.Duration // >= 1ms
}

// PerSecond, PerMinute, PerHour and PerDay build common rates.
func PerSecond(n int64) Rate { return Rate{Limit: n, Period: time.Second} }
func PerMinute(n int64) Rate { return Rate{Limit: n, Period: time.Minute} }
func PerHour(n int64) Rate   { return Rate{Limit: n, Period: time.Hour} }
func PerDay(n int64) Rate    { return Rate{Limit: n, Period: 24 * time.Hour} }

// String renders the rate in the form ParseRate reads: "80/s", "1/6s", "250/1d".
func (r Rate) String() string {
	return strconv.FormatInt(r.Limit, 10) + "/" + FormatPeriod(r.Period)
}

// Interval is the emission interval Period/Limit: the spacing between units when
// the rate is spread evenly (GCRA's T). 80/s → 12.5ms.
func (r Rate) Interval() time.Duration {
	if r.Limit <= 0 {
		return 0
	}
	return r.Period / time.Duration(r.Limit)
}

// MarshalText and UnmarshalText let a Rate be a YAML or JSON string.
func (r Rate) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

func (r *Rate) UnmarshalText(b []byte) error {
	v, err := ParseRate(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

var unitDurations = map[string]time.Duration{
	"ms": time.Millisecond,
	"s":  time.Second,
	"m":  time.Minute,
	"h":  time.Hour,
	"d":  24 * time.Hour,
}

// ParseRate reads "N/period" where period is a unit (ms, s, m, h, d) optionally
// preceded by a positive count: "80/s", "1/6s", "100/1m", "250/1d", "10000/24h".
// Errors name the bad part: `rate "80/x": unknown unit "x" (want ms, s, m, h or d)`.
func ParseRate(s string) (Rate, error) {
	in := strings.TrimSpace(s)
	n, p, ok := strings.Cut(in, "/")
	if !ok {
		return Rate{}, fmt.Errorf("rate %q: want N/period such as 80/s, 1/6s or 250/1d", s)
	}
	limit, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
	if err != nil || limit <= 0 {
		return Rate{}, fmt.Errorf("rate %q: count %q is not a positive whole number", s, n)
	}
	period, err := ParsePeriod(p)
	if err != nil {
		return Rate{}, fmt.Errorf("rate %q: %w", s, err)
	}
	return Rate{Limit: limit, Period: period}, nil
}

// ParsePeriod reads a period such as "s", "6s", "1m", "5m", "1h", "1d", "500ms".
// A bare unit means one of it.
func ParsePeriod(p string) (time.Duration, error) {
	p = strings.TrimSpace(p)
	i := 0
	for i < len(p) && p[i] >= '0' && p[i] <= '9' {
		i++
	}
	count := int64(1)
	if i > 0 {
		c, err := strconv.ParseInt(p[:i], 10, 64)
		if err != nil || c <= 0 {
			return 0, fmt.Errorf("period %q: count %q is not a positive whole number", p, p[:i])
		}
		count = c
	}
	unit := p[i:]
	d, ok := unitDurations[unit]
	if !ok {
		if unit == "" {
			return 0, fmt.Errorf("period %q: missing unit (want ms, s, m, h or d)", p)
		}
		return 0, fmt.Errorf("period %q: unknown unit %q (want ms, s, m, h or d)", p, unit)
	}
	if count > int64((365*24*time.Hour)/d) {
		return 0, fmt.Errorf("period %q: longer than a year", p)
	}
	return time.Duration(count) * d, nil
}

// FormatPeriod renders a period in the largest whole unit: 6s, 1m, 1d, 500ms.
func FormatPeriod(d time.Duration) string {
	for _, u := range []struct {
		name string
		d    time.Duration
	}{{"d", 24 * time.Hour}, {"h", time.Hour}, {"m", time.Minute}, {"s", time.Second}, {"ms", time.Millisecond}} {
		if d >= u.d && d%u.d == 0 {
			if d == u.d {
				return u.name
			}
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	return d.String()
}
