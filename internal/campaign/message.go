package campaign

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// IdempotencyKey returns the key under which row's message is enqueued:
// channel + "-" + the first 32 hex digits of a SHA-256 over campaign,
// channel, row.To and row's parameter values in the order of columns
// (normally Result.Columns), e.g. "whatsapp-3f1c…" (41 characters for
// "whatsapp"). channel should be one of tasks.Channels(), whose names are
// valid in a key.
//
// The key depends only on content, not on the row's position: re-running the
// same file, or the same rows in another order, yields the same keys, so
// asynq rejects the repeats as duplicates instead of sending twice (within
// the task retention period), and exact duplicate rows share a key. Renaming
// the campaign, reordering or adding columns, or editing a value gives new
// keys. Annotation columns ("line", "reason") are not part of the key.
func IdempotencyKey(campaign, channel string, row Row, columns []string) string {
	b := appendField(nil, campaign)
	b = appendField(b, channel)
	sum := sha256.Sum256(contentKey(b, row, columns))
	return channel + "-" + hex.EncodeToString(sum[:16])
}

// Render replaces each {column} placeholder in tmpl with row's value for that
// column (spaces inside the braces are ignored: "{ name }"). Write "{{" and
// "}}" for literal braces. The error names the problem and where:
// `template: unknown column "nme" (have: name, order_id, to)`, or an
// unclosed "{" / unmatched "}" with its byte offset.
func Render(tmpl string, row Row) (string, error) {
	var b strings.Builder
	for i := 0; i < len(tmpl); {
		c := tmpl[i]
		switch {
		case (c == '{' || c == '}') && i+1 < len(tmpl) && tmpl[i+1] == c:
			b.WriteByte(c)
			i += 2
		case c == '{':
			end := strings.IndexByte(tmpl[i+1:], '}')
			if end < 0 {
				return "", fmt.Errorf("template: unclosed \"{\" at offset %d", i)
			}
			name := strings.TrimSpace(tmpl[i+1 : i+1+end])
			v, ok := row.Params[name]
			if !ok {
				return "", fmt.Errorf("template: unknown column %q (have: %s)", name, strings.Join(sortedKeys(row.Params), ", "))
			}
			b.WriteString(v)
			i += end + 2
		case c == '}':
			return "", fmt.Errorf("template: unmatched \"}\" at offset %d (write \"}}\" for a literal brace)", i)
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
