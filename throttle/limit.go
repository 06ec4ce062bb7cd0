package throttle

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Algorithm names a limiter algorithm. The string forms are the ones used in
// configuration files.
type Algorithm string

const (
	// GCRA is the token bucket expressed as the generic cell rate algorithm:
	// Rate.Limit units per Rate.Period, up to Burst at once. Burst 1 spaces
	// units evenly, Rate.Interval apart: a leaky bucket used as a meter.
	// Any period >= 1ms. State: one string, the theoretical arrival time
	// (TAT); several GCRA limits of one call on the same key share one hash,
	// a field per Limit.Name. Same decisions as go-redis/redis_rate.
	GCRA Algorithm = "gcra"
	// FixedWindow admits Rate.Limit units per window of Rate.Period, windows
	// aligned to multiples of the period since the Unix epoch (a 1d window
	// starts at 00:00 UTC). Boundary: the count starts over at each window
	// start, so up to 2×Rate.Limit can pass within one period that spans a
	// boundary; every aligned window holds at most Rate.Limit. Windows:
	// Windows. State: a small hash.
	FixedWindow Algorithm = "fixed_window"
	// SlidingWindowLog admits at most Rate.Limit units in any span of
	// Rate.Period, exactly: it keeps one sorted-set member per admitted unit,
	// scored by its time (members are unique even within one microsecond).
	// A blocked caller may retry when enough of the oldest entries have left
	// the window. Memory grows with Rate.Limit. Windows: Windows.
	SlidingWindowLog Algorithm = "sliding_window_log"
	// SlidingWindowCounter approximates the sliding window with two fixed
	// windows: used = previous × (share of the previous window still inside
	// the sliding window) + current. Denied requests are not counted. State:
	// a hash {current window, its count, previous count} that lives two
	// windows. Windows: Windows.
	SlidingWindowCounter Algorithm = "sliding_window_counter"
	// MinInterval (cooldown) admits one operation per key, then none until
	// Interval has passed: no two operations closer than Interval ("6s
	// between WhatsApp messages to one person", "5s between lock
	// operations"). Cost must be 1. State: the last operation's time.
	MinInterval Algorithm = "min_interval"
	// Concurrency admits at most Max units in flight. Each admitted unit holds
	// a lease that the caller releases after the work; a lease not released
	// within Lease (a worker died) expires and its slot is reclaimed.
	Concurrency Algorithm = "concurrency"
	// Distinct admits at most Rate.Limit distinct members (Request.Member,
	// e.g. recipients) in any span of Rate.Period; a member already counted
	// in that span passes free and its time is refreshed. This is how
	// WhatsApp's messaging tiers work: 250, 2,000, 10,000 or 100,000 unique
	// users per rolling 24 h per business (docs/providers.md). Windows: Windows.
	Distinct Algorithm = "distinct"
	// Pause is not configured: it is the limit of a scope a provider's
	// answer paused (Redis.Pause; WhatsApp 131048 pauses a number, Twilio
	// 20429 an account). It admits everything until the scope is paused,
	// then nothing until the pause ends, and takes nothing itself. Requests
	// with it are made by PauseRequest. State: a small hash, written only
	// by Pause and Resume.
	Pause Algorithm = "pause"
)

// Algorithms lists every algorithm, in documentation order.
var Algorithms = []Algorithm{GCRA, FixedWindow, SlidingWindowLog, SlidingWindowCounter, MinInterval, Concurrency, Distinct}

// Windows are the window lengths of the windowed algorithms (FixedWindow,
// SlidingWindowLog, SlidingWindowCounter, Distinct). Each divides a UTC day,
// so fixed windows line up with calendar boundaries.
var Windows = []time.Duration{time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, time.Hour, 24 * time.Hour}

var algorithmAliases = map[string]Algorithm{
	"token_bucket": GCRA,
	"leaky_bucket": GCRA,
	"cooldown":     MinInterval,
}

// ParseAlgorithm accepts an Algorithm's name or an alias: "token_bucket" and
// "leaky_bucket" (GCRA), "cooldown" (MinInterval). The error lists the names.
func ParseAlgorithm(s string) (Algorithm, error) {
	if slices.Contains(Algorithms, Algorithm(s)) {
		return Algorithm(s), nil
	}
	if a, ok := algorithmAliases[s]; ok {
		return a, nil
	}
	names := make([]string, len(Algorithms))
	for i, a := range Algorithms {
		names[i] = string(a)
	}
	return "", fmt.Errorf("algorithm %q: want one of %s (aliases token_bucket, leaky_bucket, cooldown)", s, strings.Join(names, ", "))
}

// Windowed reports whether the algorithm counts units in windows of
// Rate.Period, restricted to Windows.
func (a Algorithm) Windowed() bool {
	switch a {
	case FixedWindow, SlidingWindowLog, SlidingWindowCounter, Distinct:
		return true
	}
	return false
}

// Limit is one rule: how many units an identifier may use.
type Limit struct {
	// Name identifies the limit in decisions, logs, events and metrics
	// ("throughput", "pair"). GCRA limits that share a key are stored under it.
	Name      string
	Algorithm Algorithm
	// Rate is used by GCRA and the windowed algorithms: Rate.Limit units (or
	// distinct members) per Rate.Period.
	Rate Rate
	// Burst is GCRA's bucket size in units; zero means 1 (evenly spaced).
	Burst int64
	// Max is the Concurrency limit's number of simultaneous leases.
	Max int64
	// Lease is how long a Concurrency lease lives unless released; zero means 30s.
	Lease time.Duration
	// Interval is MinInterval's least time between two operations (>= 1ms).
	Interval time.Duration
}

// DefaultLease is the Concurrency lease lifetime when Limit.Lease is zero.
const DefaultLease = 30 * time.Second

// Validate reports the first problem with l as a *FieldError naming the
// field: `limit "pair": rate: want N/period with N > 0 and period >= 1ms,
// got 0/s`.
func (l Limit) Validate() error {
	switch {
	case l.Algorithm == GCRA:
		if l.Rate.Limit <= 0 || l.Rate.Period < time.Millisecond {
			return fieldErr(l, FieldRate, "want N/period with N > 0 and period >= 1ms, got %v", l.Rate)
		}
		if l.Burst < 0 {
			return fieldErr(l, FieldBurst, "want >= 0, got %d", l.Burst)
		}
	case l.Algorithm.Windowed():
		if l.Rate.Limit <= 0 {
			return fieldErr(l, FieldRate, "want N/window with N > 0, got %v", l.Rate)
		}
		if !slices.Contains(Windows, l.Rate.Period) {
			return &FieldError{Limit: l.Name, Field: FieldRate, Err: fmt.Errorf("rate %v: window %s: %s needs one of 1s, 30s, 1m, 5m, 1h, 1d", l.Rate, FormatPeriod(l.Rate.Period), l.Algorithm)}
		}
	case l.Algorithm == MinInterval:
		if l.Interval < time.Millisecond {
			return fieldErr(l, FieldInterval, "want >= 1ms, got %v", l.Interval)
		}
	case l.Algorithm == Pause:
		return nil
	case l.Algorithm == Concurrency:
		if l.Max <= 0 {
			return fieldErr(l, FieldMax, "want > 0, got %d", l.Max)
		}
		if l.Lease < 0 {
			return fieldErr(l, FieldLease, "want >= 0, got %v", l.Lease)
		}
	default:
		_, err := ParseAlgorithm(string(l.Algorithm))
		return &FieldError{Limit: l.Name, Field: "algorithm", Err: err}
	}
	return nil
}

// Capacity is the most units the limit can ever admit at once: Burst for
// GCRA, Rate.Limit for the windowed algorithms, Max for Concurrency, 1 for
// MinInterval.
func (l Limit) Capacity() int64 {
	switch {
	case l.Algorithm == GCRA:
		return max(l.Burst, 1)
	case l.Algorithm.Windowed():
		return l.Rate.Limit
	case l.Algorithm == MinInterval, l.Algorithm == Pause:
		return 1
	default:
		return l.Max
	}
}

// Window is the span the limit counts over, for events and headers: the
// period for GCRA and the windowed algorithms, Interval for MinInterval,
// Lease for Concurrency.
func (l Limit) Window() time.Duration {
	switch l.Algorithm {
	case MinInterval:
		return l.Interval
	case Concurrency:
		if l.Lease <= 0 {
			return DefaultLease
		}
		return l.Lease
	}
	return l.Rate.Period
}

// String renders the limit as "name: algorithm rate" for logs and errors.
func (l Limit) String() string {
	switch l.Algorithm {
	case GCRA:
		return fmt.Sprintf("%s: gcra %v burst %d", l.Name, l.Rate, max(l.Burst, 1))
	case MinInterval:
		return fmt.Sprintf("%s: min_interval %v", l.Name, l.Interval)
	case Concurrency:
		return fmt.Sprintf("%s: concurrency max %d", l.Name, l.Max)
	case Pause:
		return l.Name + ": pause"
	}
	return fmt.Sprintf("%s: %s %v", l.Name, l.Algorithm, l.Rate)
}
