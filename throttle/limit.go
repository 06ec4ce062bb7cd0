package throttle

import (
	"fmt"
	"time"
)

// Algorithm names a limiter algorithm. The string forms are the ones used in
// configuration files.
type Algorithm string

const (
	// GCRA is the token bucket expressed as the generic cell rate algorithm:
	// Rate.Limit units per Rate.Period, up to Burst at once. Burst 1 spaces units
	// evenly (Rate.Interval apart), i.e. a leaky bucket used as a meter.
	GCRA Algorithm = "gcra"
	// FixedWindow admits Rate.Limit units per window of Rate.Period, windows
	// aligned to multiples of the period since the Unix epoch (so 1d windows
	// start at 00:00 UTC). Allowed windows: FixedWindowPeriods.
	FixedWindow Algorithm = "fixed_window"
	// Concurrency admits at most Max units in flight. Each admitted unit holds a
	// lease that the caller releases after the work; a lease not released within
	// Lease (a worker died) expires and its slot is reclaimed.
	Concurrency Algorithm = "concurrency"
)

// FixedWindowPeriods are the window lengths FixedWindow accepts. Each divides a
// UTC day, so windows line up with calendar boundaries.
var FixedWindowPeriods = []time.Duration{time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, time.Hour, 24 * time.Hour}

// ParseAlgorithm accepts "gcra" (alias "token_bucket"), "fixed_window" and "concurrency".
func ParseAlgorithm(s string) (Algorithm, error) {
	switch s {
	case "gcra", "token_bucket":
		return GCRA, nil
	case "fixed_window":
		return FixedWindow, nil
	case "concurrency":
		return Concurrency, nil
	}
	return "", fmt.Errorf("algorithm %q: want gcra, token_bucket, fixed_window or concurrency", s)
}

// Limit is one rule: how many units an identifier may use.
type Limit struct {
	// Name identifies the limit in decisions, logs and metrics ("throughput", "pair").
	Name      string
	Algorithm Algorithm
	// Rate is used by GCRA and FixedWindow.
	Rate Rate
	// Burst is GCRA's bucket size in units; zero means 1 (evenly spaced).
	Burst int64
	// Max is the Concurrency limit's number of simultaneous leases.
	Max int64
	// Lease is how long a Concurrency lease lives unless released; zero means 30s.
	Lease time.Duration
}

// DefaultLease is the Concurrency lease lifetime when Limit.Lease is zero.
const DefaultLease = 30 * time.Second

// Validate reports the first problem with l, naming the field.
func (l Limit) Validate() error {
	switch l.Algorithm {
	case GCRA:
		if l.Rate.Limit <= 0 || l.Rate.Period < time.Millisecond {
			return fmt.Errorf("limit %q: rate: want N/period with N > 0 and period >= 1ms, got %v", l.Name, l.Rate)
		}
		if l.Burst < 0 {
			return fmt.Errorf("limit %q: burst: want >= 0, got %d", l.Name, l.Burst)
		}
	case FixedWindow:
		if l.Rate.Limit <= 0 {
			return fmt.Errorf("limit %q: rate: want N/window with N > 0, got %v", l.Name, l.Rate)
		}
		ok := false
		for _, p := range FixedWindowPeriods {
			ok = ok || p == l.Rate.Period
		}
		if !ok {
			return fmt.Errorf("limit %q: rate %v: fixed window must be one of 1s, 30s, 1m, 5m, 1h, 1d", l.Name, l.Rate)
		}
	case Concurrency:
		if l.Max <= 0 {
			return fmt.Errorf("limit %q: max: want > 0, got %d", l.Name, l.Max)
		}
		if l.Lease < 0 {
			return fmt.Errorf("limit %q: lease: want >= 0, got %v", l.Name, l.Lease)
		}
	default:
		return fmt.Errorf("limit %q: algorithm %q: want gcra, fixed_window or concurrency", l.Name, l.Algorithm)
	}
	return nil
}

// Capacity is the most units the limit can ever admit at once: Burst for GCRA,
// Rate.Limit for FixedWindow, Max for Concurrency.
func (l Limit) Capacity() int64 {
	switch l.Algorithm {
	case GCRA:
		return max(l.Burst, 1)
	case FixedWindow:
		return l.Rate.Limit
	default:
		return l.Max
	}
}
