package limitview

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/throttle"
)

// Event is one limiter event as `sluice events tail --json` prints it and
// the /limits/ dashboard serves it: times in Unix ms, as in the decisions'
// JSON.
type Event struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	At        int64  `json:"at"`
	Key       string `json:"key"`
	Name      string `json:"name"`
	Limit     int64  `json:"limit"`
	Window    string `json:"window,omitempty"`
	Reset     int64  `json:"reset,omitempty"`
	Remaining *int64 `json:"remaining,omitempty"`
	Threshold int64  `json:"threshold,omitempty"`
	Code      int64  `json:"code,omitempty"`
	Reason    string `json:"reason,omitempty"`
	Until     int64  `json:"until,omitempty"`
	InARow    int64  `json:"in_a_row,omitempty"`
	// limits.adapted's rates, as written ("0.9375/s").
	Configured string `json:"configured,omitempty"`
	Effective  string `json:"effective,omitempty"`
	Previous   string `json:"previous,omitempty"`
	Ceiling    string `json:"ceiling,omitempty"`
}

// EventOf is e's view.
func EventOf(e throttle.Event) Event {
	v := Event{ID: e.ID, Type: e.Type, At: e.At.UnixMilli(), Key: e.Key, Name: e.Name, Limit: e.Limit, Threshold: e.Threshold,
		Code: e.Code, Reason: e.Reason, InARow: e.InARow,
		Configured: e.Configured, Effective: e.Effective, Previous: e.Previous, Ceiling: e.Ceiling}
	if !e.Until.IsZero() {
		v.Until = e.Until.UnixMilli()
	}
	if e.Window > 0 {
		v.Window = Window(e.Window)
	}
	if !e.Reset.IsZero() {
		v.Reset = e.Reset.UnixMilli()
	}
	if e.Type == throttle.EventWarning {
		r := e.Remaining
		v.Remaining = &r
	}
	return v
}

// Window renders a window with its count, as rules write it: 1s, 6s, 1d.
func Window(d time.Duration) string {
	s := throttle.FormatPeriod(d)
	if s != "" && (s[0] < '0' || s[0] > '9') {
		s = "1" + s
	}
	return s
}

// Latest returns the newest events among the last scan entries of the
// stream for which keep reports true (nil keeps all), newest first. Its
// work is bounded by scan (two reads of at most scan entries).
func Latest(ctx context.Context, lim *throttle.Redis, scan int64, keep func(typ string) bool) ([]throttle.Event, error) {
	if scan <= 0 {
		return nil, nil
	}
	// The stream is read forward (throttle.Redis.Events parses entries):
	// start after the entry scan+1 back from the newest.
	last, err := lim.Client().XRevRangeN(ctx, lim.StreamKey(), "+", "-", scan+1).Result()
	if err != nil {
		return nil, fmt.Errorf("limitview: events: %w", err)
	}
	if len(last) == 0 {
		return nil, nil
	}
	after := "0"
	if int64(len(last)) > scan {
		after = last[len(last)-1].ID
	}
	evs, _, err := lim.Events(ctx, after, scan, 0)
	if err != nil {
		return nil, err
	}
	out := evs[:0]
	for _, e := range evs {
		if keep == nil || keep(e.Type) {
			out = append(out, e)
		}
	}
	slices.Reverse(out)
	return out, nil
}
