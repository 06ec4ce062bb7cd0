package campaign

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/tasks"
)

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	read := func(in string) *Result {
		t.Helper()
		res, err := Read(strings.NewReader(in), Options{})
		require.NoError(t, err)
		return res
	}
	a := read("to,name,order_id\n+12025550123,Ava,ORD-1\n+12025550124,Noah,ORD-2\n")
	moved := read("to,name,order_id\n\n+1 (202) 555-0124,Noah,ORD-2\n+1 202 555 0123,Ava,ORD-1\n")
	key := func(res *Result, i int) string {
		return IdempotencyKey("spring-sale", "whatsapp", res.Rows[i], res.Columns)
	}

	// Pinned: changing the encoding would re-send every campaign re-run
	// across an upgrade.
	require.Equal(t, "whatsapp-3b1016ffc3f76f21cafafc2a86ca8757", key(a, 0))
	require.Regexp(t, regexp.MustCompile(`^whatsapp-[0-9a-f]{32}$`), key(a, 1))

	// Rows that moved or were reformatted keep their key.
	require.Equal(t, key(a, 0), key(moved, 1))
	require.Equal(t, key(a, 1), key(moved, 0))

	row := a.Rows[0]
	distinct := map[string]string{
		"base":     IdempotencyKey("spring-sale", "whatsapp", row, a.Columns),
		"campaign": IdempotencyKey("summer-sale", "whatsapp", row, a.Columns),
		"channel":  IdempotencyKey("spring-sale", "sms", row, a.Columns),
		"other":    key(a, 1),
	}
	edited := row
	edited.Params = map[string]string{"to": row.To, "name": "Ava", "order_id": "ORD-9"}
	distinct["param"] = IdempotencyKey("spring-sale", "whatsapp", edited, a.Columns)
	// Field boundaries are part of the encoding: ("ab","c") != ("a","bc").
	x := Row{To: "+12025550123", Params: map[string]string{"p": "ab", "q": "c"}}
	y := Row{To: "+12025550123", Params: map[string]string{"p": "a", "q": "bc"}}
	distinct["x"] = IdempotencyKey("c", "sms", x, []string{"to", "p", "q"})
	distinct["y"] = IdempotencyKey("c", "sms", y, []string{"to", "p", "q"})
	seen := map[string]string{}
	for name, k := range distinct {
		if other, dup := seen[k]; dup {
			t.Errorf("%s and %s share key %s", name, other, k)
		}
		seen[k] = name
	}

	// Keys are valid asynq task IDs for every channel.
	for _, ch := range tasks.Channels() {
		p := tasks.SMSSend{From: "+12025550100", To: row.To, Body: "x", IdempotencyKey: IdempotencyKey("c", ch, row, a.Columns)}
		_, err := tasks.NewSMSSendTask(p)
		require.NoError(t, err, ch)
	}
}

func TestRender(t *testing.T) {
	t.Parallel()
	row := Row{To: "+12025550123", Params: map[string]string{"to": "+12025550123", "name": "Ava", "order_id": "ORD-100123"}}
	tests := []struct {
		tmpl, want, wantErr string
	}{
		{tmpl: "Hi {name}, order {order_id} shipped", want: "Hi Ava, order ORD-100123 shipped"},
		{tmpl: "{ name } <{to}>", want: "Ava <+12025550123>"},
		{tmpl: "no placeholders", want: "no placeholders"},
		{tmpl: "", want: ""},
		{tmpl: "literal {{name}} and }}", want: "literal {name} and }"},
		{tmpl: "héllo {name}ü", want: "héllo Avaü"},
		{tmpl: "Hi {nme}", wantErr: `template: unknown column "nme" (have: name, order_id, to)`},
		{tmpl: "Hi {}", wantErr: `template: unknown column ""`},
		{tmpl: "Hi {name", wantErr: `template: unclosed "{" at offset 3`},
		{tmpl: "Hi name}", wantErr: `template: unmatched "}" at offset 7`},
	}
	for _, tc := range tests {
		got, err := Render(tc.tmpl, row)
		if tc.wantErr != "" {
			require.ErrorContains(t, err, tc.wantErr, tc.tmpl)
			continue
		}
		require.NoError(t, err, tc.tmpl)
		require.Equal(t, tc.want, got, tc.tmpl)
	}
}
