package throttle

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Override replaces parts of the configured limit on a key at runtime, for
// every process using the same Redis (`sluice limits set KEY --rate
// 10000/1d`). Zero fields keep the configured value. An override that would
// make the limit invalid (a window a fixed window cannot have, a capacity
// below a request's cost) is ignored for that request, and logged
// (Options.Logger).
type Override struct {
	Rate     Rate          `json:"rate,omitzero"`
	Burst    int64         `json:"burst,omitempty"`
	Max      int64         `json:"max,omitempty"`
	Interval time.Duration `json:"interval,omitempty"` // ns
	SetAt    time.Time     `json:"set_at,omitzero"`
}

// Apply returns l with the override's non-zero fields.
func (o Override) Apply(l Limit) Limit {
	if o.Rate.Limit > 0 {
		l.Rate = o.Rate
	}
	if o.Burst > 0 {
		l.Burst = o.Burst
	}
	if o.Max > 0 {
		l.Max = o.Max
	}
	if o.Interval > 0 {
		l.Interval = o.Interval
	}
	return l
}

// String renders the override's fields as flags would set them.
func (o Override) String() string {
	var parts []string
	if o.Rate.Limit > 0 {
		parts = append(parts, "rate "+o.Rate.String())
	}
	if o.Burst > 0 {
		parts = append(parts, fmt.Sprintf("burst %d", o.Burst))
	}
	if o.Max > 0 {
		parts = append(parts, fmt.Sprintf("max %d", o.Max))
	}
	if o.Interval > 0 {
		parts = append(parts, "interval "+o.Interval.String())
	}
	return strings.Join(parts, ", ")
}

// SetOverride stores an override for key, a limiter key
// ("whatsapp:daily:106540352242922") or a prefix pattern ending in '*'
// ("whatsapp:number:*"); the longest matching pattern wins, an exact key
// before any pattern. Every process honours it within Options.OverrideRefresh.
func (l *Redis) SetOverride(ctx context.Context, key string, o Override) error {
	if key == "" || strings.ContainsAny(key, "{}") {
		return fmt.Errorf("%w: override key %q", ErrBadRequest, key)
	}
	if o == (Override{SetAt: o.SetAt}) {
		return fmt.Errorf("%w: override for %q sets nothing", ErrBadRequest, key)
	}
	if o.SetAt.IsZero() {
		o.SetAt = time.Now().UTC()
	}
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	if err := l.rdb.HSet(ctx, l.OverridesKey(), key, b).Err(); err != nil {
		return fmt.Errorf("throttle: set override %q: %w", key, err)
	}
	return nil
}

// UnsetOverride removes key's override; it reports whether there was one.
func (l *Redis) UnsetOverride(ctx context.Context, key string) (bool, error) {
	n, err := l.rdb.HDel(ctx, l.OverridesKey(), key).Result()
	if err != nil {
		return false, fmt.Errorf("throttle: unset override %q: %w", key, err)
	}
	return n > 0, nil
}

// Overrides returns every stored override by key.
func (l *Redis) Overrides(ctx context.Context) (map[string]Override, error) {
	raw, err := l.rdb.HGetAll(ctx, l.OverridesKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("throttle: read overrides: %w", err)
	}
	out := make(map[string]Override, len(raw))
	for k, v := range raw {
		var o Override
		if err := json.Unmarshal([]byte(v), &o); err != nil {
			return nil, fmt.Errorf("throttle: override %q: %w", k, err)
		}
		out[k] = o
	}
	return out, nil
}

// overrideCache is the process's copy of the overrides (snapCache).
type overrideCache struct {
	*snapCache[overrideSnapshot]
	l *Redis // for the warning of an override it ignores
}

type overrideSnapshot struct {
	exact    map[string]Override
	patterns []string // prefixes of '*' patterns, longest first
	byPrefix map[string]Override
}

func newOverrideCache(l *Redis, refresh time.Duration) *overrideCache {
	return &overrideCache{l: l, snapCache: newSnapCache(refresh,
		func(ctx context.Context, _ *overrideSnapshot) (*overrideSnapshot, error) {
			all, err := l.Overrides(ctx)
			if err != nil {
				return nil, err
			}
			return newOverrideSnapshot(all), nil
		},
		func(ctx context.Context, err error) {
			l.warn.overrideRefresh.warn(ctx, l.logger(), "throttle: override refresh failed: keeping the last overrides read",
				"key", l.OverridesKey(), "err", err)
		})}
}

// newOverrideSnapshot indexes overrides keyed by limiter key or by a prefix
// pattern ending in '*'.
func newOverrideSnapshot(all map[string]Override) *overrideSnapshot {
	n := &overrideSnapshot{exact: map[string]Override{}, byPrefix: map[string]Override{}}
	for k, o := range all {
		if p, ok := strings.CutSuffix(k, "*"); ok {
			n.byPrefix[p] = o
			n.patterns = append(n.patterns, p)
		} else {
			n.exact[k] = o
		}
	}
	// Longest first; equal lengths in order, so the choice never varies.
	sort.Slice(n.patterns, func(i, j int) bool {
		a, b := n.patterns[i], n.patterns[j]
		return len(a) > len(b) || len(a) == len(b) && a < b
	})
	return n
}

// lookup applies the precedence rule: the exact key, else the longest
// matching pattern. It returns the key or pattern ("prefix*") that matched.
func (s *overrideSnapshot) lookup(key string) (string, Override, bool) {
	if o, ok := s.exact[key]; ok {
		return key, o, true
	}
	for _, p := range s.patterns {
		if strings.HasPrefix(key, p) {
			return p + "*", s.byPrefix[p], true
		}
	}
	return "", Override{}, false
}

// apply returns reqs with overrides applied, copying only when one applies.
func (c *overrideCache) apply(ctx context.Context, reqs []Request) []Request {
	s := c.current(ctx)
	if s == nil || (len(s.exact) == 0 && len(s.patterns) == 0) {
		return reqs
	}
	var out []Request
	for i, r := range reqs {
		_, o, ok := s.lookup(r.Key)
		if !ok {
			continue
		}
		lim := o.Apply(r.Limit)
		err := lim.Validate()
		if err == nil && r.cost() > lim.Capacity() {
			err = fmt.Errorf("%w: cost %d, capacity %d", ErrCostOverLimit, r.cost(), lim.Capacity())
		}
		if err != nil {
			c.l.warn.overrideIgnored.warn(ctx, c.l.logger(), "throttle: override ignored",
				"key", r.Key, "limit", r.Limit.Name, "override", o.String(), "err", err)
			continue
		}
		if out == nil {
			out = append([]Request(nil), reqs...)
		}
		out[i].Limit = lim
	}
	if out == nil {
		return reqs
	}
	return out
}
