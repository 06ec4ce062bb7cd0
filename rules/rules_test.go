package rules

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/throttle"
)

var waFields = []string{"phone_number_id", "to"}

func TestParseKeyErrors(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]string{
		"whatsapp":              `key "whatsapp": want at least two segments, whatsapp:<what>[:…]`,
		"whatsapp::{to}":        `key "whatsapp::{to}": segment 2 is empty`,
		"whatsapp:pair:{to":     `key "whatsapp:pair:{to": "{" without "}"`,
		"whatsapp:pair}{to}":    `key "whatsapp:pair}{to}": "}" without "{"`,
		"whatsapp:pair:{phone}": `key "whatsapp:pair:{phone}": placeholder {phone} is not a field of whatsapp tasks (want {phone_number_id}, {to})`,
		"whatsapp:pair:{}":      `key "whatsapp:pair:{}": bad placeholder {}`,
		"sms:x:{to}":            `key "sms:x:{to}": scope "sms" must be the channel name "whatsapp"`,
		"{to}:x":                `key "{to}:x": scope "{to}" must be the channel name "whatsapp"`,
		"whatsapp:a b":          `key "whatsapp:a b": spaces and control characters are not allowed`,
		"whatsapp:pair:{phone_number_id}:{to}:ok": "",
	} {
		_, err := ParseKey("whatsapp", key, waFields)
		if want == "" {
			require.NoError(t, err, key)
			continue
		}
		require.EqualError(t, err, want, key)
	}
	_, err := ParseKey("test", "test:{anything}", nil)
	require.NoError(t, err, "nil fields accept any name")
	for member, want := range map[string]string{
		"":       `member "": want a template such as {to}`,
		"all":    `member "all": want at least one placeholder naming a task field ({phone_number_id}, {to}); a constant member counts once`,
		"{to":    `member "{to": "{" without "}"`,
		"{x}":    `member "{x}": placeholder {x} is not a field of whatsapp tasks (want {phone_number_id}, {to})`,
		"a-{to}": "",
	} {
		_, err := ParseMember("whatsapp", member, waFields)
		if want == "" {
			require.NoError(t, err, member)
			continue
		}
		require.EqualError(t, err, want, member)
	}
}

func TestRenderAndMatch(t *testing.T) {
	t.Parallel()
	pair, err := ParseKey("whatsapp", "whatsapp:pair:{phone_number_id}:{to}", waFields)
	require.NoError(t, err)
	key, ok := pair.Render(map[string]string{"phone_number_id": "106540352242922", "to": "+12025550123"})
	require.True(t, ok)
	require.Equal(t, "whatsapp:pair:106540352242922:+12025550123", key)
	require.True(t, pair.Match(key))
	_, ok = pair.Render(map[string]string{"phone_number_id": "1"})
	require.False(t, ok, "an empty field: the rule does not apply")
	require.Equal(t, []string{"phone_number_id", "to"}, pair.Fields())

	host, err := ParseKey("webhook", "webhook:host:{host}", nil)
	require.NoError(t, err)
	for key, want := range map[string]bool{
		"webhook:host:example.com":      true,
		"webhook:host:example.com:8443": true, // a final placeholder takes the rest
		"webhook:host:":                 false,
		"webhook:hosts:example.com":     false,
		"webhook:host":                  false,
	} {
		require.Equal(t, want, host.Match(key), key)
	}
	for key, want := range map[string]bool{
		"whatsapp:pair:1:+1":   true,
		"whatsapp:pair:1":      false,
		"whatsapp:pair:1:2:3":  true, // {to} is final: it takes "2:3"
		"whatsapp:pair::+1":    false,
		"whatsapp:daily:1:+1":  false,
		"whatsapp:pair:1:+1:x": true,
	} {
		require.Equal(t, want, pair.Match(key), key)
	}
	mixed, err := ParseKey("whatsapp", "whatsapp:tier-{phone_number_id}:x", waFields)
	require.NoError(t, err)
	require.True(t, mixed.Match("whatsapp:tier-123:x"))
	require.False(t, mixed.Match("whatsapp:tier-:x"))
	require.False(t, mixed.Match("whatsapp:tier-1:2:x"), "a placeholder before the end holds no ':'")
}

func TestMatchPrefix(t *testing.T) {
	t.Parallel()
	pair, _ := ParseKey("whatsapp", "whatsapp:pair:{phone_number_id}:{to}", waFields)
	daily, _ := ParseKey("whatsapp", "whatsapp:daily:{to}", waFields)
	for prefix, want := range map[string][2]bool{ // pair, daily
		"":                       {true, true},
		"whatsapp:":              {true, true},
		"whatsapp:pa":            {true, false},
		"whatsapp:pair:":         {true, false},
		"whatsapp:pair:123":      {true, false},
		"whatsapp:pair:123:":     {true, false},
		"whatsapp:pair:123:+1":   {true, false},
		"whatsapp:daily:+1202":   {false, true},
		"whatsapp:daily:+1:x":    {false, true},
		"whatsapp:number:":       {false, false},
		"sms:":                   {false, false},
		"whatsapp:pair:123:+1:x": {true, false},
	} {
		require.Equal(t, want[0], pair.MatchPrefix(prefix), "pair %q", prefix)
		require.Equal(t, want[1], daily.MatchPrefix(prefix), "daily %q", prefix)
	}
}

func TestCheckNamesTheField(t *testing.T) {
	t.Parallel()
	g := throttle.Limit{Name: "g", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(10), Burst: 2}
	dist := throttle.Limit{Name: "tier", Algorithm: throttle.Distinct, Rate: throttle.PerDay(250)}
	for _, c := range []struct {
		rule  Rule
		field string
		want  string
	}{
		{Rule{Limit: g, Key: "whatsapp:x:{to"}, FieldKey, `"{" without "}"`},
		{Rule{Limit: dist, Key: "whatsapp:t:{phone_number_id}"}, FieldMember, `distinct limit "tier": member "": want a template such as {to}`},
		{Rule{Limit: g, Key: "whatsapp:x:{to}", Member: "{to}"}, FieldMember, "member is only used by distinct limits, not gcra"},
		{Rule{Limit: throttle.Limit{Name: "w", Algorithm: throttle.FixedWindow, Rate: throttle.Rate{Limit: 1, Period: 6e9}}, Key: "whatsapp:x:{to}"}, throttle.FieldRate, "window 6s: fixed_window needs one of"},
		{Rule{Limit: throttle.Limit{Name: "m", Algorithm: throttle.MinInterval}, Key: "whatsapp:x:{to}"}, throttle.FieldInterval, "interval: want >= 1ms"},
		{Rule{Limit: g, Key: "whatsapp:x:{to}", Cost: 3}, FieldCost, "3 is more than the limit admits at once (2, its burst)"},
		{Rule{Limit: throttle.Limit{Name: "z", Algorithm: "zigzag"}, Key: "whatsapp:x:{to}"}, "algorithm", `algorithm "zigzag": want one of`},
	} {
		err := c.rule.Check("whatsapp", waFields)
		var fe *FieldError
		require.True(t, errors.As(err, &fe), "%v", err)
		require.Equal(t, c.field, fe.Field, "%v", err)
		require.ErrorContains(t, err, c.want)
	}
	require.NoError(t, Rule{Limit: dist, Key: "whatsapp:t:{phone_number_id}", Member: "{to}", Cost: 5}.Check("whatsapp", waFields),
		"distinct counts a new member 1 whatever the cost")
}

func TestCompileRequests(t *testing.T) {
	t.Parallel()
	tput := throttle.Limit{Name: "throughput", Algorithm: throttle.FixedWindow, Rate: throttle.PerSecond(80)}
	pair := throttle.Limit{Name: "pair", Algorithm: throttle.GCRA, Rate: throttle.Rate{Limit: 1, Period: 6e9}, Burst: 1}
	tier := throttle.Limit{Name: "tier", Algorithm: throttle.Distinct, Rate: throttle.PerDay(250)}
	rs := []Rule{
		{Limit: tput, Key: "whatsapp:number:{phone_number_id}", Cost: 1},
		{Limit: pair, Key: "whatsapp:pair:{phone_number_id}:{to}"},
		{Limit: tier, Key: "whatsapp:tier:{phone_number_id}", Member: "{to}"},
	}
	set, err := Compile("whatsapp", "", waFields, rs)
	require.NoError(t, err)
	got := set.Requests(map[string]string{"phone_number_id": "1", "to": "+12025550123"})
	want := []throttle.Request{
		{Key: "whatsapp:number:1", Limit: tput, Cost: 1},
		{Key: "whatsapp:pair:1:+12025550123", Limit: pair},
		{Key: "whatsapp:tier:1", Limit: tier, Member: "+12025550123"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Requests (-want +got):\n%s", diff)
	}
	require.Len(t, set.Requests(map[string]string{"phone_number_id": "1"}), 1, "rules naming an empty field do not apply")
	require.Equal(t, rs, set.Rules())

	_, err = Compile("whatsapp", "", waFields, []Rule{rs[0], {Limit: pair, Key: "whatsapp:pair:{to"}})
	require.EqualError(t, err, `rules[1]: key "whatsapp:pair:{to": "{" without "}"`)

	r, ok := Match(rs, "", "whatsapp:pair:1:+12025550123")
	require.True(t, ok)
	require.Equal(t, "pair", r.Limit.Name)
	_, ok = Match(rs, "", "whatsapp:other:1")
	require.False(t, ok)
	names := func(rs []Rule) (out []string) {
		for _, r := range rs {
			out = append(out, r.Limit.Name)
		}
		return out
	}
	require.Equal(t, []string{"throughput", "pair", "tier"}, names(MatchPrefix(rs, "", "whatsapp:")))
	require.Equal(t, []string{"pair"}, names(MatchPrefix(rs, "", "whatsapp:pa")))
	require.Empty(t, MatchPrefix(rs, "", "sms:"))
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	for want, r := range map[string]Rule{
		"80/s":               {Limit: throttle.Limit{Algorithm: throttle.FixedWindow, Rate: throttle.PerSecond(80)}},
		"1/6s burst 1":       {Limit: throttle.Limit{Algorithm: throttle.GCRA, Rate: throttle.Rate{Limit: 1, Period: 6e9}}},
		"max 100, lease 30s": {Limit: throttle.Limit{Algorithm: throttle.Concurrency, Max: 100, Lease: throttle.DefaultLease}},
		"interval 6s":        {Limit: throttle.Limit{Algorithm: throttle.MinInterval, Interval: 6e9}},
		"2000/d of {to}":     {Limit: throttle.Limit{Algorithm: throttle.Distinct, Rate: throttle.PerDay(2000)}, Member: "{to}"},
	} {
		require.Equal(t, want, r.Describe())
	}
}

func TestCheckKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		key     string
		pattern bool
		want    string
	}{
		{"whatsapp:daily:+12025550123", false, ""},
		{"whatsapp:daily:*", true, ""},
		{"", false, "empty key"},
		{"whatsapp:*:x", true, "'*' may only end a pattern"},
		{"whatsapp:daily:*", false, "'*' is not allowed here"},
		{"sluice:{whatsapp}:x", false, "braces are not allowed"},
		{"a b", false, "spaces and control characters"},
		{":x", false, "want scope:resource:id"},
		{"*", true, "want scope:resource:id"},
	} {
		err := CheckKey(c.key, c.pattern)
		if c.want == "" {
			require.NoError(t, err, c.key)
		} else {
			require.ErrorContains(t, err, c.want, c.key)
		}
	}
}

// FuzzParseKey: the parser never panics, and a template it accepts renders
// (from non-empty fields without ':') a key that it matches, and whose every
// prefix it matches as a pattern.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"whatsapp:pair:{phone_number_id}:{to}", "whatsapp:tier-{to}:x", "whatsapp:{to", "whatsapp::x", "whatsapp:}{", "whatsapp:{to}{to}"} {
		f.Add(s, "106540352242922")
	}
	f.Fuzz(func(t *testing.T, key, value string) {
		tmpl, err := ParseKey("whatsapp", key, waFields)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "key ") {
				t.Fatalf("ParseKey(%q) error does not name the key: %v", key, err)
			}
			return
		}
		if value == "" || strings.Contains(value, ":") {
			return
		}
		rendered, ok := tmpl.Render(map[string]string{"phone_number_id": value, "to": value})
		if !ok {
			t.Fatalf("Render of %q with every field set failed", key)
		}
		if !tmpl.Match(rendered) {
			t.Fatalf("template %q does not match its own key %q", key, rendered)
		}
		for i := range len(rendered) + 1 {
			if !tmpl.MatchPrefix(rendered[:i]) {
				t.Fatalf("template %q does not match prefix %q of its key %q", key, rendered[:i], rendered)
			}
		}
	})
}

func ExampleCompile() {
	pair := throttle.Limit{Name: "pair", Algorithm: throttle.GCRA, Rate: throttle.Rate{Limit: 1, Period: 6e9}, Burst: 1}
	set, err := Compile("whatsapp", "", []string{"phone_number_id", "to"}, []Rule{{Limit: pair, Key: "whatsapp:pair:{phone_number_id}:{to}"}})
	if err != nil {
		panic(err)
	}
	for _, r := range set.Requests(map[string]string{"phone_number_id": "106540352242922", "to": "+12025550123"}) {
		fmt.Println(r.Key, r.Limit.Name)
	}
	// Output:
	// whatsapp:pair:106540352242922:+12025550123 pair
}

func TestSpreadBy(t *testing.T) {
	t.Parallel()
	tput := throttle.Limit{Name: "throughput", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(80), Burst: 1}
	pair := throttle.Limit{Name: "pair", Algorithm: throttle.GCRA, Rate: throttle.Rate{Limit: 1, Period: 6e9}, Burst: 1}
	daily := throttle.Limit{Name: "daily", Algorithm: throttle.FixedWindow, Rate: throttle.PerDay(250)}
	rs := []Rule{
		{Limit: tput, Key: "whatsapp:number:{phone_number_id}"},
		{Limit: pair, Key: "whatsapp:pair:{phone_number_id}:{to}"},
		{Limit: daily, Key: "whatsapp:daily:{to}"},
	}
	set, err := Compile("whatsapp", "phone_number_id", waFields, rs)
	require.NoError(t, err)
	got := set.Requests(map[string]string{"phone_number_id": "1065", "to": "+12025550123"})
	want := []throttle.Request{
		{Key: "whatsapp/1065:number:1065", Limit: tput},
		{Key: "whatsapp/1065:pair:1065:+12025550123", Limit: pair},
		{Key: "whatsapp:daily:+12025550123", Limit: daily}, // names no number: the channel's scope
	}
	require.Equal(t, want, got)
	require.True(t, throttle.Reservable(got))
	for _, k := range []string{"whatsapp/1065:number:1065", "whatsapp:daily:+1"} {
		require.Equal(t, "whatsapp", ChannelOf(k))
		r, ok := Match(rs, "phone_number_id", k)
		require.True(t, ok, k)
		require.Equal(t, k != "whatsapp:daily:+1", r.Limit.Algorithm == throttle.GCRA, k)
	}
	_, ok := Match(rs, "phone_number_id", "whatsapp:number:1065")
	require.False(t, ok, "a spread rule's keys are spread")
	require.Len(t, MatchPrefix(rs, "phone_number_id", "whatsapp/"), 2)

	// A host:port stays one segment of the scope.
	host, err := ParseKey("webhook", "webhook:host:{host}", nil)
	require.NoError(t, err)
	k, ok := host.SpreadBy("host").Render(map[string]string{"host": "h.example:8443%"})
	require.True(t, ok)
	require.Equal(t, "webhook/h.example%3A8443%25:host:h.example:8443%", k)
	require.True(t, host.SpreadBy("host").Match(k))
	require.Equal(t, []string{"host"}, host.SpreadBy("host").Fields())
	require.Equal(t, host, host.SpreadBy("to"), "a template that does not name the field is kept")

	// A send's GCRA limits are decided in one scope: each must name the field.
	_, err = Compile("whatsapp", "to", waFields, rs)
	require.EqualError(t, err, `rules[0]: key: key "whatsapp:number:{phone_number_id}" does not name {to}: with spread_by to every gcra limit's key must, so that a send's paced limits share one scope`)
}
