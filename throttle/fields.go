package throttle

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Names of the Limit fields as configuration files and flags spell them.
const (
	FieldRate     = "rate"
	FieldBurst    = "burst"
	FieldMax      = "max"
	FieldLease    = "lease"
	FieldInterval = "interval"
)

// ShapeFields are the Limit fields that only some algorithms take, in
// documentation order; Algorithm.Fields says which.
var ShapeFields = []string{FieldRate, FieldBurst, FieldMax, FieldLease, FieldInterval}

// Fields returns the Limit fields the algorithm takes (a subset of
// ShapeFields): rate and burst for GCRA, rate for the windowed algorithms,
// interval for MinInterval, max and lease for Concurrency. nil for an
// unknown algorithm.
func (a Algorithm) Fields() []string {
	switch {
	case a == GCRA:
		return []string{FieldRate, FieldBurst}
	case a.Windowed():
		return []string{FieldRate}
	case a == MinInterval:
		return []string{FieldInterval}
	case a == Concurrency:
		return []string{FieldMax, FieldLease}
	}
	return nil
}

// Required returns the Limit fields the algorithm cannot do without, each
// with a hint for error messages: rate for GCRA and the windowed
// algorithms, interval for MinInterval, max for Concurrency. Burst and lease
// have defaults (1 and DefaultLease).
func (a Algorithm) Required() map[string]string {
	switch {
	case a == GCRA:
		return map[string]string{FieldRate: "N/period such as 80/s, 1/6s or 250/1d"}
	case a == Distinct:
		return map[string]string{FieldRate: "N/window: N distinct members per window of 1s, 30s, 1m, 5m, 1h or 1d"}
	case a.Windowed():
		return map[string]string{FieldRate: "N/window with a window of 1s, 30s, 1m, 5m, 1h or 1d, such as 80/s or 250/1d"}
	case a == MinInterval:
		return map[string]string{FieldInterval: "a duration such as 6s: the least time between two tasks"}
	case a == Concurrency:
		return map[string]string{FieldMax: "leases held at once"}
	}
	return nil
}

// OverrideFields returns the fields an Override may set for the algorithm:
// Fields less lease, which runtime overrides do not change.
func (a Algorithm) OverrideFields() []string {
	return slices.DeleteFunc(a.Fields(), func(f string) bool { return f == FieldLease })
}

// CapacityName says what sets Limit.Capacity for the algorithm, for errors
// about a cost it can never admit: "its burst", "its rate count", "its
// max", "one task per interval".
func (a Algorithm) CapacityName() string {
	switch {
	case a == GCRA:
		return "its burst"
	case a.Windowed():
		return "its rate count"
	case a == MinInterval:
		return "one task per interval"
	case a == Concurrency:
		return "its max"
	}
	return "its capacity"
}

// FieldError is a Limit (or Override) problem in one field: Validate's and
// CheckOverride's errors are *FieldError, so a caller can point at the field
// in its own input (a YAML node, a flag) without parsing text.
type FieldError struct {
	// Limit is the limit's name.
	Limit string
	// Field is one of ShapeFields, or "algorithm" or "cost".
	Field string
	Err   error
}

// Error renders `limit "pair": rate: want N/period …`: Err's text starts
// with the field's name.
func (e *FieldError) Error() string {
	return fmt.Sprintf("limit %q: %v", e.Limit, e.Err)
}

func (e *FieldError) Unwrap() error { return e.Err }

// ErrNotTaken is wrapped by a FieldError for a field the limit's algorithm
// does not take.
var ErrNotTaken = errors.New("not taken by the algorithm")

// fieldErr makes the FieldError "<field>: <message>".
func fieldErr(l Limit, field, format string, args ...any) *FieldError {
	return &FieldError{Limit: l.Name, Field: field, Err: fmt.Errorf(field+": "+format, args...)}
}

// overrideFields maps the Override fields to their Limit field names.
func (o Override) fields() map[string]bool {
	return map[string]bool{FieldRate: o.Rate.Limit > 0, FieldBurst: o.Burst > 0, FieldMax: o.Max > 0, FieldInterval: o.Interval > 0}
}

// CheckOverride reports an override the limiter would ignore for a limit l
// whose requests cost cost units: a field l's algorithm does not take (a
// *FieldError naming it), a limit the override makes invalid (a window a
// fixed window cannot have), or a capacity below cost. Distinct limits count
// a new member 1 whatever the cost.
func CheckOverride(o Override, l Limit, cost int64) error {
	takes := l.Algorithm.OverrideFields()
	set := o.fields()
	for _, f := range ShapeFields {
		if set[f] && !slices.Contains(takes, f) {
			return fieldErr(l, f, "%w: %s takes %s", ErrNotTaken, l.Algorithm, strings.Join(takes, " and "))
		}
	}
	over := o.Apply(l)
	if err := over.Validate(); err != nil {
		return err
	}
	if cost = max(cost, 1); l.Algorithm != Distinct && cost > over.Capacity() {
		return fieldErr(l, "cost", "a task costs %d, more than the overridden limit admits at once (%d, %s)", cost, over.Capacity(), l.Algorithm.CapacityName())
	}
	return nil
}

// MatchOverride returns the override that applies to key among all (keyed by
// limiter key or by a prefix pattern ending in '*'): the exact key first,
// else the longest matching pattern. It returns the key or pattern that
// matched. The Redis backend applies overrides by the same rule.
func MatchOverride(all map[string]Override, key string) (string, Override, bool) {
	return newOverrideSnapshot(all).lookup(key)
}

// IsFieldError reports whether err is a *FieldError and returns it.
func IsFieldError(err error) (*FieldError, bool) {
	var fe *FieldError
	ok := errors.As(err, &fe)
	return fe, ok
}
