package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/tasks"
)

// shape is the exact set of JSON member names a struct type decodes, with
// the shapes of its struct-valued members (tasks.Names, the worker's own).
// encoding/json matches names case-insensitively and DisallowUnknownFields
// does not change that; the API checks names against the shape first, so
// "TO" is an unknown field, as the OpenAPI document says.
type shape = tasks.Names

// shapeOf returns the shape of struct type t, flattening embedded structs
// as encoding/json does. Top-level fields in skip are left out: the
// payloads' "v", which the API sets itself.
func shapeOf(t reflect.Type, skip ...string) shape {
	s := maps.Clone(tasks.NamesOf(t)) // shared: copied before skipping
	for _, k := range skip {
		delete(s, k)
	}
	return s
}

// unknownFields returns a FieldError for each member of the JSON object
// raw, at any depth covered by s, whose name is not in s, in the order they
// appear. raw must be a JSON object; values that are not objects where s
// has a sub-shape are left to the decoder's type errors.
func unknownFields(base string, raw json.RawMessage, s shape) []FieldError {
	var out []FieldError
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return out
		}
		name, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return out
		}
		sub, ok := s[name]
		ptr := base + "/" + pointerEscaper.Replace(cutName(name))
		switch {
		case !ok:
			out = append(out, FieldError{Pointer: ptr, Detail: fmt.Sprintf("%s: unknown field", quoteName(name))})
		case sub != nil && isObject(v):
			out = append(out, unknownFields(ptr, v, sub)...)
		}
		if len(out) >= maxUnknownFields {
			return out[:maxUnknownFields]
		}
	}
	return out
}

// maxUnknownFields bounds the unknown fields one item's problem lists: a
// body of thousands of made-up members gets an answer of bounded size.
const maxUnknownFields = 20

// cutName bounds a member name in a pointer to 64 bytes, on a rune
// boundary; a longer name is no field of ours anyway.
func cutName(name string) string {
	if len(name) <= 64 {
		return name
	}
	return strings.ToValidUTF8(name[:64], "") + "…"
}

// quoteName shows a member name in an error: as is when it is a plain
// name, else Go-quoted and cut to 40 bytes.
func quoteName(name string) string {
	plain := name != "" && len(name) <= 64
	for i := 0; i < len(name) && plain; i++ {
		c := name[i]
		plain = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
	}
	if plain {
		return name
	}
	return fmt.Sprintf("%.40q", name)
}

func isObject(v json.RawMessage) bool {
	v = bytes.TrimLeft(v, " \t\r\n")
	return len(v) > 0 && v[0] == '{'
}

// decodeValue decodes one JSON value from b into v, refusing trailing data;
// s is v's shape. Errors become FieldErrors: a type error names its field under base
// (`/template/parameters: want array of string, got number`), a syntax
// error the whole value.
func decodeValue(base string, b []byte, v any, s shape) []FieldError {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields() // names were checked by unknownFields; this is a backstop
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("unexpected data after the JSON value")
		}
	}
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		ptr, field := base, ""
		for _, name := range strings.Split(te.Field, ".") {
			sub, ok := s[name]
			if !ok && s != nil {
				continue // an embedded struct's Go name ("WhatsAppSend"), not a member
			}
			s = sub
			ptr += "/" + pointerEscaper.Replace(name)
			if field != "" {
				field += "."
			}
			field += name
		}
		return []FieldError{{Pointer: ptr, Detail: fmt.Sprintf("%s: want %s, got JSON %s", field, jsonType(te.Type), te.Value)}}
	}
	if err == io.EOF {
		err = errors.New("empty body")
	}
	return []FieldError{{Pointer: base, Detail: "not valid JSON: " + strings.TrimPrefix(err.Error(), "json: ")}}
}

// jsonType names a Go type as its JSON form.
func jsonType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct, reflect.Pointer:
		return "an object"
	}
	return t.String()
}

// loneSurrogate finds the first string in the JSON value raw (at JSON
// Pointer base) that has a \u escape of a lone UTF-16 surrogate ("\ud800"
// not followed by a low surrogate, or a low one alone): no character, and
// encoding/json would silently make it U+FFFD. It names the string's
// member (a key holding one is named by itself); false when there is none.
// raw must be valid JSON.
func loneSurrogate(base string, raw []byte) (FieldError, bool) {
	esc, ok := firstLoneSurrogate(raw)
	if !ok {
		return FieldError{}, false
	}
	ptr := surrogatePointer(base, raw)
	field := strings.TrimPrefix(strings.TrimPrefix(ptr, base), "/")
	if field == "" {
		field = "body"
	}
	return FieldError{Pointer: ptr, Detail: fmt.Sprintf(
		"%s: %s is a lone UTF-16 surrogate, not a character; send the character itself, or a surrogate pair for one beyond U+FFFF", field, esc)}, true
}

// firstLoneSurrogate returns the first lone surrogate escape in b ("\udc00").
func firstLoneSurrogate(b []byte) (string, bool) {
	for i := 0; i+1 < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if b[i+1] != 'u' || i+6 > len(b) {
			i++ // an escape of one character: skip it
			continue
		}
		r, ok := hex4(b[i+2 : i+6])
		switch {
		case !ok:
		case r >= 0xD800 && r <= 0xDBFF:
			if i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
				if lo, ok := hex4(b[i+8 : i+12]); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					i += 11
					continue
				}
			}
			return string(b[i : i+6]), true
		case r >= 0xDC00 && r <= 0xDFFF:
			return string(b[i : i+6]), true
		}
		i += 5
	}
	return "", false
}

func hex4(b []byte) (rune, bool) {
	v, err := strconv.ParseUint(string(b), 16, 16)
	return rune(v), err == nil
}

// surrogatePointer is the JSON Pointer of the first string in raw, a key or
// a value, that holds a lone surrogate: base for raw itself.
func surrogatePointer(base string, raw []byte) string {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 || (raw[0] != '{' && raw[0] != '[') {
		return base
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return base
	}
	for i := 0; dec.More(); i++ {
		ptr := base + "/" + strconv.Itoa(i)
		if raw[0] == '{' {
			start := dec.InputOffset()
			key, err := dec.Token()
			if err != nil {
				return base
			}
			name, _ := key.(string)
			ptr = base + "/" + pointerEscaper.Replace(name)
			if _, lone := firstLoneSurrogate(raw[start:dec.InputOffset()]); lone {
				return ptr
			}
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return base
		}
		if _, lone := firstLoneSurrogate(v); lone {
			return surrogatePointer(ptr, v)
		}
	}
	return base
}
