package tasks

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// TypeBatch is the type of a batch task: one asynq task carrying the sends
// of one sender planned for the same second (producer.Client, with
// channels.<name>.batch_sends). asynq's enqueue, forward, dequeue and
// completion are then paid once per batch instead of once per send; each
// send keeps its own ID, idempotency claim, slot, delivery record and
// retries. The worker runs each send as if it were its own task and turns a
// send that must come back (a provider throttle, a failure, a new place) into
// a task of its own, with the send's ID (worker, "Batch tasks").
const TypeBatch = "sluice:batch"

// MaxBatchSends is the most sends one batch task carries: a WhatsApp
// number's second at 80 MPS fits in one, and a batch stays under about
// 100 KB of payload.
const MaxBatchSends = 100

// Headers of a send's own task that a batch task's send became. asynq
// counts a task's retries from 0 when it is enqueued; these carry what the
// send had used in its batch.
const (
	// HeaderRetried is the failed attempts the send made before this task
	// (a decimal number; absent: 0).
	HeaderRetried = "sluice-retried"
	// HeaderArchive is set on the task of a send its batch gave up on
	// (archived): the worker archives it at once with this reason, so that
	// the send is in asynq's archive like any other, without being tried
	// again.
	HeaderArchive = "sluice-archive"
)

// Batch is a batch task's payload.
type Batch struct {
	V int `json:"v"`
	// Sends are the sends carried, in the order their plan gave them.
	Sends []BatchSend `json:"sends"`
}

// BatchSend is one send of a Batch: its own task's ID, type and payload
// (as the type's constructor encoded it), its asynq MaxRetry, and its
// planned instant (Unix ms; 0: none), which the worker starts it a little
// before rather than with the whole batch at the second's start.
type BatchSend struct {
	ID       string          `json:"id"`
	Type     string          `json:"type"`
	Payload  json.RawMessage `json:"payload"`
	MaxRetry int             `json:"max_retry"`
	At       int64           `json:"at,omitempty"`
}

// EncodeBatch encodes sends as a batch task's payload. The error names the
// send that is not valid: an empty ID or type, a payload that is not JSON,
// or more than MaxBatchSends.
func EncodeBatch(sends []BatchSend) ([]byte, error) {
	if err := checkSends(sends); err != nil {
		return nil, fmt.Errorf("%s: %w", TypeBatch, err)
	}
	return json.Marshal(Batch{V: PayloadVersion, Sends: sends})
}

// DecodeBatch decodes and checks a batch task's payload. The error wraps
// ErrMalformed and names the send at fault.
func DecodeBatch(b []byte) (Batch, error) {
	var p Batch
	if err := json.Unmarshal(b, &p); err != nil {
		return Batch{}, fmt.Errorf("%w: %s: %w", ErrMalformed, TypeBatch, err)
	}
	if p.V != PayloadVersion {
		return Batch{}, fmt.Errorf("%w: %s: v: %d, want %d", ErrMalformed, TypeBatch, p.V, PayloadVersion)
	}
	if err := checkSends(p.Sends); err != nil {
		return Batch{}, fmt.Errorf("%w: %s: %w", ErrMalformed, TypeBatch, err)
	}
	return p, nil
}

// checkSends checks a batch's sends: 1 to MaxBatchSends, each valid; the
// error names the send at fault ("sends[3]: id: required").
func checkSends(sends []BatchSend) error {
	if len(sends) == 0 || len(sends) > MaxBatchSends {
		return fmt.Errorf("%d sends, want 1 to %d", len(sends), MaxBatchSends)
	}
	for i, s := range sends {
		if err := s.check(); err != nil {
			return fmt.Errorf("sends[%d]: %w", i, err)
		}
	}
	return nil
}

func (s BatchSend) check() error {
	switch {
	case s.ID == "":
		return fmt.Errorf("id: required")
	case s.Type == "" || s.Type == TypeBatch:
		return fmt.Errorf("type: %q is not a send", s.Type)
	case !json.Valid(s.Payload):
		return fmt.Errorf("payload: not JSON")
	case s.MaxRetry < 0:
		return fmt.Errorf("max_retry: %d, want 0 or more", s.MaxRetry)
	case s.At < 0:
		return fmt.Errorf("at: %d, want a Unix time in ms, or 0", s.At)
	}
	return nil
}

// Retried reads HeaderRetried of a task's headers: the failed attempts its
// send made in the batch it came from (0 without one, or with a value that
// is not a count).
func Retried(headers map[string]string) int {
	n, err := strconv.Atoi(headers[HeaderRetried])
	if err != nil || n < 0 {
		return 0
	}
	return n
}
