package rules

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/throttle"
)

// Rule is one limit of a channel: a throttle.Limit, the key template that
// picks the limited identifier from a task, the member template of a
// Distinct limit, and what one task costs.
type Rule struct {
	// Limit is the limit itself, valid per throttle.Limit.Validate.
	Limit throttle.Limit
	// Key is the key template, "whatsapp:pair:{phone_number_id}:{to}"; see
	// ParseKey.
	Key string
	// Member is a Distinct limit's member template, the subject it counts
	// ("{to}"); see ParseMember. Required for Distinct, empty otherwise.
	Member string
	// Cost is the units one task takes; zero means 1. At most the limit's
	// capacity; Distinct counts a new member 1 whatever the cost.
	Cost int64
	// CostField, when set, names the task field whose whole-number value is
	// the task's cost instead of Cost: "segments" makes an SMS take one unit
	// per message segment (tasks.CountSegments), as Twilio counts a
	// sender's MPS. A value that is not a whole number >= 1 costs 1.
	//
	// A cost over the limit's capacity is a message longer than the limit
	// admits at once (3 segments on a 1/s limit of burst 1). On a GCRA
	// limit such a task is admitted only when the limit is idle (its
	// bucket full) and then takes its whole cost, so the next task waits
	// until every unit has been paced out: its request carries Burst =
	// cost, which the limiter applies to that request alone (the TAT is
	// the limit's). That is how a provider that queues over-rate segments
	// (Twilio) spends them, and it never admits more than rate × span +
	// cost over any span. On other algorithms the cost is cut to the
	// capacity. Not for Distinct limits. Configuration files spell it
	// `cost: segments`.
	CostField string
	// Line is the rule's line in its configuration file; 0 when the rule
	// does not come from a file (a built-in default).
	Line int
}

// Fields of a Rule besides the Limit's (throttle.ShapeFields), as
// configuration files spell them.
const (
	FieldName   = "name"
	FieldKey    = "key"
	FieldMember = "member"
	FieldCost   = "cost"
)

// FieldError is a rule problem in one field: FieldKey, FieldMember,
// FieldCost, FieldName, "algorithm" or one of throttle.ShapeFields. Its text
// is the cause's.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// Check validates r as a rule of channel and returns its first problem as a
// *FieldError: the key and member templates (see ParseKey, ParseMember;
// fields as there), the member's presence exactly for Distinct, the limit
// (throttle.Limit.Validate), and a cost the limit can admit.
func (r Rule) Check(channel string, fields []string) error {
	_, _, err := r.compile(channel, fields)
	return err
}

func (r Rule) compile(channel string, fields []string) (key, member Template, err error) {
	if key, err = ParseKey(channel, r.Key, fields); err != nil {
		return key, member, &FieldError{FieldKey, err}
	}
	switch {
	case r.Limit.Algorithm == throttle.Distinct:
		if member, err = ParseMember(channel, r.Member, fields); err != nil {
			return key, member, &FieldError{FieldMember, fmt.Errorf("distinct limit %q: %w", r.Limit.Name, err)}
		}
	case r.Member != "":
		return key, member, &FieldError{FieldMember, fmt.Errorf("limit %q: member is only used by distinct limits, not %s", r.Limit.Name, r.Limit.Algorithm)}
	}
	if err := r.Limit.Validate(); err != nil {
		field := "limit"
		if fe, ok := throttle.IsFieldError(err); ok {
			field = fe.Field
		}
		return key, member, &FieldError{field, err}
	}
	if r.Cost < 0 {
		return key, member, &FieldError{FieldCost, fmt.Errorf("limit %q: cost: want >= 1, got %d", r.Limit.Name, r.Cost)}
	}
	if r.CostField != "" {
		switch {
		case r.Limit.Algorithm == throttle.Distinct:
			return key, member, &FieldError{FieldCost, fmt.Errorf("limit %q: cost %s: a distinct limit counts a new member 1 (omit cost)", r.Limit.Name, r.CostField)}
		case fields != nil && !slices.Contains(fields, r.CostField):
			return key, member, &FieldError{FieldCost, fmt.Errorf("limit %q: cost %q is not a field of %s tasks (want a whole number or one of %s)",
				r.Limit.Name, r.CostField, channel, strings.Join(fields, ", "))}
		}
		return key, member, nil
	}
	if c := max(r.Cost, 1); r.Limit.Algorithm != throttle.Distinct && c > r.Limit.Capacity() {
		return key, member, &FieldError{FieldCost, fmt.Errorf("%d is more than the limit admits at once (%d, %s): no task could ever pass",
			c, r.Limit.Capacity(), r.Limit.Algorithm.CapacityName())}
	}
	return key, member, nil
}

// Describe renders the rule's limit for people: "80/s", "1/6s burst 1",
// "max 100, lease 30s", "interval 6s", and for Distinct "2000/1d of {to}".
func (r Rule) Describe() string {
	l := r.Limit
	var s string
	switch l.Algorithm {
	case throttle.Concurrency:
		s = fmt.Sprintf("max %d, lease %v", l.Max, l.Lease)
	case throttle.GCRA:
		s = fmt.Sprintf("%v burst %d", l.Rate, max(l.Burst, 1))
	case throttle.MinInterval:
		s = fmt.Sprintf("interval %v", l.Interval)
	default:
		s = l.Rate.String()
	}
	if r.Member != "" {
		s += " of " + r.Member
	}
	if r.CostField != "" {
		s += " per " + strings.TrimSuffix(r.CostField, "s")
	}
	return s
}

// maxFieldCost bounds a CostField's value: more than any task field
// holds (an SMS has at most 48 segments), so a hostile value cannot set a
// GCRA request's burst to years of the limit.
const maxFieldCost = 1000

// request is the throttle.Request of a task with fields on key: the
// limit's and Cost, or with CostField that field's value, over capacity
// as Rule.CostField says.
func (r Rule) request(key string, fields map[string]string) throttle.Request {
	req := throttle.Request{Key: key, Limit: r.Limit, Cost: r.Cost}
	if r.CostField == "" {
		return req
	}
	n, err := strconv.ParseInt(fields[r.CostField], 10, 64)
	if err != nil || n < 1 {
		n = 1
	}
	req.Cost = min(n, maxFieldCost)
	if req.Cost > r.Limit.Capacity() {
		if r.Limit.Algorithm == throttle.GCRA {
			req.Limit.Burst = req.Cost
		} else {
			req.Cost = r.Limit.Capacity()
		}
	}
	return req
}

// CheckKey checks a limiter key given by a person (a CLI argument, an API
// path), without its prefix: "scope:rest", no braces, spaces or control
// characters. With pattern, a final '*' makes it a prefix pattern
// ("whatsapp:daily:*"); '*' anywhere else is refused.
func CheckKey(key string, pattern bool) error {
	k := key
	if pattern {
		k = strings.TrimSuffix(key, "*")
	}
	switch {
	case key == "":
		return errors.New("empty key")
	case strings.ContainsFunc(key, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return fmt.Errorf("key %q: spaces and control characters are not allowed", key)
	case strings.ContainsAny(key, "{}"):
		return fmt.Errorf("key %q: braces are not allowed (write keys without the prefix, as scope:resource:id)", key)
	case strings.Contains(k, "*"):
		if pattern {
			return fmt.Errorf("key %q: '*' may only end a pattern (whatsapp:daily:*)", key)
		}
		return fmt.Errorf("key %q: '*' is not allowed here", key)
	case k == "" || strings.HasPrefix(k, ":") || strings.HasPrefix(k, "_"):
		return fmt.Errorf("key %q: want scope:resource:id, such as whatsapp:daily:+12025550123", key)
	}
	return nil
}
