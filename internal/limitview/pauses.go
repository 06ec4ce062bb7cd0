package limitview

import (
	"time"

	"github.com/sluice-dev/sluice/throttle"
)

// Indefinitely is the length of a pause until resumed (`sluice channels
// pause` with no --for): a pause ending more than half of it ahead is shown
// as "until resumed".
const Indefinitely = 100 * 365 * 24 * time.Hour

// Who paused a scope (Pause.By).
const (
	ByOperator = "operator"
	ByProvider = "provider"
)

// Pause is a paused scope as `sluice channels status --json` prints it and
// the /limits/ dashboard shows it: times in Unix ms.
type Pause struct {
	Key   string `json:"key"`
	Until int64  `json:"until"` // Unix ms; see UntilResumed
	Since int64  `json:"since"` // Unix ms: when it was last set or extended
	// UntilResumed reports a pause with no end of its own: it lasts until
	// an operator (or, after a credential error, a successful probe)
	// resumes it.
	UntilResumed bool `json:"until_resumed,omitempty"`
	// Code and Reason are the provider's error code and message (an
	// operator's reason for an operator's pause).
	Code   int    `json:"code,omitempty"`
	Reason string `json:"reason,omitempty"`
	InARow int    `json:"in_a_row"`
	// By is ByOperator or ByProvider.
	By string `json:"by"`
}

// PauseOf is p's view, now being the limiter's clock.
func PauseOf(p throttle.Paused, now time.Time) Pause {
	v := Pause{Key: p.Key, Until: p.Until.UnixMilli(), Since: p.Since.UnixMilli(), Code: p.Code, Reason: p.Reason,
		InARow: p.InARow, By: ByProvider, UntilResumed: p.Until.Sub(now) > Indefinitely/2}
	if p.Operator {
		v.By, v.InARow = ByOperator, 0 // an operator's pause is not a run of throttles
	}
	return v
}
