package rules

import (
	"fmt"
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
// ParseKey) and returns the set. The error names the first bad rule by its
// index and field: `rules[1]: key: key "sms:x:{to": "{" without "}"`.
func Compile(channel string, fields []string, rs []Rule) (*Set, error) {
	s := &Set{channel: channel, rules: make([]compiled, len(rs))}
	for i, r := range rs {
		k, m, err := r.compile(channel, fields)
		if err != nil {
			return nil, fmt.Errorf("rules[%d]: %w", i, err)
		}
		s.rules[i] = compiled{r, k, m}
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

// Match returns the first rule whose key template renders to key
// (Template.Match).
func Match(rs []Rule, key string) (Rule, bool) {
	for _, r := range rs {
		if t, err := ParseKey(scopeOf(r.Key), r.Key, nil); err == nil && t.Match(key) {
			return r, true
		}
	}
	return Rule{}, false
}

// MatchPrefix returns the rules some of whose keys start with prefix: the
// rules a pattern "prefix*" can name (Template.MatchPrefix).
func MatchPrefix(rs []Rule, prefix string) []Rule {
	var out []Rule
	for _, r := range rs {
		if t, err := ParseKey(scopeOf(r.Key), r.Key, nil); err == nil && t.MatchPrefix(prefix) {
			out = append(out, r)
		}
	}
	return out
}

func scopeOf(key string) string {
	scope, _, _ := strings.Cut(key, ":")
	return scope
}
