package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// Problem is an RFC 9457 problem details object, the body of every error
// response (Content-Type application/problem+json) and of each rejected
// batch item.
type Problem struct {
	// Type is a URI naming the kind of problem: docs/api.md's section on it
	// (ProblemBase + "#validation").
	Type string `json:"type"`
	// Title is the kind's short, fixed summary ("Validation failed").
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence.
	Detail string `json:"detail,omitempty"`
	// Errors lists each offending field of the request body.
	Errors []FieldError `json:"errors,omitempty"`
}

// FieldError is one offending field of a request body.
type FieldError struct {
	// Pointer is the field as an RFC 6901 JSON Pointer into the request
	// body: "/to", "/template/parameters/0", in a batch "/items/3/to". ""
	// is the whole item (or body).
	Pointer string `json:"pointer"`
	// Detail says what is wrong, starting with the field's name as the
	// tasks package spells it (`to: "+1555" is not a valid E.164 phone number`).
	Detail string `json:"detail"`
}

// ProblemBase is the start of every Problem.Type: the documentation of the
// problem kinds.
const ProblemBase = "https://github.com/sluice-dev/sluice/blob/main/docs/api.md"

// Problem types (Problem.Type).
const (
	typeValidation   = ProblemBase + "#validation"
	typeBadRequest   = ProblemBase + "#bad-request"
	typeIdempotency  = ProblemBase + "#idempotency-key-reused"
	typeConflict     = ProblemBase + "#conflict"
	typeUnauthorized = ProblemBase + "#unauthorized"
	typeRateLimited  = ProblemBase + "#rate-limited"
	typeTooLarge     = ProblemBase + "#payload-too-large"
	typeMediaType    = ProblemBase + "#unsupported-media-type"
	typeNotFound     = ProblemBase + "#not-found"
	typeMethod       = ProblemBase + "#method-not-allowed"
	typeUnavailable  = ProblemBase + "#unavailable"
	typeForbidden    = ProblemBase + "#forbidden"
	typeMisdirected  = ProblemBase + "#misdirected"
)

// WriteRefusal answers a request the server's guards in front of /v1
// refuse with a problem: status 403 (#forbidden, a cross-origin
// state-changing request) or 421 (#misdirected, a Host that is not
// loopback on a server without API keys); any other status is written
// with type about:blank.
func WriteRefusal(w http.ResponseWriter, status int, detail string) {
	p := &Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail}
	switch status {
	case http.StatusForbidden:
		p.Type = typeForbidden
	case http.StatusMisdirectedRequest:
		p.Type = typeMisdirected
	}
	writeProblem(w, p)
}

func writeProblem(w http.ResponseWriter, p *Problem) {
	body, err := json.Marshal(p)
	if err != nil { // cannot happen: strings and integers
		body = []byte(`{"type":"about:blank","title":"Internal Server Error","status":500}`)
		p.Status = http.StatusInternalServerError
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

func validationProblem(detail string, errs []FieldError) *Problem {
	return &Problem{Type: typeValidation, Title: "Validation failed", Status: http.StatusUnprocessableEntity, Detail: detail, Errors: errs}
}

// pointerEscaper escapes a JSON Pointer reference token (RFC 6901 §3).
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// fieldErrors maps a validation error message of the tasks or app package
// to the fields it names, as JSON Pointers under base. The messages start
// with the field path and a colon, or for a target check a space:
//
//	to: "+1555" is not a valid E.164 phone number        → /to
//	text, template: set exactly one (got both)           → /text, /template
//	template.parameters[1] ({{2}}): has a tab at byte 3  → /template/parameters/1
//	headers["X-A"]: value contains CR, LF or NUL         → /headers/X-A
//	from (after whatsapp:): "+1" is not ...              → /from
//	url https://10.0.0.1: egress: ... is private         → /url
//
// A path whose first name is not in known (a message this mapping does not
// understand, or "payload: N bytes encoded" on a type without a payload
// field) is the whole item: base itself.
func fieldErrors(base, msg string, known map[string]bool) []FieldError {
	var out []FieldError
	rest := msg
	for {
		path, n := fieldPath(rest)
		if n == 0 {
			break
		}
		ptr, ok := pathPointer(path, known)
		if !ok {
			break
		}
		out = append(out, FieldError{Pointer: base + ptr, Detail: msg})
		rest = rest[n:]
		if strings.HasPrefix(rest, ", ") {
			rest = rest[2:]
			continue
		}
		if strings.HasPrefix(rest, " (") { // "from (after whatsapp:)", "template.parameters[0] ({{1}})"
			if end := strings.IndexByte(rest, ')'); end > 0 {
				rest = rest[end+1:]
			}
		}
		if strings.HasPrefix(rest, ":") || strings.HasPrefix(rest, " ") {
			return out
		}
		break
	}
	return []FieldError{{Pointer: base, Detail: msg}}
}

// fieldPath reads a field path at the start of s: names of [a-z_] joined by
// '.', each optionally followed by [N] or ["key"] (a Go-quoted string). It
// returns the path and its length, or 0.
func fieldPath(s string) (string, int) {
	i := 0
	for {
		start := i
		for i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] == '_') {
			i++
		}
		if i == start {
			return "", 0
		}
		for i < len(s) && s[i] == '[' {
			if i+1 < len(s) && s[i+1] == '"' {
				q, err := strconv.QuotedPrefix(s[i+1:])
				if err != nil || i+1+len(q) >= len(s) || s[i+1+len(q)] != ']' {
					return "", 0
				}
				i += len(q) + 2
				continue
			}
			end := strings.IndexByte(s[i:], ']')
			if end < 2 {
				return "", 0
			}
			if _, err := strconv.Atoi(s[i+1 : i+end]); err != nil {
				return "", 0
			}
			i += end + 1
		}
		if i < len(s) && s[i] == '.' {
			i++
			continue
		}
		return s[:i], i
	}
}

// pathPointer turns a field path ("template.parameters[0]",
// `headers["X-A"]`) into a JSON Pointer ("/template/parameters/0",
// "/headers/X-A"); false if its first name is not in known.
func pathPointer(path string, known map[string]bool) (string, bool) {
	var b strings.Builder
	first := true
	for path != "" {
		end := strings.IndexAny(path, ".[")
		if end < 0 {
			end = len(path)
		}
		name := path[:end]
		if first && !known[name] {
			return "", false
		}
		first = false
		b.WriteString("/" + pointerEscaper.Replace(name))
		path = path[end:]
		for strings.HasPrefix(path, "[") {
			close := strings.IndexByte(path, ']')
			if path[1] == '"' {
				q, _ := strconv.QuotedPrefix(path[1:]) // checked by fieldPath
				close = 1 + len(q)
				s, _ := strconv.Unquote(q)
				b.WriteString("/" + pointerEscaper.Replace(s))
			} else {
				b.WriteString("/" + path[1:close])
			}
			path = path[close+1:]
		}
		path = strings.TrimPrefix(path, ".")
	}
	return b.String(), true
}
