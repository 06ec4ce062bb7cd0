package limitview

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/throttle"
)

// scopeAccount is the pause scope of a provider account (channels'
// ScopeAccount): one account carries every sender of its channel, so its
// pause holds every key of the channel.
const scopeAccount = "account"

// Holds reports whether pause p (a throttle.PauseKey,
// "<channel>:paused:<scope>[:<id>]") holds back the sends planned on the
// limiter key key ("<channel>:<resource>:<identifier>"): p is of key's
// channel and covers the whole channel (no id: `sluice channels pause`, a
// WhatsApp app pause) or its account, or its id is the key's identifier or
// a leading part of it (the sender paused holds "sms:sender:<sender>" and
// every pair "whatsapp:pair:<sender>:<to>"). A pause of a narrower scope
// (one pair) does not hold a key that covers more (the sender's).
func Holds(p, key string) bool {
	pch, rest, ok := strings.Cut(p, ":"+throttle.PauseName+":")
	kch, kres, _ := strings.Cut(key, ":")
	if !ok || rules.ChannelOf(pch) != rules.ChannelOf(kch) || strings.Contains(pch, ":") {
		return false
	}
	scope, id, _ := strings.Cut(rest, ":")
	if id == "" || scope == scopeAccount {
		return true
	}
	if pch != kch {
		return false // a number's pause (spread_by) holds its number's keys only
	}
	_, ident, _ := strings.Cut(kres, ":")
	return ident == id || strings.HasPrefix(ident, id+":")
}

// HolderKeys returns the keys (throttle.PauseKey) of the pauses of scopes
// that would hold the sends planned on the limiter key key (Holds), so
// that they can be read by name (throttle.Redis.PausesOf) instead of
// listing every pause. scopes maps a scope to the template of its id, as
// worker.Channel.PauseScopes does ("" for a scope that covers the whole
// channel: its pauses have no id). For each scope, in scopes' sorted
// order, they are the key with no id ("whatsapp:paused:account"), then,
// for a scope with an id but the account's, the key of each leading part
// of key's identifier ("whatsapp:paused:pair:1065" and
// "whatsapp:paused:pair:1065:+15550100" for
// "whatsapp:pair:1065:+15550100"); none is repeated. Each key returned
// holds key. Every pause of scopes that holds key is among them but one of
// the account with an id ("sms:paused:account:AC…"): it holds every key of
// its channel whatever its id, which key does not name, so the caller adds
// the account's key it knows.
func HolderKeys(key string, scopes map[string]string) []string {
	ch, res, _ := strings.Cut(key, ":")
	_, ident, _ := strings.Cut(res, ":")
	var ids []string
	for i := range len(ident) {
		if ident[i] == ':' && i > 0 {
			ids = append(ids, ident[:i])
		}
	}
	if ident != "" {
		ids = append(ids, ident)
	}
	var out []string
	for _, s := range slices.Sorted(maps.Keys(scopes)) {
		out = append(out, throttle.PauseKey(rules.ChannelOf(ch), s, ""))
		if scopes[s] == "" || s == scopeAccount {
			continue
		}
		for _, id := range ids {
			// A spread key's ("whatsapp/1065:number:1065") id pauses share
			// its scope (worker.Channel.SpreadBy).
			out = append(out, throttle.PauseKey(ch, s, id))
		}
	}
	return out
}

// HoldersOf returns the pauses among all that hold key's sends (Holds),
// in all's order.
func HoldersOf(key string, all []throttle.Paused) []throttle.Paused {
	var out []throttle.Paused
	for _, p := range all {
		if Holds(p.Key, key) {
			out = append(out, p)
		}
	}
	return out
}

// Drain is when a backlog of planned sends is expected to have gone: its
// plan's last instant (throttle.Backlog.Drains) corrected for what the
// plan did not see. A pause longer than throttle.MaxPlannedPause is not
// planned past, and sends planned before an adaptive limit lowered the
// rate keep their earlier instants; the sends go no earlier than the
// pause's end and no faster than the paced rate in force.
type Drain struct {
	// At is the estimate (the limiter's clock); zero when Unknown is set
	// or nothing is planned.
	At time.Time
	// Planned is when the plan has the last send due (Backlog.Drains).
	Planned time.Time
	// HeldBy and HeldUntil are the pause that holds the sends longest (a
	// throttle.PauseKey) and when it ends; "" and zero when none holds
	// them past now.
	HeldBy    string
	HeldUntil time.Time
	// Sends is how many sends are planned (Backlog.Planned), Rate the pace
	// the estimate assumes, in sends per second (the paced rate, adaptive
	// limits applied; zero when unknown).
	Sends int64
	Rate  float64
	// Unknown says why no time can be given ("sms:paused:channel: paused until
	// resumed"); "" when At is the estimate.
	Unknown string
}

// EstimateDrain is when the n sends of a backlog planned to drain at
// planned go out (Drain), now being the limiter's clock, rate the pace in
// sends per second (<= 0: unknown, the plan's pace is taken) and holders
// the pauses that hold them (HoldersOf). A pause with no end of its own
// (longer than Indefinitely/2) makes the time Unknown. With no pause and
// the plan's pace the estimate is planned.
func EstimateDrain(now time.Time, n int64, planned time.Time, rate float64, holders []throttle.Paused) Drain {
	d := Drain{Planned: planned, Sends: max(n, 0), Rate: max(rate, 0)}
	if n <= 0 {
		return d
	}
	start := now
	for _, p := range holders {
		if !p.Until.After(now) {
			continue // ended
		}
		if p.Until.Sub(now) > Indefinitely/2 {
			d.HeldBy, d.HeldUntil = p.Key, time.Time{}
			d.Unknown = p.Key + ": paused until resumed"
			return d
		}
		if p.Until.After(d.HeldUntil) {
			d.HeldBy, d.HeldUntil = p.Key, p.Until
		}
	}
	if d.HeldUntil.After(start) {
		start = d.HeldUntil
	}
	d.At = laterOf(planned, start)
	if rate > 0 {
		// The first send at start, the others a pace apart. Less than one
		// pace later than the plan is the plan's own timing (its sends
		// were planned a moment ago, or wait for their whole second).
		pace := time.Duration(float64(time.Second) / rate)
		if at := start.Add(time.Duration(n-1) * pace); at.Sub(d.At) >= pace {
			d.At = at
		}
	}
	return d
}

// Why says what moved the estimate from the plan, for a person: "held by
// sms:paused:channel until 15:56:00Z, then 5 sends at 1/s", "20 sends at
// 0.25/s from now" (a pace lowered since the plan, or sends overdue that
// are still waiting); "" when nothing did.
func (d Drain) Why() string {
	switch {
	case d.Unknown != "":
		return d.Unknown
	case d.At.IsZero() || !d.At.After(d.Planned):
		return ""
	case !d.HeldUntil.IsZero():
		s := "held by " + d.HeldBy + " until " + d.HeldUntil.UTC().Format("15:04:05Z")
		if d.Rate > 0 {
			s += fmt.Sprintf(", then %s at %s", sends(d.Sends), throttle.FormatPerSecond(d.Rate))
		}
		return s
	case d.Rate > 0:
		return fmt.Sprintf("%s at %s from now", sends(d.Sends), throttle.FormatPerSecond(d.Rate))
	}
	return ""
}

func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// sends renders a count of sends: "1 send", "5 sends".
func sends(n int64) string {
	if n == 1 {
		return "1 send"
	}
	return fmt.Sprintf("%d sends", n)
}
