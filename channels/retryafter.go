package channels

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxRetryAfterSeconds bounds delay-seconds so the Duration cannot overflow
// (about 292 years fit; anything bigger is treated as garbage).
const maxRetryAfterSeconds = math.MaxInt64 / int64(time.Second)

// ParseRetryAfter returns the delay asked for by the first Retry-After header of
// h (RFC 9110 §10.2.3), relative to now:
//
//   - delay-seconds ("120") → that many seconds;
//   - HTTP-date ("Wed, 21 Oct 2015 07:28:00 GMT", also the obsolete RFC 850 and
//     asctime forms) → the time until then, rounded up to a whole second so a
//     retry is never early;
//   - a date not after now, a missing header, or anything unparsable (negative
//     numbers, fractions, garbage, delays beyond what a Duration holds) → 0,
//     meaning "not given": the caller uses its own backoff.
func ParseRetryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if isDigits(v) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n > maxRetryAfterSeconds {
			return 0
		}
		return time.Duration(n) * time.Second
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	d := t.Sub(now) // saturates for far-away dates
	if d > time.Duration(maxRetryAfterSeconds-1)*time.Second {
		return 0
	}
	return ceilSecond(d)
}

// ceilSecond rounds d up to a whole second; d <= 0 gives 0.
func ceilSecond(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	if r := d % time.Second; r != 0 {
		d += time.Second - r
	}
	return d
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// maxRegainMinutes bounds estimated_time_to_regain_access (one year) so a
// malformed value cannot overflow a Duration.
const maxRegainMinutes = 365 * 24 * 60

// parseBusinessUseCaseUsage returns the largest estimated_time_to_regain_access
// (minutes, per Meta's Graph API rate-limiting docs) in the
// x-business-use-case-usage header, whose value is JSON shaped
// {"<business id>":[{"type":"whatsapp","call_count":…,"estimated_time_to_regain_access":N},…]}.
// Missing, malformed or zero values give 0.
func parseBusinessUseCaseUsage(h http.Header) time.Duration {
	v := h.Get("X-Business-Use-Case-Usage")
	if v == "" {
		return 0
	}
	var usage map[string][]struct {
		Regain float64 `json:"estimated_time_to_regain_access"`
	}
	if err := json.Unmarshal([]byte(v), &usage); err != nil {
		return 0
	}
	var most float64
	for _, entries := range usage {
		for _, e := range entries {
			if e.Regain > most && !math.IsInf(e.Regain, 0) {
				most = e.Regain
			}
		}
	}
	most = min(most, maxRegainMinutes)
	return time.Duration(math.Ceil(most*60)) * time.Second
}
