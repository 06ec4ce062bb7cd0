package worker

import (
	"fmt"
	"strings"
)

// keyTemplate is a compiled limit key template such as
// "whatsapp:pair:{phone_number_id}:{to}".
type keyTemplate struct {
	raw   string
	parts []string // literal text at even indexes, field names at odd
}

func parseKeyTemplate(s string) (keyTemplate, error) {
	t := keyTemplate{raw: s}
	rest := s
	for {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			if strings.IndexByte(rest, '}') >= 0 {
				return keyTemplate{}, fmt.Errorf("key %q: unmatched '}'", s)
			}
			t.parts = append(t.parts, rest)
			break
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return keyTemplate{}, fmt.Errorf("key %q: unmatched '{'", s)
		}
		name := rest[open+1 : open+end]
		if name == "" || strings.ContainsAny(name, "{:") {
			return keyTemplate{}, fmt.Errorf("key %q: bad placeholder {%s}", s, name)
		}
		t.parts = append(t.parts, rest[:open], name)
		rest = rest[open+end+1:]
	}
	if scope, _, _ := strings.Cut(s, ":"); scope == "" || strings.ContainsAny(scope, "{}") {
		return keyTemplate{}, fmt.Errorf("key %q: the first segment (the scope) must be a literal name", s)
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
