package tasks

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// ErrMalformed is wrapped by every Decode… error: the payload is not valid
// JSON for its type, has an unknown field or an unsupported version, or fails
// Validate. Retrying cannot fix it; a worker should fail the task without
// retry (wrap asynq.SkipRetry).
var ErrMalformed = errors.New("malformed payload")

// malformedError reads "payload: <cause>" and matches both ErrMalformed and
// the cause with errors.Is and errors.As.
type malformedError struct{ err error }

func (e *malformedError) Error() string   { return "payload: " + e.err.Error() }
func (e *malformedError) Unwrap() []error { return []error{ErrMalformed, e.err} }

// DecodeWhatsAppSend parses a whatsapp:send task payload. Decoding is strict:
// a payload over MaxPayloadBytes (checked before parsing), unknown fields,
// trailing data, a "v" other than PayloadVersion and anything Validate
// rejects are errors wrapping ErrMalformed. Phone numbers are
// checked for E.164 shape only ("+" and 7–15 digits); the constructors
// already checked them in full with libphonenumber (see checkE164Syntax).
// Errors read, e.g. `payload: json: unknown field "foo"` or
// `payload: v: unsupported version 2 (want 1)`.
func DecodeWhatsAppSend(b []byte) (WhatsAppSend, error) {
	return decode[WhatsAppSend](TypeWhatsAppSend, b)
}

// DecodeSMSSend parses an sms:send task payload; see DecodeWhatsAppSend.
func DecodeSMSSend(b []byte) (SMSSend, error) { return decode[SMSSend](TypeSMSSend, b) }

// DecodeWebhookDeliver parses a webhook:deliver task payload; see
// DecodeWhatsAppSend.
func DecodeWebhookDeliver(b []byte) (WebhookDeliver, error) {
	return decode[WebhookDeliver](TypeWebhookDeliver, b)
}

// DecodeHTTPCall parses an http:call task payload; see DecodeWhatsAppSend.
func DecodeHTTPCall(b []byte) (HTTPCall, error) { return decode[HTTPCall](TypeHTTPCall, b) }

func decode[T interface {
	validate(func(field, s string) error) error
	version() int
}](taskType string, b []byte) (T, error) {
	var zero, p T
	if err := checkSize(taskType, len(b)); err != nil {
		return zero, &malformedError{err}
	}
	// The payload is parsed once; only a payload that fails to decode is
	// read again for its version: one from a newer producer may have fields
	// this version does not know, and its version is the better error.
	if err := decodeStrict(b, &p); err != nil {
		var head struct {
			V int `json:"v"`
		}
		if json.Unmarshal(b, &head) == nil && head.V != PayloadVersion {
			return zero, &malformedError{checkVersion(head.V)}
		}
		return zero, &malformedError{err}
	}
	if v := p.version(); v != PayloadVersion {
		return zero, &malformedError{checkVersion(v)}
	}
	if err := p.validate(checkE164Syntax); err != nil {
		return zero, &malformedError{err}
	}
	return p, nil
}

func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if err == io.EOF {
			return errors.New("empty")
		}
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("json: unexpected data after the top-level value")
	}
	return nil
}

func (p WhatsAppSend) version() int   { return p.V }
func (p SMSSend) version() int        { return p.V }
func (p WebhookDeliver) version() int { return p.V }
func (p HTTPCall) version() int       { return p.V }
