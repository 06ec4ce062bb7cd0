package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-dev/sluice/tasks"
)

// fieldNames returns the placeholders a key template of channel may use:
// tasks.FieldNames of the channel's task type, the one registry.
func fieldNames(channel string) ([]string, bool) {
	taskType, ok := tasks.ChannelTaskType(channel)
	if !ok {
		return nil, false
	}
	return tasks.FieldNames(taskType)
}

// checkKey validates a limit rule's key template: ':'-separated non-empty
// segments, at least two; the first is the channel name; the others are
// literal text and {field} placeholders naming fields of the channel's tasks.
func checkKey(channel, key string) error {
	if strings.ContainsFunc(key, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Errorf("key %q: spaces and control characters are not allowed", key)
	}
	segs := strings.Split(key, ":")
	if len(segs) < 2 {
		return fmt.Errorf("key %q: want at least two segments, %s:<what>[:…]", key, channel)
	}
	for i, seg := range segs {
		if seg == "" {
			return fmt.Errorf("key %q: segment %d is empty", key, i+1)
		}
	}
	if segs[0] != channel {
		return fmt.Errorf("key %q: scope %q must be the channel name %q", key, segs[0], channel)
	}
	for _, seg := range segs[1:] {
		if _, err := placeholders("key", key, seg, channel); err != nil {
			return err
		}
	}
	return nil
}

// checkMember validates a distinct rule's member template, the subject the
// rule counts: literal text and at least one {field} placeholder naming a
// field of the channel's tasks ("{to}"), no spaces or control characters.
func checkMember(channel, member string) error {
	if member == "" {
		return fmt.Errorf("member %q: want a template such as {to}", member)
	}
	if strings.ContainsFunc(member, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Errorf("member %q: spaces and control characters are not allowed", member)
	}
	n, err := placeholders("member", member, member, channel)
	if err != nil {
		return err
	}
	if n == 0 {
		fields, _ := fieldNames(channel)
		return fmt.Errorf("member %q: want at least one placeholder naming a task field ({%s}); a constant member counts once", member, strings.Join(fields, "}, {"))
	}
	return nil
}

// placeholders checks the {field} placeholders of s, a part of template tmpl
// (a key or a member, what), and returns how many there are.
func placeholders(what, tmpl, s, channel string) (int, error) {
	fields, _ := fieldNames(channel)
	n := 0
	for rest := s; rest != ""; {
		i := strings.IndexAny(rest, "{}")
		if i < 0 {
			break
		}
		if rest[i] == '}' {
			return n, fmt.Errorf("%s %q: \"}\" without \"{\"", what, tmpl)
		}
		end := strings.IndexByte(rest[i:], '}')
		if end < 0 {
			return n, fmt.Errorf("%s %q: \"{\" without \"}\"", what, tmpl)
		}
		name := rest[i+1 : i+end]
		if !slices.Contains(fields, name) {
			return n, fmt.Errorf("%s %q: placeholder {%s} is not a field of %s tasks (want {%s})",
				what, tmpl, name, channel, strings.Join(fields, "}, {"))
		}
		n++
		rest = rest[i+end+1:]
	}
	return n, nil
}
