package throttle

import (
	"fmt"
	"strconv"
	"strings"
	"time"
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
	DefaultAdaptQuiet = 3 * time.Second
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
	// Above is the ceiling before this one when this one is in doubt (0:
	// not in doubt): it was set by a single throttle at a rate a deep cut
	// had chosen, with no rate known to hold. A stray throttle (a send that
	// reached the provider early, a provider's hiccup) looks the same as a
	// provider slower than a quarter of the rate it refused; if increases
	// reach this ceiling without a throttle, it was the stray one, and the
	// search goes on up to Above, once: see Doubt.
	Above float64 `json:"above,omitempty"`
	// Doubt is a ceiling in doubt that increases reached without a
	// throttle, while the search probes above it (0: none). It is refuted
	// once a rate above it holds for a quiet period; a throttle before
	// that proves it after all: the ceiling goes back to it, for the price
	// of one throttle.
	Doubt float64 `json:"doubt,omitempty"`
	// Blind reports that the rate was set by a deep cut (Decrease) with no
	// rate known to hold, and has not changed since.
	Blind bool `json:"blind,omitempty"`
	// Storm reports a throttle, after the last decrease's reaction time,
	// with no send through since that decrease and no increase: the
	// provider refused everything (an outage, a storm of 429s), which says
	// nothing about the rate; the scope's pause, which grows while nothing
	// gets through, is the answer. It lowers nothing more. The next quiet
	// period undoes the decrease (RunFrom) instead of raising the rate one
	// step.
	Storm bool `json:"storm,omitempty"`
	// RunFrom, RunCeil, RunGood and RunThrottled are the rate, ceiling,
	// good rate and last counted throttle before the last decrease (0 and
	// zero: none), what a storm after it restores. RunFrom 0: nothing to
	// restore (the decrease came right after a restore: see Restored).
	RunFrom      float64   `json:"rfrom,omitempty"`
	RunCeil      float64   `json:"rceil,omitempty"`
	RunGood      float64   `json:"rgood,omitempty"`
	RunThrottled time.Time `json:"rthr,omitzero"`
	// Restored reports a rate restored after a storm that has not held for
	// a quiet period yet. A throttle then was no storm's: the decrease it
	// undid was right (a provider slower than the scope's pause, whose
	// refusals before its next free slot looked like a storm), and the next
	// decrease is not undone again, so the two never alternate.
	Restored bool `json:"restored,omitempty"`
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
	ReasonRestored  = "restored"  // a storm is over: the rate before it is back
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
// on the limiter's clock. It returns the new state and whether the state
// must be written. A throttle does not count when the send started before
// the last decrease (it was paced at the old rate) or came within the
// reaction time of it. Nor does it lower the rate when nothing shows that
// the rate is the cause: no send went through at the rate now in force
// and the rate was not raised since the last decrease (a raise needs sends
// through for a quiet period). The provider refuses everything then; the
// state is marked a storm (written once) and the next quiet period
// restores the rate before that decrease (up). A fresh state (the
// configured rate was in force) always counts.
func (o AdaptOptions) down(a Adaptation, cfg float64, now, sent time.Time, code int, reason string) (Adaptation, bool) {
	if a.Rate <= 0 {
		a = Adaptation{Rate: cfg}
	}
	if a.Storm && !a.okSince() {
		return a, false // the storm goes on: nothing went through since it began
	}
	r := a.Effective(cfg)
	if !a.Decreased.IsZero() {
		if !sent.IsZero() && sent.Before(a.Decreased) {
			return a, false
		}
		if now.Sub(a.Decreased) < max(o.Reaction, perSecondInterval(r)) {
			return a, false
		}
		if !a.Changed.After(a.Decreased) && !a.okSince() {
			// A storm: the decrease is undone at once, so that the sends
			// the scope's pauses send back are planned at the rate of
			// before it, not at a quarter of it for minutes after the
			// storm (issue 19: 0.24 of the cap in the 30s after a 30s
			// storm). The pauses, which grow while nothing goes through,
			// hold the sends back meanwhile.
			if a.RunFrom > 0 {
				a = a.restore(cfg, now)
			}
			a.Storm = true
			return a, true
		}
	}
	// What a storm after this decrease restores: the state before it,
	// unless this throttle disproved a restore.
	a.RunFrom, a.RunCeil, a.RunGood, a.RunThrottled = 0, 0, 0, time.Time{}
	if !a.Restored {
		a.RunFrom = r
		if a.Ceiling > 0 && !a.ceilingExpired(now) {
			a.RunCeil, a.RunGood, a.RunThrottled = a.Ceiling, a.Good, a.Throttled
		}
	}
	a.Storm, a.Restored = false, false
	switch {
	case a.Ceiling <= 0 || a.ceilingExpired(now):
		a.Ceiling, a.Above = r, 0
	case a.Doubt > 0 && a.Doubt < r:
		// The probe above a ceiling in doubt failed before any rate above
		// it held: it was the provider's rate after all.
		a.Ceiling, a.Above = a.Doubt, 0
	case r < a.Ceiling:
		// A throttle at a rate a deep cut chose, none having held since,
		// may be a stray one: the ceiling above stays in reserve.
		a.Above = 0
		if a.Blind && a.Good <= 0 {
			a.Above = a.Ceiling
		}
		a.Ceiling = r
	default:
		a.Above = 0 // throttled again at or above it: no longer in doubt
	}
	a.Blind, a.Doubt = false, 0
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
		n, a.Good, a.Blind = r*o.Decrease, 0, true
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
// configured rate with nothing to remember (the state is removed). After a
// storm (Adaptation.Storm) the quiet period restores the rate, ceiling and
// good rate before the storm's decrease instead, and the rate stays
// Restored until the next quiet period.
func (o AdaptOptions) up(a Adaptation, cfg float64, now time.Time) (next Adaptation, changed, remove bool) {
	if a.Rate <= 0 {
		return a, false, false
	}
	if !a.okSince() || now.Sub(a.OK) < o.Quiet {
		return a, false, false
	}
	r := a.Effective(cfg)
	if a.Storm && a.RunFrom > 0 {
		return a.restore(cfg, now), true, false
	}
	// A storm with nothing to restore, or a restored rate that held: on as
	// usual, and the state is written even if the rate stays.
	flags := a.Storm || a.Restored
	a.Storm, a.Restored = false, false
	if a.ceilingExpired(now) {
		a.Ceiling, a.Good, a.Above, a.Doubt = 0, 0, 0, 0
	}
	g := max(a.Good, r) // r held for a quiet period
	if a.Doubt > 0 && g > a.Doubt {
		a.Doubt = 0 // a rate above it held: it was a stray throttle
	}
	if a.Above > a.Ceiling && a.Ceiling > 0 && a.Ceiling-g <= o.Margin*a.Ceiling {
		// The ceiling in doubt was reached without a throttle: the search
		// goes on under the ceiling before it, once (Doubt).
		a.Ceiling, a.Above, a.Doubt = a.Above, 0, a.Ceiling
	}
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
		return a, flags, false
	}
	a.Previous, a.Rate, a.Good, a.Configured, a.Blind = r, n, g, cfg, false
	a.Changed, a.Code, a.Reason = now, 0, ReasonQuiet
	return a, true, false
}

// restore undoes the decrease a storm followed, at now: the rate, ceiling
// (with its lifetime) and good rate before it are back, with no ceiling in
// doubt, and the rate is Restored until it holds for a quiet period. Back
// at the configured rate with no ceiling under it, the state stays (at
// cfg, so nothing is lowered) until then: a throttle of the restored rate
// is not undone again.
func (a Adaptation) restore(cfg float64, now time.Time) Adaptation {
	r := a.Effective(cfg)
	a.Previous, a.Rate, a.Configured = r, max(a.RunFrom, r), cfg
	a.Ceiling, a.Good, a.Throttled = a.RunCeil, a.RunGood, a.RunThrottled
	a.Above, a.Doubt, a.Blind = 0, 0, false
	a.RunFrom, a.RunCeil, a.RunGood, a.RunThrottled = 0, 0, 0, time.Time{}
	a.Storm, a.Restored = false, true
	a.Changed, a.Code, a.Reason = now, 0, ReasonRestored
	if a.Rate >= cfg && (a.Ceiling <= 0 || a.Ceiling > cfg) {
		a.Rate, a.Reason = cfg, ReasonRecovered
	}
	return a
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
