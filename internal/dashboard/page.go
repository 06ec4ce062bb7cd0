package dashboard

import (
	_ "embed"
	"html/template"
	"math"
	"time"

	"github.com/sluice-dev/sluice/throttle"
)

//go:embed limits.html
var limitsHTML string

// limitsPage renders a Snapshot; html/template escapes every key, reason
// and prefix for its context.
var limitsPage = template.Must(template.New("limits").Funcs(template.FuncMap{
	"clock":   func(ms int64) string { return time.UnixMilli(ms).UTC().Format("15:04:05.000") },
	"rel":     relative,
	"rate":    throttle.FormatPerSecond,
	"seconds": func(d time.Duration) int64 { return int64(math.Ceil(d.Seconds())) },
	"millis":  func(d time.Duration) int64 { return d.Milliseconds() },
	"pct":     func(f float64) float64 { return 100 * f },
}).Parse(limitsHTML))

// pageData is what the template reads.
type pageData struct {
	Snapshot
	Nonce   string
	Refresh time.Duration
}

// relative renders the instant ms relative to at: "in 1.2s", "3s ago", "now".
func relative(ms, at int64) string {
	d := time.Duration(ms-at) * time.Millisecond
	switch {
	case d > -50*time.Millisecond && d < 50*time.Millisecond:
		return "now"
	case d > 0:
		return "in " + round(d).String()
	default:
		return round(-d).String() + " ago"
	}
}

// round keeps two significant figures of a short span, whole seconds of a
// long one.
func round(d time.Duration) time.Duration {
	switch {
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond)
	default:
		return d.Round(time.Second)
	}
}
