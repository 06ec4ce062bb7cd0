package rules

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-dev/sluice/throttle"
)

// Set is one channel's rules, compiled: the step from a task's fields to
// the throttle.Requests of its send, and the match from a limiter key or
// pattern back to its rule. Safe for concurrent use.
type Set struct {
	channel string
	rules   []compiled
}

type compiled struct {
	Rule
	key, member Template
}

// Compile checks every rule of channel (Rule.Check, with fields as for
// ParseKey) and returns the set, each key template spread by spread
// (Template.SpreadBy; "" for none), which every GCRA rule's key must name. The error names the first bad rule by
// its index and field: `rules[1]: key: key "sms:x:{to": "{" without "}"`.
func Compile(channel, spread string, fields []string, rs []Rule) (*Set, error) {
	s := &Set{channel: channel, rules: make([]compiled, len(rs))}
	for i, r := range rs {
		k, m, err := r.compile(channel, fields)
		if err != nil {
			return nil, fmt.Errorf("rules[%d]: %w", i, err)
		}
		if spread != "" && r.Limit.Algorithm == throttle.GCRA && !slices.Contains(k.Fields(), spread) {
			// A send's GCRA limits are decided in one script: one scope.
			return nil, fmt.Errorf("rules[%d]: key: key %q does not name {%s}: with spread_by %s every gcra limit's key must, so that a send's paced limits share one scope", i, r.Key, spread, spread)
		}
		s.rules[i] = compiled{r, k.SpreadBy(spread), m}
	}
	return s, nil
}

// Requests renders the set's rules for a task: one throttle.Request per
// rule whose key (and member, for Distinct) renders from fields, costing
// Rule.Cost or, with Rule.CostField, that field's value (see there for a
// cost over the limit's capacity); a rule whose template names an empty
// field does not apply to the task.
func (s *Set) Requests(fields map[string]string) []throttle.Request {
	reqs := make([]throttle.Request, 0, len(s.rules))
	for _, r := range s.rules {
		key, ok := r.key.Render(fields)
		if !ok {
			continue
		}
		req := r.request(key, fields)
		if r.Limit.Algorithm == throttle.Distinct {
			if req.Member, ok = r.member.Render(fields); !ok {
				continue
			}
		}
		reqs = append(reqs, req)
	}
	return reqs
}

// Rules returns the set's rules in order.
func (s *Set) Rules() []Rule {
	out := make([]Rule, len(s.rules))
	for i, r := range s.rules {
		out[i] = r.Rule
	}
	return out
}

// Match returns the first rule whose key template, spread by spread
// (Template.SpreadBy), renders to key (Template.Match).
func Match(rs []Rule, spread, key string) (Rule, bool) {
	for _, r := range rs {
		if t, err := ParseKey(scopeOf(r.Key), r.Key, nil); err == nil && t.SpreadBy(spread).Match(key) {
			return r, true
		}
	}
	return Rule{}, false
}

// MatchPrefix returns the rules some of whose keys (spread by spread)
// start with prefix: the rules a pattern "prefix*" can name
// (Template.MatchPrefix).
func MatchPrefix(rs []Rule, spread, prefix string) []Rule {
	var out []Rule
	for _, r := range rs {
		if t, err := ParseKey(scopeOf(r.Key), r.Key, nil); err == nil && t.SpreadBy(spread).MatchPrefix(prefix) {
			out = append(out, r)
		}
	}
	return out
}

func scopeOf(key string) string {
	scope, _, _ := strings.Cut(key, ":")
	return scope
}

// ChannelOf is the channel a limiter key belongs to: its scope, up to a
// '/' that a spread scope adds (Template.SpreadBy):
// "whatsapp/1065:number:1065" and "whatsapp:daily:+1202…" are "whatsapp"'s.
func ChannelOf(key string) string {
	scope, _, _ := strings.Cut(key, ":")
	ch, _, _ := strings.Cut(scope, "/")
	return ch
}
