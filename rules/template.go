package rules

import (
	"fmt"
	"slices"
	"strings"
)

// Template is a parsed key or member template: literal text and {field}
// placeholders naming task fields, "whatsapp:pair:{phone_number_id}:{to}"
// or "{to}". The zero Template renders "".
type Template struct {
	raw   string
	parts []string // literal text at even indexes, field names at odd
	// tag is the index in parts of the field that makes the scope finer
	// (SpreadBy), rendered escaped; 0 when none.
	tag int
}

// scopeEscaper keeps a field's value in a key's scope one segment: a
// host:port's ':' would end it.
var scopeEscaper = strings.NewReplacer("%", "%25", ":", "%3A")

// ParseKey parses a limit key template of channel: ':'-separated non-empty
// segments, at least two; the first is the channel's name, literal (it is
// the key's scope and Redis Cluster hash tag); the others are literal text
// and {field} placeholders. fields lists the names a placeholder may take
// (tasks.FieldNames of the channel's task type); nil accepts any name.
// Spaces and control characters are refused. Errors read
// `key "webhook::{host}": segment 2 is empty`.
func ParseKey(channel, s string, fields []string) (Template, error) {
	if err := printable("key", s); err != nil {
		return Template{}, err
	}
	segs := strings.Split(s, ":")
	if len(segs) < 2 {
		return Template{}, fmt.Errorf("key %q: want at least two segments, %s:<what>[:…]", s, channel)
	}
	for i, seg := range segs {
		if seg == "" {
			return Template{}, fmt.Errorf("key %q: segment %d is empty", s, i+1)
		}
	}
	t, err := parse("key", s, channel, fields)
	if err != nil {
		return Template{}, err
	}
	if segs[0] != channel {
		return Template{}, fmt.Errorf("key %q: scope %q must be the channel name %q", s, segs[0], channel)
	}
	return t, nil
}

// SpreadBy returns the key template with its scope made finer by field,
// when the template names {field}: "whatsapp:number:{phone_number_id}"
// spread by phone_number_id renders
// "whatsapp/106540352242922:number:106540352242922". The scope is a key's
// Redis Cluster hash tag and what one limiter script decides together, so
// the keys of one field value (a WhatsApp number's pace, its pairs, its
// pauses) stay together while different values spread over a cluster's
// masters; keys that do not name field (a recipient's daily window, the
// channel's pause) keep the channel's scope. In the scope the value is
// escaped (':' as %3A, '%' as %25) so that it stays one segment. field ""
// or a template that does not name it returns t as it is. t must be a key
// template (ParseKey).
func (t Template) SpreadBy(field string) Template {
	if field == "" || t.tag != 0 || !slices.Contains(t.Fields(), field) {
		return t
	}
	channel, rest, _ := strings.Cut(t.parts[0], ":")
	parts := make([]string, 0, len(t.parts)+2)
	parts = append(parts, channel+"/", field, ":"+rest)
	parts = append(parts, t.parts[1:]...)
	return Template{raw: t.raw, parts: parts, tag: 1}
}

// ParseMember parses a Distinct rule's member template, the subject it
// counts: literal text and at least one {field} placeholder ("{to}"); a
// constant member would count once. fields is as for ParseKey.
func ParseMember(channel, s string, fields []string) (Template, error) {
	if s == "" {
		return Template{}, fmt.Errorf("member %q: want a template such as {to}", s)
	}
	if err := printable("member", s); err != nil {
		return Template{}, err
	}
	t, err := parse("member", s, channel, fields)
	if err != nil {
		return Template{}, err
	}
	if len(t.parts) < 2 {
		want := "{field}"
		if len(fields) > 0 {
			want = "{" + strings.Join(fields, "}, {") + "}"
		}
		return Template{}, fmt.Errorf("member %q: want at least one placeholder naming a task field (%s); a constant member counts once", s, want)
	}
	return t, nil
}

func printable(what, s string) error {
	if strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Errorf("%s %q: spaces and control characters are not allowed", what, s)
	}
	return nil
}

// parse splits s into literal text and placeholders; what names the
// template in errors.
func parse(what, s, channel string, fields []string) (Template, error) {
	t := Template{raw: s}
	rest := s
	for {
		open := strings.IndexByte(rest, '{')
		if close := strings.IndexByte(rest, '}'); close >= 0 && (open < 0 || close < open) {
			return Template{}, fmt.Errorf("%s %q: \"}\" without \"{\"", what, s)
		}
		if open < 0 {
			t.parts = append(t.parts, rest)
			return t, nil
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return Template{}, fmt.Errorf("%s %q: \"{\" without \"}\"", what, s)
		}
		name := rest[open+1 : open+end]
		switch {
		case name == "" || strings.ContainsAny(name, "{:"):
			return Template{}, fmt.Errorf("%s %q: bad placeholder {%s}", what, s, name)
		case fields != nil && !slices.Contains(fields, name):
			return Template{}, fmt.Errorf("%s %q: placeholder {%s} is not a field of %s tasks (want {%s})",
				what, s, name, channel, strings.Join(fields, "}, {"))
		}
		t.parts = append(t.parts, rest[:open], name)
		rest = rest[open+end+1:]
	}
}

// String returns the template as written.
func (t Template) String() string { return t.raw }

// Fields returns the placeholders' field names, in order (a SpreadBy
// field once, where it was written).
func (t Template) Fields() []string {
	var out []string
	for i := 1; i < len(t.parts); i += 2 {
		if i != t.tag {
			out = append(out, t.parts[i])
		}
	}
	return out
}

// Render fills the template from a task's fields. ok is false when a field
// is empty or missing: the rule then does not apply to the task (a rule
// keyed on {from} does not apply to a send through a messaging service).
func (t Template) Render(fields map[string]string) (s string, ok bool) {
	var b strings.Builder
	for i, p := range t.parts {
		if i%2 == 0 {
			b.WriteString(p)
			continue
		}
		v := fields[p]
		if v == "" {
			return "", false
		}
		if i == t.tag {
			scopeEscaper.WriteString(&b, v)
			continue
		}
		b.WriteString(v)
	}
	return b.String(), true
}

// Match reports whether key is one the template renders to: literal text
// matches itself, a placeholder one or more characters other than ':',
// except a placeholder that ends the template, which takes the rest (a
// host:port holds a ':').
func (t Template) Match(key string) bool { return t.match(0, key, false) }

// MatchPrefix reports whether some key the template renders to starts with
// prefix: whether a pattern "prefix*" can name keys of this template.
func (t Template) MatchPrefix(prefix string) bool { return t.match(0, prefix, true) }

// match matches parts[i:] against s; with prefix, s may end anywhere.
func (t Template) match(i int, s string, prefix bool) bool {
	if i >= len(t.parts) {
		return s == ""
	}
	if i%2 == 0 {
		lit := t.parts[i]
		if prefix && len(s) <= len(lit) {
			return strings.HasPrefix(lit, s)
		}
		rest, ok := strings.CutPrefix(s, lit)
		return ok && t.match(i+1, rest, prefix)
	}
	last := i == len(t.parts)-2 && t.parts[i+1] == ""
	if last {
		return s != "" || prefix
	}
	if prefix && !strings.Contains(s, ":") && t.match(i+1, "", true) {
		return true // s ends inside this field, or right after it
	}
	for n := 1; n <= len(s); n++ {
		if s[n-1] == ':' {
			break
		}
		if t.match(i+1, s[n:], prefix) {
			return true
		}
	}
	return prefix && s == ""
}
