package throttle

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Adaptive limits: a provider's throttle answer to a send lowers the rate
// of the send's limits that the throttle concerns (AdaptDown), and sends
// that go through without one raise it again (AdaptUp), up to the
// configured rate. The state is shared by every process through one Redis
// hash and applied like a runtime override: a limit's effective rate is
// the lower of its configured (or overridden) rate and its adapted rate.
// See docs/adaptive.md for the algorithm and why it is shaped so.

// Defaults of AdaptOptions, read by config.Default too.
const (
	// DefaultAdaptDecrease is AdaptOptions.Decrease's default: a throttle
	// cuts the rate to a quarter. Each throttle costs more than the send
	// it refuses (the scope's pause doubles), so the first cut is deep and
	// the way back up is a bisection (see AdaptOptions).
	DefaultAdaptDecrease = 0.25
	// DefaultAdaptFloor is AdaptOptions.Floor's default: never below 1% of
	// the configured rate (a limit set 100 times too high still finds the
	// provider's rate).
	DefaultAdaptFloor = 0.01
	// DefaultAdaptIncrease is AdaptOptions.Increase's default: at most 10%
	// of the configured rate more per quiet period.
	DefaultAdaptIncrease = 0.1
	// DefaultAdaptQuiet is AdaptOptions.Quiet's default.
	DefaultAdaptQuiet = 5 * time.Second
	// DefaultAdaptMargin is AdaptOptions.Margin's default.
	DefaultAdaptMargin = 0.1
	// DefaultAdaptCeilingTTL is AdaptOptions.CeilingTTL's default.
	DefaultAdaptCeilingTTL = time.Hour
	// DefaultAdaptReaction is AdaptOptions.Reaction's default: twice the
	// longest time a process applies a rate it read before a change
	// (DefaultOverrideRefresh).
	DefaultAdaptReaction = time.Second
)

// AdaptOptions are the adaptive algorithm's parameters, per channel. Zero
// fields take the defaults above (WithDefaults).
type AdaptOptions struct {
	// Disabled turns adaptation off: AdaptDown and AdaptUp change nothing.
	Disabled bool
	// Decrease is the factor a counted throttle multiplies the effective
	// rate by (0 < Decrease < 1), unless a rate that held for a quiet
	// period since is higher: then the rate falls back to that one.
	Decrease float64
	// Floor is the least effective rate, as a share of the configured rate
	// (0 < Floor <= 1).
	Floor float64
	// Increase is the most a quiet period adds, as a share of the
	// configured rate (0 < Increase <= 1).
	Increase float64
	// Quiet is how long sends must go through without a throttle, from the
	// last change, before the rate is raised one step (>= 1s).
	Quiet time.Duration
	// Margin ends the search for the provider's rate: while the lowest rate
	// throttled (the ceiling) is more than Margin above the highest rate
	// that held, an increase goes half way between them (a bisection);
	// once within Margin the rate stays at the one that held
	// (0 <= Margin < 1).
	Margin float64
	// CeilingTTL is how long the ceiling is remembered after the last
	// throttle: after it, increases go on up to the configured rate, so a
	// provider that raised its limit is found again (>= Quiet).
	CeilingTTL time.Duration
	// Reaction is the least time between two counted throttles of a limit
	// (at least one interval of its new rate is added): answers to sends
	// that were paced at the old rate, or by a process that had not yet
	// read the decrease, are one congestion signal, not several (>= 0).
	Reaction time.Duration
}

// WithDefaults returns o with its zero fields set to the defaults.
func (o AdaptOptions) WithDefaults() AdaptOptions {
	if o.Decrease == 0 {
		o.Decrease = DefaultAdaptDecrease
	}
	if o.Floor == 0 {
		o.Floor = DefaultAdaptFloor
	}
	if o.Increase == 0 {
		o.Increase = DefaultAdaptIncrease
	}
	if o.Quiet == 0 {
		o.Quiet = DefaultAdaptQuiet
	}
	if o.Margin == 0 {
		o.Margin = DefaultAdaptMargin
	}
	if o.CeilingTTL == 0 {
		o.CeilingTTL = DefaultAdaptCeilingTTL
	}
	if o.Reaction == 0 {
		o.Reaction = DefaultAdaptReaction
	}
	return o
}

// Validate reports the first field of o (with defaults applied) that is
// out of range, named as configuration files spell it: "decrease: want
// more than 0 and less than 1, got 1.5".
func (o AdaptOptions) Validate() error {
	o = o.WithDefaults()
	bad := func(field, want string, got any) error {
		return fmt.Errorf("%s: want %s, got %v", field, want, got)
	}
	switch {
	case !(o.Decrease > 0 && o.Decrease < 1):
		return bad("decrease", "more than 0 and less than 1", o.Decrease)
	case !(o.Floor > 0 && o.Floor <= 1):
		return bad("floor", "more than 0 and at most 1", o.Floor)
	case !(o.Increase > 0 && o.Increase <= 1):
		return bad("increase", "more than 0 and at most 1", o.Increase)
	case o.Quiet < time.Second:
		return bad("quiet", "at least 1s", o.Quiet)
	case !(o.Margin >= 0 && o.Margin < 1):
		return bad("margin", "0 or more and less than 1", o.Margin)
	case o.CeilingTTL < o.Quiet:
		return bad("ceiling_ttl", "at least quiet ("+o.Quiet.String()+")", o.CeilingTTL)
	case o.Reaction < 0:
		return bad("reaction", "0 or more", o.Reaction)
	}
	return nil
}

// Adaptation is one limit's adapted state. Rates are in units per second
// (a GCRA or windowed limit's Rate, as a float: 5/s is 5, 1/6s 0.1667);
// times are the limiter's clock.
type Adaptation struct {
	Key   string `json:"-"` // the limiter key
	Limit string `json:"-"` // the limit's name
	// Configured is the configured (or overridden) rate at the last change.
	Configured float64 `json:"cfg"`
	// Rate is the adapted rate; the effective rate is the lower of it and
	// the configured one.
	Rate float64 `json:"rate"`
	// Previous is the rate before the last change.
	Previous float64 `json:"prev"`
	// Ceiling is the lowest rate throttled since the last CeilingTTL of
	// quiet (0: none).
	Ceiling float64 `json:"ceil,omitempty"`
	// Good is the highest rate that held for a quiet period under the
	// ceiling (0: none yet).
	Good float64 `json:"good,omitempty"`
	// Throttled is when the last counted throttle came, Decreased when it
	// lowered the rate, Changed when the state last changed, OK when a
	// worker first saw a send go through at the rate set then (zero: none
	// yet): the quiet period counts from it, so a rate is raised only after
	// sends went through at it for Quiet, not merely after a pause.
	Throttled time.Time `json:"thr"`
	Decreased time.Time `json:"dec"`
	Changed   time.Time `json:"chg"`
	OK        time.Time `json:"ok,omitzero"`
	// TTL is the ceiling's lifetime after Throttled (AdaptOptions.CeilingTTL).
	TTL time.Duration `json:"ttl"`
	// Code and Reason are the last change's: the provider's error code for
	// a decrease; Reason is ReasonThrottled, ReasonQuiet or the provider's
	// message.
	Code   int    `json:"code,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Reasons of adaptive changes, in AdaptChange.Reason and limits.adapted
// events.
const (
	ReasonThrottled = "throttled" // a provider throttle lowered the rate
	ReasonQuiet     = "quiet"     // a quiet period raised it
	ReasonRecovered = "recovered" // it is back at the configured rate
	ReasonExpired   = "expired"   // no traffic for CeilingTTL: forgotten
)

// Effective is the effective rate for a configured rate cfg (units/s).
func (a Adaptation) Effective(cfg float64) float64 { return min(a.Rate, cfg) }

// Apply returns l (configured, overrides applied) at its effective rate,
// as the limiter applies it to a request of the given cost. Limits
// adaptation does not lower are returned as they are.
func (a Adaptation) Apply(l Limit, cost int64) Limit {
	cfg := PerSecondOf(l.Rate)
	eff := a.Effective(cfg)
	if !adaptable(l.Algorithm) || !(eff > 0 && eff < cfg) {
		return l
	}
	return adaptLimit(l, eff, cost)
}

// ceilingExpired reports whether the ceiling's memory has run out at now.
func (a Adaptation) ceilingExpired(now time.Time) bool {
	return !a.Throttled.IsZero() && now.Sub(a.Throttled) >= a.TTL
}

// down applies a throttle of a send at now: cfg is the limit's configured
// rate (units/s), sent when the throttled send started (zero: unknown),
// on the limiter's clock. It returns the new state and whether the
// throttle counted (the state must be written). A throttle does not count
// when the send started before the last decrease (it was paced at the old
// rate) or came within the reaction time of it.
func (o AdaptOptions) down(a Adaptation, cfg float64, now, sent time.Time, code int, reason string) (Adaptation, bool) {
	if a.Rate <= 0 {
		a = Adaptation{Rate: cfg}
	}
	r := a.Effective(cfg)
	if !a.Decreased.IsZero() {
		if !sent.IsZero() && sent.Before(a.Decreased) {
			return a, false
		}
		if now.Sub(a.Decreased) < max(o.Reaction, perSecondInterval(r)) {
			return a, false
		}
	}
	if a.Ceiling <= 0 || a.ceilingExpired(now) || r < a.Ceiling {
		a.Ceiling = r
	}
	var n float64
	switch {
	case a.Good > 0 && a.Good < r && !a.ceilingExpired(now):
		n = a.Good // a probe above the rate that held: back to it
	case a.Good >= r:
		// The rate that held was throttled: a little under it first, as
		// jitter can do that; if the provider lowered its rate, the next
		// throttle (with no rate known to hold) cuts deep.
		n, a.Good = r*(1-o.Margin), 0
	default:
		n, a.Good = r*o.Decrease, 0
	}
	n = min(max(n, o.Floor*cfg), cfg)
	a.Previous, a.Rate, a.Configured = r, n, cfg
	a.Throttled, a.Decreased, a.Changed = now, now, now
	if len(reason) > maxPauseReason {
		reason = strings.ToValidUTF8(reason[:maxPauseReason], "")
	}
	a.TTL, a.Code, a.Reason = o.CeilingTTL, code, reason
	if a.Reason == "" {
		a.Reason = ReasonThrottled
	}
	return a, true
}

// up raises the rate after a quiet period at now: it returns the new
// state, whether it changed, and whether the limit is back at its
// configured rate with nothing to remember (the state is removed).
func (o AdaptOptions) up(a Adaptation, cfg float64, now time.Time) (next Adaptation, changed, remove bool) {
	if a.Rate <= 0 {
		return a, false, false
	}
	if !a.okSince() || now.Sub(a.OK) < o.Quiet {
		return a, false, false
	}
	r := a.Effective(cfg)
	if a.ceilingExpired(now) {
		a.Ceiling, a.Good = 0, 0
	}
	g := max(a.Good, r) // r held for a quiet period
	target := cfg
	if a.Ceiling > 0 && a.Ceiling <= cfg {
		if a.Ceiling-g <= o.Margin*a.Ceiling {
			target = g // close enough: stay below the provider's rate
		} else {
			target = (g + a.Ceiling) / 2 // bisection
		}
	}
	n := min(r+o.Increase*cfg, target, cfg)
	if n >= cfg && (a.Ceiling <= 0 || a.Ceiling > cfg) {
		a.Previous, a.Rate, a.Changed, a.Reason, a.Code = r, cfg, now, ReasonRecovered, 0
		return a, true, true
	}
	if n <= r {
		return a, false, false
	}
	a.Previous, a.Rate, a.Good, a.Configured = r, n, g, cfg
	a.Changed, a.Code, a.Reason = now, 0, ReasonQuiet
	return a, true, false
}

// okSince reports whether a send went through at the current rate.
func (a Adaptation) okSince() bool {
	return !a.OK.IsZero() && !a.OK.Before(a.Changed) && !a.OK.Before(a.Throttled)
}

// markOK records the first send that went through at the current rate:
// one that went through within the reaction time of the last change may
// have been paced before it, and does not count.
func (o AdaptOptions) markOK(a Adaptation, now time.Time) (Adaptation, bool) {
	if a.Rate <= 0 || a.okSince() || now.Sub(a.Changed) < o.Reaction {
		return a, false
	}
	a.OK = now
	return a, true
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// perSecondInterval is the spacing of a rate of r units a second.
func perSecondInterval(r float64) time.Duration {
	if r <= 0 {
		return 0
	}
	return time.Duration(float64(time.Second) / r)
}

// adaptable reports whether the algorithm has a rate that adaptation
// lowers: GCRA and the windowed algorithms but Distinct (a count of
// recipients, not a rate of sends).
func adaptable(a Algorithm) bool {
	return a == GCRA || a == FixedWindow || a == SlidingWindowLog || a == SlidingWindowCounter
}

// PerSecondOf is a rate in units per second: 80/s is 80, 1/6s 0.1667.
func PerSecondOf(r Rate) float64 {
	if r.Limit <= 0 || r.Period <= 0 {
		return 0
	}
	return float64(r.Limit) / r.Period.Seconds()
}

// adaptLimit returns l at the effective rate eff (units/s, below l's):
// GCRA keeps its count and burst and stretches its period (1/s at 0.5
// becomes 1/2s); a windowed limit keeps its window and admits fewer,
// never fewer than cost.
func adaptLimit(l Limit, eff float64, cost int64) Limit {
	switch {
	case l.Algorithm == GCRA:
		p := time.Duration(float64(l.Rate.Limit) / eff * float64(time.Second))
		if p > l.Rate.Period {
			l.Rate.Period = min(p, 365*24*time.Hour)
		}
	case l.Algorithm.Windowed():
		n := int64(eff * l.Rate.Period.Seconds())
		l.Rate.Limit = min(l.Rate.Limit, max(n, cost, 1))
	}
	return l
}

// FormatPerSecond renders a rate in units per second for people and
// events: "5/s", "0.9375/s", "0.0001157/s".
func FormatPerSecond(r float64) string {
	return strconv.FormatFloat(r, 'g', 4, 64) + "/s"
}

// AdaptKey is the Redis hash of adaptive state: field = limiter key, value
// = "<version> <JSON of the key's limits by name>".
func (l *Redis) AdaptKey() string { return l.prefix + ":{_adaptive}" }

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
}

// AdaptChange is one adaptive change AdaptDown or AdaptUp made. Rates are
// units per second.
type AdaptChange struct {
	Key, Limit                      string
	Configured, Effective, Previous float64
	Ceiling                         float64 // 0: none
	Code                            int     // the provider's, for a decrease
	Reason                          string  // ReasonThrottled, ReasonQuiet, ReasonRecovered or the provider's message
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
// AdaptOptions.Reaction and AdaptSignal.Sent), each also written to the
// events stream as limits.adapted. Errors are Redis'.
func (l *Redis) AdaptDown(ctx context.Context, o AdaptOptions, sig AdaptSignal, reqs ...Request) ([]AdaptChange, error) {
	if o.Disabled || l.adaptive == nil {
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
			write = true
			if remove {
				delete(next.limits, r.Limit.Name)
			} else {
				next.limits[r.Limit.Name] = n
			}
			if n.Changed.Equal(now) && n.Rate != n.Previous || remove {
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

// adaptiveCache is a process's snapshot of the adaptive hash, re-read
// when stale (OverrideRefresh) and the hash's change counter moved; a
// change this process makes goes into it at once.
type adaptiveCache struct {
	l       *Redis
	refresh time.Duration
	snap    atomic.Pointer[adaptSnapshot]
	loading sync.Mutex
}

type adaptSnapshot struct {
	at      time.Time
	ver     int64 // the hash's change counter when read (-1: unknown)
	entries map[string]adaptEntry
}

func newAdaptiveCache(l *Redis, refresh time.Duration) *adaptiveCache {
	if refresh <= 0 {
		refresh = DefaultOverrideRefresh
	}
	return &adaptiveCache{l: l, refresh: refresh}
}

func (c *adaptiveCache) current(ctx context.Context) *adaptSnapshot {
	s := c.snap.Load()
	if s != nil && time.Since(s.at) < c.refresh {
		return s
	}
	if !c.loading.TryLock() {
		return s
	}
	defer c.loading.Unlock()
	n, err := c.load(ctx, s)
	if err != nil {
		if ctx.Err() == nil {
			c.l.warn.adaptRefresh.warn(ctx, c.l.logger(), "throttle: adaptive state refresh failed: keeping the last state read",
				"key", c.l.AdaptKey(), "err", err)
		}
		if s == nil {
			return nil
		}
		kept := *s
		kept.at = time.Now()
		c.snap.Store(&kept)
		return s
	}
	c.snap.Store(n)
	return n
}

// load reads the hash when its change counter moved since s.
func (c *adaptiveCache) load(ctx context.Context, s *adaptSnapshot) (*adaptSnapshot, error) {
	at := time.Now()
	v, err := c.l.rdb.HGet(ctx, c.l.AdaptKey(), adaptVersionField).Int64()
	if errors.Is(err, redis.Nil) {
		v, err = 0, nil
	}
	if err != nil {
		return nil, err
	}
	if s != nil && s.ver == v {
		kept := *s
		kept.at = at
		return &kept, nil
	}
	if v == 0 {
		return &adaptSnapshot{at: at, ver: 0, entries: map[string]adaptEntry{}}, nil
	}
	raw, err := c.l.rdb.HGetAll(ctx, c.l.AdaptKey()).Result()
	if err != nil {
		return nil, err
	}
	entries, err := parseAdaptHash(raw)
	if err != nil {
		return nil, err
	}
	ver, _ := strconv.ParseInt(raw[adaptVersionField], 10, 64)
	return &adaptSnapshot{at: at, ver: ver, entries: entries}, nil
}

// put stores a key's entry this process just wrote (no limits: removed).
// The snapshot's counter becomes unknown, so the next refresh re-reads.
func (c *adaptiveCache) put(key string, e adaptEntry) {
	c.loading.Lock()
	defer c.loading.Unlock()
	s := c.snap.Load()
	n := &adaptSnapshot{ver: -1, entries: map[string]adaptEntry{}}
	if s != nil {
		n.at = s.at
		for k, v := range s.entries {
			n.entries[k] = v
		}
	}
	if len(e.limits) == 0 {
		delete(n.entries, key)
	} else {
		n.entries[key] = e
	}
	c.snap.Store(n)
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
