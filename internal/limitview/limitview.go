// Package limitview reads what the limiter keeps in Redis into views for
// people: one limiter key's limit (its rule, current decision, override,
// effective rate beside the configured one, backlog and firm slots), the
// scopes paused now, and the events stream. `sluice limits show`,
// `sluice channels status`, `sluice events tail --json` and the /limits/
// dashboard all read through it, so that they agree.
package limitview

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/throttle"
)

// NewMember stands for a member never counted, so the Status of a distinct
// limit says whether a new member would be admitted.
const NewMember = "\x00sluice:new-member"

// KeyOptions tunes ReadKey.
type KeyOptions struct {
	// Member is, for a distinct rule, the member to decide for. Default
	// NewMember.
	Member string
	// Overrides are the stored overrides (throttle.Redis.Overrides). nil
	// reads them; a caller that reads many keys reads them once and passes
	// them (an empty, non-nil map: none).
	Overrides map[string]throttle.Override
	// Adaptations, when not nil, are the adapted limits by key
	// (throttle.Redis.Adaptations grouped by Key), and ReadKey does not
	// read the key's own. nil reads them (throttle.Redis.AdaptationOf).
	Adaptations map[string][]throttle.Adaptation
	// Pauses, when not nil, are the scopes paused now (throttle.Redis.Pauses;
	// an empty, non-nil slice: none), of which ReadKey keeps those that
	// hold the key (HoldersOf). nil reads the key's channel's.
	Pauses []throttle.Paused
}

// Key is one limiter key as a person reads it.
type Key struct {
	// Key is the limiter key without prefix ("whatsapp:number:1065…").
	Key string
	// Matched reports that a configured rule governs the key; the fields
	// below are zero otherwise.
	Matched bool
	// Rule is the configured rule (before any override).
	Rule rules.Rule
	// Decision is the limit's state now (throttle.Redis.Status, nothing
	// taken): remaining units of capacity Limit, Reset, RetryAfter. Status
	// applies overrides and adaptive rates, as the workers do.
	Decision throttle.LimitDecision
	// Now is the limiter's clock at Decision (Redis TIME).
	Now time.Time
	// OverridePattern and Override are the runtime override that applies
	// (`sluice limits set`), nil when none.
	OverridePattern string
	Override        *throttle.Override
	// Limit is the limit in force: the rule's, override and adaptive rate
	// applied.
	Limit throttle.Limit
	// RateLimited reports a limit with a rate (GCRA and the window
	// algorithms): Configured and Effective are then set.
	RateLimited bool
	// Configured is the configured rate, override applied, in units per
	// second; Effective is the rate in force, at most Configured, lower
	// while adaptive limits hold it down.
	Configured, Effective float64
	// Adaptation is the key's adaptive state for this limit; nil when it
	// is at its configured rate.
	Adaptation *throttle.Adaptation
	// Backlog is, for a GCRA limit, its planned sends and when they drain;
	// nil for other algorithms.
	Backlog *throttle.Backlog
	// Paced is, for a GCRA limit of a configured channel, the rate sends
	// are paced at: Effective less the channel's Headroom (a fraction).
	// Zero when the key's scope is no configured channel.
	Paced    float64
	Headroom float64
	// FirmAhead is, for a GCRA limit, how many firm reservations are taken
	// ahead of Now: sends held in workers until their instant (at most the
	// channel's hold ahead). Reset is the instant after the last.
	FirmAhead int64
	// Holders are the pauses that hold the key's planned sends (HoldersOf),
	// read for a GCRA limit only.
	Holders []throttle.Paused
	// Drain is, for a GCRA limit with a backlog, when its planned sends are
	// expected to have gone: Backlog.Drains moved past Holders' ends and to
	// the paced rate in force (EstimateDrain).
	Drain Drain
}

// ReadKey reads key's limit: the configured rule that governs it, its
// decision now for o.Member (nothing taken), the override and adaptive rate
// that apply, and for a GCRA limit its backlog, firm reservations, the
// pauses that hold it and when its backlog is expected to drain. A key
// no rule matches is returned with Matched false and no error. Errors are
// the limiter's (Redis unreachable, a malformed reply).
func ReadKey(ctx context.Context, lim *throttle.Redis, cfg *config.Config, key string, o KeyOptions) (Key, error) {
	k := Key{Key: key}
	r, ok := cfg.MatchRule(key)
	if !ok {
		return k, nil
	}
	k.Matched, k.Rule = true, r
	member := o.Member
	if member == "" {
		member = NewMember
	}
	d, err := lim.Status(ctx, throttle.Request{Key: key, Limit: r.Limit, Cost: r.Cost, Member: member})
	if err != nil {
		return k, err
	}
	if len(d.Limits) != 1 {
		return k, fmt.Errorf("limitview: %s: %d decisions for one request", key, len(d.Limits))
	}
	k.Decision, k.Now = d.Limits[0], d.Now

	overrides := o.Overrides
	if overrides == nil {
		if overrides, err = lim.Overrides(ctx); err != nil {
			return k, err
		}
	}
	k.Limit = r.Limit
	if pattern, ov, ok := throttle.MatchOverride(overrides, key); ok {
		k.OverridePattern, k.Override = pattern, &ov
		k.Limit = ov.Apply(k.Limit)
	}

	switch k.Limit.Algorithm {
	case throttle.GCRA, throttle.FixedWindow, throttle.SlidingWindowLog, throttle.SlidingWindowCounter:
		k.RateLimited = true
		k.Configured = throttle.PerSecondOf(k.Limit.Rate)
		k.Effective = k.Configured
		ads := o.Adaptations[key]
		if o.Adaptations == nil {
			if ads, err = lim.AdaptationOf(ctx, key); err != nil {
				return k, err
			}
		}
		for _, a := range ads {
			if a.Limit != k.Limit.Name {
				continue
			}
			k.Adaptation = &a
			k.Effective = a.Effective(k.Configured)
			k.Limit = a.Apply(k.Limit, max(r.Cost, 1))
			break
		}
	}

	if k.Limit.Algorithm == throttle.GCRA {
		b, err := lim.Backlog(ctx, key)
		if err != nil {
			return k, err
		}
		if cc := cfg.Channels[rules.ChannelOf(key)]; cc != nil {
			k.Headroom = cc.Headroom
			k.Paced = throttle.PerSecondOf(k.Limit.Rate) * (1 - cc.Headroom)
		}
		if iv := k.Limit.Rate.Interval(); b.Planned == 0 && iv >= time.Second {
			// A pair beside its number keeps no backlog (throttle.PlanTail):
			// a tail still ahead says a send is planned, at the latest an
			// interval before it.
			tail, err := lim.PlanTail(ctx, key)
			if err != nil {
				return k, err
			}
			// (a place given back leaves the tail at it: a tail more than an
			// interval ahead may hold no send)
			last := tail.Add(-time.Duration(float64(iv) * float64(max(r.Cost, 1)) / (1 - k.Headroom)))
			if last.After(k.Now) {
				b = throttle.Backlog{Planned: 1, Next: last, Drains: last}
			}
		}
		k.Backlog = &b
		pace := k.Paced
		if pace <= 0 {
			pace = throttle.PerSecondOf(k.Limit.Rate)
		}
		if ahead := k.Decision.Reset.Sub(k.Now); ahead > 0 && pace > 0 {
			k.FirmAhead = int64(math.Floor(ahead.Seconds() * pace))
		}
		pauses := o.Pauses
		if pauses == nil {
			// The key's scope's pauses and, for a spread key
			// ("whatsapp/1065:…"), its channel's.
			scope, _, _ := strings.Cut(key, ":")
			for _, sc := range slices.Compact([]string{scope, rules.ChannelOf(key)}) {
				ps, err := lim.Pauses(ctx, sc+":"+throttle.PauseName+":")
				if err != nil {
					return k, err
				}
				pauses = append(pauses, ps...)
			}
		}
		k.Holders = HoldersOf(key, pauses)
		k.Drain = EstimateDrain(k.Now, b.Planned, b.Drains, pace, k.Holders)
	}
	return k, nil
}

// AdaptedWhy says why and since when a limit is adapted: "adapted, last
// lowered after provider code 131056 at 2026-…Z; ceiling 40/s".
func AdaptedWhy(a throttle.Adaptation) string {
	s := "adapted"
	if a.Code != 0 {
		s += fmt.Sprintf(", last lowered after provider code %d at %s", a.Code, a.Decreased.UTC().Format(time.RFC3339))
	} else if !a.Decreased.IsZero() {
		s += ", last lowered at " + a.Decreased.UTC().Format(time.RFC3339)
	}
	if a.Ceiling > 0 {
		s += "; ceiling " + throttle.FormatPerSecond(a.Ceiling)
	}
	if a.Reason == throttle.ReasonQuiet {
		s += "; raised after a quiet period at " + a.Changed.UTC().Format(time.RFC3339)
	}
	return s
}

// ByKey groups adaptations by their limiter key, for KeyOptions.Adaptations.
func ByKey(all []throttle.Adaptation) map[string][]throttle.Adaptation {
	out := make(map[string][]throttle.Adaptation, len(all))
	for _, a := range all {
		out[a.Key] = append(out[a.Key], a)
	}
	return out
}
