package dashboard

import (
	"cmp"
	_ "embed"
	"html/template"
	"math"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/rules"
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
	// Groups are Keys grouped per limit (groupKeys).
	Groups  []keyGroup
	Nonce   string
	Refresh time.Duration
}

// FoldAbove is how many keys a limit's group shows open: a group with more
// (one key per recipient: a pair, a daily cap) is folded, its count and
// totals in its summary.
const FoldAbove = 10

// keyGroup is the keys of one limit of one channel ("whatsapp" "pair"), or
// of no configured rule (Limit "").
type keyGroup struct {
	ID               string // "whatsapp/pair": the group's data-group, kept open across refreshes
	Channel, Limit   string
	Algorithm, Rule  string
	Rows             []KeyRow
	Backlog          int64
	Adapted, Held    int // keys adapted, keys held by a pause
	Overridden, Zero int // keys with an override, keys with no unit left
	Open             bool
}

// groupKeys groups rows (in their order) per channel and limit: the groups
// with the longest backlogs first, then by channel and limit, the keys no
// rule matches last. A group of more than FoldAbove keys is folded.
func groupKeys(rows []KeyRow) []keyGroup {
	var out []keyGroup
	at := map[string]int{}
	for _, r := range rows {
		ch := rules.ChannelOf(r.Key) // a spread key's number folds with its channel's
		id := ch + "/" + r.Limit
		i, ok := at[id]
		if !ok {
			i = len(out)
			at[id] = i
			out = append(out, keyGroup{ID: id, Channel: ch, Limit: r.Limit, Algorithm: r.Algorithm, Rule: r.Rule})
		}
		g := &out[i]
		g.Rows = append(g.Rows, r)
		g.Backlog += r.Backlog
		if r.Adapted != "" {
			g.Adapted++
		}
		if r.HeldBy != "" {
			g.Held++
		}
		if r.Override != "" {
			g.Overridden++
		}
		if r.Limit != "" && r.Remaining < 1 {
			g.Zero++
		}
	}
	for i := range out {
		out[i].Open = len(out[i].Rows) <= FoldAbove
	}
	slices.SortStableFunc(out, func(a, b keyGroup) int {
		if (a.Limit == "") != (b.Limit == "") {
			if a.Limit == "" {
				return 1
			}
			return -1
		}
		return cmp.Or(cmp.Compare(b.Backlog, a.Backlog), cmp.Compare(a.Channel, b.Channel), cmp.Compare(a.Limit, b.Limit))
	})
	return out
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
