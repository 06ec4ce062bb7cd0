package tasks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"strings"
	"sync"
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
// member names that differ from the canonical ones only by case ("URL" for
// "url", which encoding/json would take), trailing data, a "v" other than
// PayloadVersion and anything Validate rejects are errors wrapping
// ErrMalformed. Phone numbers are
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

// decodeStrict decodes b into v (a pointer to a payload struct): unknown
// fields, trailing data and member names that differ from the canonical
// ones only by case are errors. encoding/json matches names
// case-insensitively, so {"URL": …} would fill URL; a payload is refused
// instead, so that every reader of the stored task (the queue dashboard's
// redaction, which looks for "url" and "headers") sees the fields the
// worker sends.
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
	t := reflect.TypeOf(v).Elem()
	n := namesOf(t)
	if flat := flatNamesOf(t, n); flat != nil && exactNames(b, flat) {
		return nil
	}
	return checkNames("", b, n)
}

// flatNames is every member name of a names tree, at any depth. It stands
// for the tree in exactNames only when no two of its names differ by case
// alone: then a member name that is exactly one of them and that the
// decoder matched (case-insensitively) to a field of its own object is
// that field's exact name.
type flatNames map[string]struct{}

var flatCache sync.Map // reflect.Type → flatNames (nil: the tree has names that differ by case alone)

// flatNamesOf returns struct type t's flatNames, or nil when two of its
// names differ by case alone; cached per type.
func flatNamesOf(t reflect.Type, n names) flatNames {
	if f, ok := flatCache.Load(t); ok {
		return f.(flatNames)
	}
	flat := flatNames{}
	var add func(n names)
	add = func(n names) {
		for name, sub := range n {
			flat[name] = struct{}{}
			add(sub)
		}
	}
	add(n)
	for a := range flat {
		for b := range flat {
			if a != b && strings.EqualFold(a, b) {
				flat = nil
				break
			}
		}
		if flat == nil {
			break
		}
	}
	flatCache.Store(t, flat)
	return flat
}

// exactNames reports whether every member name in the JSON document b
// (decoded without error) is one of flat's, spelled exactly and without
// escapes: checkNames' answer for the payloads producers write, without
// its token-by-token walk (half of a send's decoding, most of its
// allocations). false only means checkNames must look: a name it does not
// check (a member of a map, such as a webhook's headers) is not in flat.
func exactNames(b []byte, flat flatNames) bool {
	for i := 0; i < len(b); i++ {
		if b[i] != '"' {
			continue
		}
		j, escaped := i+1, false
		for j < len(b) && b[j] != '"' {
			if b[j] == '\\' {
				escaped = true
				j++
			}
			j++
		}
		k := j + 1
		for k < len(b) && (b[k] == ' ' || b[k] == '\t' || b[k] == '\n' || b[k] == '\r') {
			k++
		}
		if k < len(b) && b[k] == ':' { // a member name
			if escaped {
				return false
			}
			if _, ok := flat[string(b[i+1:min(j, len(b))])]; !ok {
				return false
			}
		}
		i = j
	}
	return true
}

// Names is the exact set of JSON member names a struct type decodes, with
// the names of its struct-valued members' members (nil for other values).
// encoding/json matches names case-insensitively; Names is what a strict
// check compares them with (the worker's decoders, the API's unknown-field
// check). A Names from NamesOf is shared: do not modify it.
type Names map[string]Names

type names = Names

var namesCache sync.Map // reflect.Type → names

// NamesOf returns the names of struct type t, embedded structs flattened
// as encoding/json does; cached per type.
func NamesOf(t reflect.Type) Names { return namesOf(t) }

func namesOf(t reflect.Type) names {
	if n, ok := namesCache.Load(t); ok {
		return n.(names)
	}
	n := names{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && tag == "" && ft.Kind() == reflect.Struct {
			maps.Copy(n, namesOf(ft))
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		n[tag] = nil
		if ft.Kind() == reflect.Struct {
			n[tag] = namesOf(ft)
		}
	}
	namesCache.Store(t, n)
	return n
}

// checkNames returns an error for the first member of the JSON object b
// (already decoded without error, so every member is a known field in
// some case) whose name is not exactly its field's: `json: field "URL":
// want "url" (field names are case-sensitive)`. path prefixes nested
// names ("template.").
func checkNames(path string, b []byte, n names) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil // not an object: the decoder said null is fine
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		name, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return err
		}
		sub, ok := n[name]
		if !ok {
			for canon := range n {
				if strings.EqualFold(canon, name) {
					return fmt.Errorf("json: field %.40q: want %q (field names are case-sensitive)", path+name, path+canon)
				}
			}
			return fmt.Errorf("json: unknown field %.40q", path+name)
		}
		if sub != nil {
			if err := checkNames(path+name+".", v, sub); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p WhatsAppSend) version() int   { return p.V }
func (p SMSSend) version() int        { return p.V }
func (p WebhookDeliver) version() int { return p.V }
func (p HTTPCall) version() int       { return p.V }
