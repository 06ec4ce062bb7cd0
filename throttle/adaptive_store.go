package throttle

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Adaptive limits' shared state and its per-process cache; the algorithm
// is in adaptive.go.

// adaptVersionField counts the hash's changes.
const adaptVersionField = "_v"

var adaptScript = redis.NewScript(joinLua("adapt.lua"))

// adaptEntry is one limiter key's state: its limits by name.
type adaptEntry struct {
	ver    int64
	limits map[string]Adaptation
}

func parseAdaptEntry(key, raw string) (adaptEntry, error) {
	v, js, ok := strings.Cut(raw, " ")
	ver, err := strconv.ParseInt(v, 10, 64)
	if !ok || err != nil {
		return adaptEntry{}, fmt.Errorf("%w: adaptive state of %q: no version", ErrMalformedReply, key)
	}
	e := adaptEntry{ver: ver}
	if err := json.Unmarshal([]byte(js), &e.limits); err != nil {
		return adaptEntry{}, fmt.Errorf("%w: adaptive state of %q: %v", ErrMalformedReply, key, err)
	}
	for name, a := range e.limits {
		a.Key, a.Limit = key, name
		e.limits[name] = a
	}
	return e, nil
}

// readAdapt reads key's entry and the limiter's clock in one round trip.
func (l *Redis) readAdapt(ctx context.Context, key string) (adaptEntry, time.Time, error) {
	pipe := l.rdb.Pipeline()
	tm := pipe.Time(ctx)
	get := pipe.HGet(ctx, l.AdaptKey(), key)
	_, err := pipe.Exec(ctx)
	if err != nil && !errors.Is(err, redis.Nil) {
		return adaptEntry{}, time.Time{}, fmt.Errorf("throttle: read adaptive state %q: %w", key, err)
	}
	now := tm.Val()
	if l.clock != nil {
		now = l.clock()
	}
	raw, err := get.Result()
	if errors.Is(err, redis.Nil) {
		return adaptEntry{limits: map[string]Adaptation{}}, now, nil
	}
	e, err := parseAdaptEntry(key, raw)
	return e, now, err
}

// writeAdapt stores e's limits for key if its version is still e.ver;
// empty limits delete the entry. It reports whether it wrote, and the
// entry's new version.
func (l *Redis) writeAdapt(ctx context.Context, key string, e adaptEntry, ttl time.Duration) (bool, int64, error) {
	js := ""
	if len(e.limits) > 0 {
		b, err := json.Marshal(e.limits)
		if err != nil {
			return false, 0, err
		}
		js = string(b)
	}
	res, err := adaptScript.Run(ctx, l.rdb, []string{l.AdaptKey()}, key, e.ver, js, max(ttl, time.Hour).Milliseconds()).Int64Slice()
	if err != nil {
		return false, 0, fmt.Errorf("throttle: write adaptive state %q: %w", key, err)
	}
	if len(res) != 2 {
		return false, 0, fmt.Errorf("%w: %d values from adapt", ErrMalformedReply, len(res))
	}
	return res[0] == 1, res[1], nil
}

// AdaptSignal is a provider's throttle answer to one send.
type AdaptSignal struct {
	// Code and Reason are the provider's error code and message (Twilio
	// 20429 "Too Many Requests").
	Code   int
	Reason string
	// Sent is when the throttled send went out, on the limiter's clock
	// (Redis TIME); zero when unknown. A send that went out before the
	// limit's last decrease was paced at the old rate: its throttle does
	// not count again.
	Sent time.Time
	// Jitter reports that the worker judged the throttled send's lateness,
	// not the rate, the cause: it left later than the pacing margin allowed
	// (a busy host; issue 19). The worker widens its margin instead, and
	// AdaptDown changes nothing.
	Jitter bool
}

// AdaptChange is one adaptive change AdaptDown or AdaptUp made. Rates are
// units per second.
type AdaptChange struct {
	Key, Limit                      string
	Configured, Effective, Previous float64
	Ceiling                         float64 // 0: none
	Code                            int     // the provider's, for a decrease
	Reason                          string  // ReasonThrottled, ReasonQuiet, ReasonRecovered, ReasonRestored or the provider's message
	Decrease                        bool
}

// maxAdaptTries bounds the compare-and-set retries of one key's change;
// another worker's change in between usually makes this one moot.
const maxAdaptTries = 4

// AdaptDown lowers the effective rate of each request's limit (GCRA and
// the windowed algorithms; others are skipped) after the provider
// throttled a send with these limits, in every process: at once in this
// one, within Options.OverrideRefresh in the others. The requests carry
// the configured limits (runtime overrides are applied here). It returns
// the changes made (none when the throttle did not count: see
// AdaptOptions.Reaction, AdaptSignal.Sent and AdaptSignal.Jitter; none
// either when it marked a storm, Adaptation.Storm), each also written to
// the events stream as limits.adapted. Errors are Redis'.
func (l *Redis) AdaptDown(ctx context.Context, o AdaptOptions, sig AdaptSignal, reqs ...Request) ([]AdaptChange, error) {
	if o.Disabled || l.adaptive == nil || sig.Jitter {
		return nil, nil
	}
	o = o.WithDefaults()
	return l.adapt(ctx, o, reqs, func(a Adaptation, cfg float64, now time.Time) (Adaptation, bool, bool) {
		n, ok := o.down(a, cfg, now, sig.Sent, sig.Code, sig.Reason)
		return n, ok, false
	})
}

// AdaptUp raises the effective rate of the requests' adapted limits when
// sends have gone through at it for a quiet period since its last change;
// callers call it after each send that went through. The first such send
// after a change is recorded (one write per change); otherwise it costs no
// Redis call unless a step is due. It returns the changes made, as
// AdaptDown.
func (l *Redis) AdaptUp(ctx context.Context, o AdaptOptions, reqs ...Request) ([]AdaptChange, error) {
	if o.Disabled || l.adaptive == nil {
		return nil, nil
	}
	o = o.WithDefaults()
	s := l.adaptive.current(ctx)
	if s == nil || len(s.entries) == 0 {
		return nil, nil
	}
	now := l.localNow()
	var mark, due []Request
	for _, r := range reqs {
		e, ok := s.entries[r.Key]
		if !ok || !adaptable(r.Limit.Algorithm) {
			continue
		}
		a, ok := e.limits[r.Limit.Name]
		switch {
		case !ok:
		case !a.okSince():
			mark = append(mark, r)
		case now.Sub(a.OK) >= o.Quiet:
			due = append(due, r)
		}
	}
	if len(mark) > 0 {
		if _, err := l.adapt(ctx, o, mark, func(a Adaptation, _ float64, now time.Time) (Adaptation, bool, bool) {
			n, ok := o.markOK(a, now)
			return n, ok, false
		}); err != nil {
			return nil, err
		}
	}
	if len(due) == 0 {
		return nil, nil
	}
	return l.adapt(ctx, o, due, o.up)
}

// adapt applies step to the state of each request's limit, key by key,
// with a compare-and-set; it updates this process's cache and emits an
// event per change.
func (l *Redis) adapt(ctx context.Context, o AdaptOptions, reqs []Request, step func(Adaptation, float64, time.Time) (Adaptation, bool, bool)) ([]AdaptChange, error) {
	var rate []Request
	for _, r := range reqs {
		if adaptable(r.Limit.Algorithm) && r.Key != "" {
			rate = append(rate, r)
		}
	}
	if len(rate) == 0 {
		return nil, nil
	}
	if l.overrides != nil {
		rate = l.overrides.apply(ctx, rate)
	}
	var keys []string
	byKey := map[string][]Request{}
	for _, r := range rate {
		if _, ok := byKey[r.Key]; !ok {
			keys = append(keys, r.Key)
		}
		byKey[r.Key] = append(byKey[r.Key], r)
	}
	var out []AdaptChange
	for _, key := range keys {
		ch, err := l.adaptKey(ctx, o, key, byKey[key], step)
		if err != nil {
			return out, err
		}
		out = append(out, ch...)
	}
	return out, nil
}

func (l *Redis) adaptKey(ctx context.Context, o AdaptOptions, key string, reqs []Request, step func(Adaptation, float64, time.Time) (Adaptation, bool, bool)) ([]AdaptChange, error) {
	ctx = context.WithoutCancel(ctx) // a change, once decided, is written
	for range maxAdaptTries {
		e, now, err := l.readAdapt(ctx, key)
		if err != nil {
			return nil, err
		}
		next := adaptEntry{ver: e.ver, limits: make(map[string]Adaptation, len(e.limits))}
		for n, a := range e.limits {
			next.limits[n] = a
		}
		var changes []AdaptChange
		write := false
		for _, r := range reqs {
			cfg := PerSecondOf(r.Limit.Rate)
			if cfg <= 0 {
				continue
			}
			a, ok := e.limits[r.Limit.Name]
			if !ok {
				a = Adaptation{}
			}
			n, changed, remove := step(a, cfg, now)
			if !changed {
				continue
			}
			n.Key, n.Limit = key, r.Limit.Name // a fresh state has neither, and the cache shows them
			write = true
			if remove {
				delete(next.limits, r.Limit.Name)
			} else {
				next.limits[r.Limit.Name] = n
			}
			// A change of the effective rate is an event; a restored
			// configured rate that held (removed at the rate it was) and a
			// storm's mark (no rate changed) are not.
			if n.Changed.Equal(now) && n.Rate != n.Previous || remove && n.Previous != cfg {
				changes = append(changes, AdaptChange{Key: key, Limit: r.Limit.Name, Configured: cfg, Effective: n.Effective(cfg),
					Previous: n.Previous, Ceiling: n.Ceiling, Code: n.Code, Reason: n.Reason, Decrease: n.Rate < n.Previous})
			}
		}
		if !write {
			return nil, nil
		}
		ok, ver, err := l.writeAdapt(ctx, key, next, o.CeilingTTL+time.Hour)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue // another process changed it since: decide again on its state
		}
		next.ver = ver
		l.adaptive.put(key, next)
		for _, c := range changes {
			l.emitAdapted(ctx, c, now)
		}
		return changes, nil
	}
	return nil, nil // contended: the other processes' changes stand
}

// emitAdapted writes a limits.adapted event.
func (l *Redis) emitAdapted(ctx context.Context, c AdaptChange, now time.Time) {
	if l.events == nil || l.events.opts.Disabled {
		return
	}
	f := []any{"key", c.Key, "name", c.Limit, "configured", FormatPerSecond(c.Configured), "effective", FormatPerSecond(c.Effective),
		"previous", FormatPerSecond(c.Previous), "reason", c.Reason}
	if c.Ceiling > 0 {
		f = append(f, "ceiling", FormatPerSecond(c.Ceiling))
	}
	if c.Code != 0 {
		f = append(f, "code", c.Code)
	}
	// Every change is its own event: the marker names the key, the limit
	// and the microsecond.
	l.events.emit(ctx, EventLimitsAdapted, c.Key+"#"+c.Limit+"@"+strconv.FormatInt(now.UnixMicro(), 10), time.Millisecond, now, f...)
}

// Adaptations reads every adapted limit from Redis, sorted by key and
// limit name.
func (l *Redis) Adaptations(ctx context.Context) ([]Adaptation, error) {
	raw, err := l.rdb.HGetAll(ctx, l.AdaptKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("throttle: read adaptive state: %w", err)
	}
	entries, err := parseAdaptHash(raw)
	if err != nil {
		return nil, err
	}
	return flattenAdapt(entries), nil
}

// CachedAdaptations returns this process's cached view of the adapted
// limits (at most Options.OverrideRefresh old; nothing when adaptation is
// off), sorted by key and limit name, without a Redis call unless the
// cache is stale. Metrics read it.
func (l *Redis) CachedAdaptations(ctx context.Context) []Adaptation {
	if l.adaptive == nil {
		return nil
	}
	s := l.adaptive.current(ctx)
	if s == nil {
		return nil
	}
	return flattenAdapt(s.entries)
}

// AdaptationOf returns key's adapted limits from Redis (none when it is
// not adapted), sorted by limit name.
func (l *Redis) AdaptationOf(ctx context.Context, key string) ([]Adaptation, error) {
	e, _, err := l.readAdapt(ctx, key)
	if err != nil {
		return nil, err
	}
	return flattenAdapt(map[string]adaptEntry{key: e}), nil
}

// ResetAdaptation forgets key's adaptive state in every process (within
// Options.OverrideRefresh): its limits are at their configured rates
// again. It reports whether there was any.
func (l *Redis) ResetAdaptation(ctx context.Context, key string) (bool, error) {
	for range maxAdaptTries {
		e, _, err := l.readAdapt(ctx, key)
		if err != nil || len(e.limits) == 0 {
			return false, err
		}
		ok, _, err := l.writeAdapt(ctx, key, adaptEntry{ver: e.ver}, 0)
		if err != nil {
			return false, err
		}
		if ok {
			if l.adaptive != nil {
				l.adaptive.put(key, adaptEntry{})
			}
			return true, nil
		}
	}
	return false, fmt.Errorf("throttle: reset adaptive state %q: changed by others %d times in a row", key, maxAdaptTries)
}

// pruneAdaptations removes the state of keys that saw neither a throttle
// nor a change for their ceiling's lifetime (no traffic since): they go
// back to their configured rates. It returns how many it removed.
func (l *Redis) pruneAdaptations(ctx context.Context) (int, error) {
	raw, err := l.rdb.HGetAll(ctx, l.AdaptKey()).Result()
	if err != nil {
		return 0, fmt.Errorf("throttle: read adaptive state: %w", err)
	}
	now := l.now(ctx)
	n := 0
	for key, v := range raw {
		if key == adaptVersionField {
			continue
		}
		e, err := parseAdaptEntry(key, v)
		stale := err != nil // unreadable: drop it rather than keep it forever
		if err == nil {
			stale = true
			for _, a := range e.limits {
				if now.Sub(laterOf(a.Changed, a.Throttled)) < a.TTL {
					stale = false
				}
			}
		}
		if !stale {
			continue
		}
		ok, _, err := l.writeAdapt(ctx, key, adaptEntry{ver: e.ver}, 0)
		if err != nil {
			return n, err
		}
		if ok {
			n++
			for _, a := range e.limits {
				l.emitAdapted(ctx, AdaptChange{Key: key, Limit: a.Limit, Configured: a.Configured, Effective: a.Configured,
					Previous: a.Effective(a.Configured), Reason: ReasonExpired}, now)
			}
		}
	}
	return n, nil
}

func parseAdaptHash(raw map[string]string) (map[string]adaptEntry, error) {
	out := make(map[string]adaptEntry, len(raw))
	for k, v := range raw {
		if k == adaptVersionField {
			continue
		}
		e, err := parseAdaptEntry(k, v)
		if err != nil {
			return nil, err
		}
		out[k] = e
	}
	return out, nil
}

func flattenAdapt(entries map[string]adaptEntry) []Adaptation {
	var out []Adaptation
	for _, e := range entries {
		for _, a := range e.limits {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b Adaptation) int {
		return cmp.Or(strings.Compare(a.Key, b.Key), strings.Compare(a.Limit, b.Limit))
	})
	return out
}

// adaptiveCache is the process's copy of the adaptive hash (snapCache),
// re-read only when the hash's change counter moved; a change this process
// makes goes into it at once (put).
type adaptiveCache struct{ *snapCache[adaptSnapshot] }

type adaptSnapshot struct {
	ver     int64 // the hash's change counter when read (-1: unknown)
	entries map[string]adaptEntry
}

func newAdaptiveCache(l *Redis, refresh time.Duration) *adaptiveCache {
	return &adaptiveCache{newSnapCache(refresh,
		func(ctx context.Context, prev *adaptSnapshot) (*adaptSnapshot, error) { return l.loadAdapt(ctx, prev) },
		func(ctx context.Context, err error) {
			l.warn.adaptRefresh.warn(ctx, l.logger(), "throttle: adaptive state refresh failed: keeping the last state read",
				"key", l.AdaptKey(), "err", err)
		})}
}

// loadAdapt reads the adaptive hash when its change counter moved since s.
func (l *Redis) loadAdapt(ctx context.Context, s *adaptSnapshot) (*adaptSnapshot, error) {
	v, err := l.rdb.HGet(ctx, l.AdaptKey(), adaptVersionField).Int64()
	if errors.Is(err, redis.Nil) {
		v, err = 0, nil
	}
	if err != nil {
		return nil, err
	}
	if s != nil && s.ver == v {
		return s, nil
	}
	if v == 0 {
		return &adaptSnapshot{ver: 0, entries: map[string]adaptEntry{}}, nil
	}
	raw, err := l.rdb.HGetAll(ctx, l.AdaptKey()).Result()
	if err != nil {
		return nil, err
	}
	entries, err := parseAdaptHash(raw)
	if err != nil {
		return nil, err
	}
	ver, _ := strconv.ParseInt(raw[adaptVersionField], 10, 64)
	return &adaptSnapshot{ver: ver, entries: entries}, nil
}

// put stores a key's entry this process just wrote (no limits: removed).
// The copy's counter becomes unknown, so the next refresh re-reads.
func (c *adaptiveCache) put(key string, e adaptEntry) {
	c.update(func(old *adaptSnapshot) *adaptSnapshot {
		n := &adaptSnapshot{ver: -1, entries: map[string]adaptEntry{}}
		if old != nil {
			maps.Copy(n.entries, old.entries)
		}
		if len(e.limits) == 0 {
			delete(n.entries, key)
		} else {
			n.entries[key] = e
		}
		return n
	})
}

// apply returns reqs with adapted rates applied (effective = the lower of
// the request's rate, overrides applied, and the adapted rate), copying
// only when one applies.
func (c *adaptiveCache) apply(ctx context.Context, reqs []Request) []Request {
	s := c.current(ctx)
	if s == nil || len(s.entries) == 0 {
		return reqs
	}
	var out []Request
	for i, r := range reqs {
		e, ok := s.entries[r.Key]
		if !ok || !adaptable(r.Limit.Algorithm) {
			continue
		}
		a, ok := e.limits[r.Limit.Name]
		if !ok {
			continue
		}
		lim := a.Apply(r.Limit, r.cost())
		if lim == r.Limit {
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
