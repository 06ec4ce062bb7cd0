package worker

import (
	"fmt"
	"strings"
)

// keyTemplate is a compiled template of task fields: a limit key such as
// "whatsapp:pair:{phone_number_id}:{to}", or a Distinct rule's member such
// as "{to}".
type keyTemplate struct {
	raw   string
	parts []string // literal text at even indexes, field names at odd
}

// parseKeyTemplate compiles a limit key template, whose first segment (the
// scope) must be literal.
func parseKeyTemplate(s string) (keyTemplate, error) {
	t, err := parseTemplate("key", s)
	if err != nil {
		return t, err
	}
	if scope, _, _ := strings.Cut(s, ":"); scope == "" || strings.ContainsAny(scope, "{}") {
		return keyTemplate{}, fmt.Errorf("key %q: the first segment (the scope) must be a literal name", s)
	}
	return t, nil
}

// parseMemberTemplate compiles a Distinct rule's member template; it needs
// at least one placeholder (a constant member would count once).
func parseMemberTemplate(s string) (keyTemplate, error) {
	t, err := parseTemplate("member", s)
	if err != nil {
		return t, err
	}
	if len(t.parts) < 2 {
		return keyTemplate{}, fmt.Errorf("member %q: want at least one {field} placeholder", s)
	}
	return t, nil
}

// parseTemplate compiles literal text and {field} placeholders; what names
// the template in errors.
func parseTemplate(what, s string) (keyTemplate, error) {
	t := keyTemplate{raw: s}
	rest := s
	for {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			if strings.IndexByte(rest, '}') >= 0 {
				return keyTemplate{}, fmt.Errorf("%s %q: unmatched '}'", what, s)
			}
			t.parts = append(t.parts, rest)
			break
		}
		if strings.IndexByte(rest[:open], '}') >= 0 {
			return keyTemplate{}, fmt.Errorf("%s %q: unmatched '}'", what, s)
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return keyTemplate{}, fmt.Errorf("%s %q: unmatched '{'", what, s)
		}
		name := rest[open+1 : open+end]
		if name == "" || strings.ContainsAny(name, "{:") {
			return keyTemplate{}, fmt.Errorf("%s %q: bad placeholder {%s}", what, s, name)
		}
		t.parts = append(t.parts, rest[:open], name)
		rest = rest[open+end+1:]
	}
	return t, nil
}

// render fills the template from fields. ok is false when a field is empty
// or missing: the limit then does not apply to this task (a rule keyed on
// {from} does not apply to a send through a messaging service).
func (t keyTemplate) render(fields map[string]string) (key string, ok bool) {
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
		b.WriteString(v)
	}
	return b.String(), true
}
