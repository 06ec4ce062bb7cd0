package throttle

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Pacing margins: each worker process measures, per channel, how late its
// sends leave after their slots and widens the spacing of the channel's
// paced limits to absorb it (worker/margin.go, docs/pacing.md). It
// publishes what it measured here, so that dashboards and operators see
// every process's margin: one Redis hash, "<prefix>:{_margins}", field
// "<channel>|<process>", value the Margin as JSON. Entries older than
// MarginTTL are ignored and the hash expires with them.

// MarginTTL is how long a published margin counts: a process publishes
// every few seconds, so an older entry is a process that stopped.
const MarginTTL = 30 * time.Second

// Margin is one worker process's pacing margin for one channel. Durations
// are lateness on the process' own clock.
type Margin struct {
	Channel string `json:"-"`
	// Process names the worker process ("host:pid").
	Process string `json:"-"`
	// Margin is the lateness the channel's spacing absorbs now, Headroom
	// the fraction its paced limits are widened by for it
	// (Margin/(1s+Margin)).
	Margin   time.Duration `json:"margin"`
	Headroom float64       `json:"headroom"`
	// Configured is the configured headroom's margin, Measured the 99.9th
	// percentile of how late sends left after their slots (last 10-20s),
	// Feedback what throttles after late departures added, Max the bound.
	Configured time.Duration `json:"configured"`
	Measured   time.Duration `json:"measured"`
	Feedback   time.Duration `json:"feedback"`
	Max        time.Duration `json:"max"`
	// At is when it was published (the publisher's clock).
	At time.Time `json:"at"`
}

// PublishMargins writes one process's margins (their Process and Channel
// set) in one round trip and keeps the hash for MarginTTL more. Errors are
// Redis'.
func (l *Redis) PublishMargins(ctx context.Context, ms []Margin) error {
	if len(ms) == 0 {
		return nil
	}
	args := make([]any, 0, 2*len(ms))
	for _, m := range ms {
		if m.Channel == "" || m.Process == "" || strings.Contains(m.Channel, "|") {
			return fmt.Errorf("%w: margin: channel %q, process %q", ErrBadRequest, m.Channel, m.Process)
		}
		v, err := json.Marshal(m)
		if err != nil {
			return err
		}
		args = append(args, m.Channel+"|"+m.Process, string(v))
	}
	key := l.MarginsKey()
	p := l.rdb.TxPipeline()
	p.HSet(ctx, key, args...)
	p.PExpire(ctx, key, 2*MarginTTL)
	if _, err := p.Exec(ctx); err != nil {
		return fmt.Errorf("throttle: publish margins: %w", err)
	}
	return nil
}

// Margins returns the margins published within MarginTTL of now (this
// host's clock), by channel then process. Entries that do not parse, or
// are four MarginTTL old (a process that stopped), are deleted. Errors are
// Redis'.
func (l *Redis) Margins(ctx context.Context, now time.Time) ([]Margin, error) {
	all, err := l.rdb.HGetAll(ctx, l.MarginsKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("throttle: margins: %w", err)
	}
	out := make([]Margin, 0, len(all))
	var stale []string
	for field, v := range all {
		ch, proc, ok := strings.Cut(field, "|")
		var m Margin
		if !ok || json.Unmarshal([]byte(v), &m) != nil || now.Sub(m.At) > 4*MarginTTL {
			stale = append(stale, field) // a process that stopped, or garbage
			continue
		}
		if now.Sub(m.At) > MarginTTL {
			continue
		}
		m.Channel, m.Process = ch, proc
		out = append(out, m)
	}
	if len(stale) > 0 {
		// Best effort: the next read drops them again.
		_ = l.rdb.HDel(ctx, l.MarginsKey(), stale...).Err()
	}
	slices.SortFunc(out, func(a, b Margin) int {
		if c := strings.Compare(a.Channel, b.Channel); c != 0 {
			return c
		}
		return strings.Compare(a.Process, b.Process)
	})
	return out, nil
}
