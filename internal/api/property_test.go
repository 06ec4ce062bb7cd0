package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"regexp/syntax"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/nyaruka/phonenumbers"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/tasks"
)

// The document's own string formats, as a client generated from it
// registers them: e164 is a number libphonenumber knows as valid, in E.164;
// whatsapp-e164 is "whatsapp:" and such a number.
func init() {
	openapi3.DefineStringFormatValidator("e164", openapi3.NewCallbackValidator(checkE164))
	openapi3.DefineStringFormatValidator("whatsapp-e164", openapi3.NewCallbackValidator(func(s string) error {
		n, ok := strings.CutPrefix(s, "whatsapp:")
		if !ok {
			return errors.New("want whatsapp: and an E.164 number")
		}
		return checkE164(n)
	}))
}

func checkE164(s string) error {
	e, err := tasks.NormalizePhone(s)
	if err != nil {
		return err
	}
	if e != s {
		return fmt.Errorf("%q is not in E.164 form", s)
	}
	return nil
}

// TestPropertyDocumentMatchesServer is a property-based run driven by the
// OpenAPI document, as schemathesis would do it: for each enqueue
// operation it generates request bodies from the document's schemas
// (seeded, so every run sends the same ones), keeps those the document
// accepts, and sends them to the API over a real Redis. Every one must be
// accepted (202, or 200 with every batch item 202), never refused with 422,
// and every response must conform to the document. Bodies made invalid by
// one mutation (a missing required member, a wrong type, an unknown member)
// that the document refuses must get a 4xx.
//
// What the document cannot know is set so that it does not refuse: the
// egress policy admits every address (egress.allow_cidrs 0.0.0.0/0 and
// ::/0), every channel is enabled, the API key has no tenant, the per-key
// limit is far away, Redis is emptied before each request (an idempotency
// key is used once), and generated URLs have IPv4 hosts (no DNS).
func TestPropertyDocumentMatchesServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{keys: keysEnv, config: func(c *config.Config) {
		c.Egress.AllowCIDRs = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
		c.HTTP.APIBurst = 1_000_000
	}})
	g := &generator{r: rand.New(rand.NewPCG(20, 2026)), phones: examplePhones()}
	ops := []string{"/v1/messages", "/v1/messages/batch", "/v1/webhooks", "/v1/webhooks/batch", "/v1/calls", "/v1/calls/batch"}
	const perOp = 50
	valid, invalid, tries := 0, 0, 0
	for _, path := range ops {
		schema := e.doc.Paths.Find(path).Post.RequestBody.Value.Content["application/json"].Schema.Value
		for n := 0; n < perOp; {
			tries++
			require.Less(t, tries, 40*len(ops)*perOp, "the generator makes too few bodies the document accepts")
			body := g.value(schema, 0)
			raw, err := json.Marshal(body)
			require.NoError(t, err)
			if e.validRequest(path, raw) != nil || repeatsKey(body) {
				continue
			}
			n++
			valid++
			require.NoError(t, e.rdb.FlushDB(context.Background()).Err())
			r := e.send(path, raw)
			require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, r.status, "%s %s: %s", path, raw, r.body)
			if strings.HasSuffix(path, "/batch") {
				var b api.BatchResponse
				require.NoError(t, json.Unmarshal(r.body, &b))
				for _, res := range b.Results {
					require.Equal(t, http.StatusAccepted, res.Status, "%s item %d of %s: %s", path, res.Index, raw, r.body)
				}
			}

			// One mutation of the valid body that the document refuses.
			bad, ok := g.mutate(body)
			if !ok {
				continue
			}
			braw, err := json.Marshal(bad)
			require.NoError(t, err)
			if e.validRequest(path, braw) == nil {
				continue // e.g. an optional member removed: still valid
			}
			invalid++
			require.NoError(t, e.rdb.FlushDB(context.Background()).Err())
			r = e.send(path, braw)
			if strings.HasSuffix(path, "/batch") && r.status == http.StatusOK {
				// A bad item is that item's problem, not the batch's.
				var b api.BatchResponse
				require.NoError(t, json.Unmarshal(r.body, &b))
				require.Positive(t, b.Rejected, "%s %s: %s", path, braw, r.body)
				continue
			}
			require.True(t, r.status >= 400 && r.status < 500, "%s %s: got %d %s", path, braw, r.status, r.body)
		}
	}
	t.Logf("%d schema-valid requests accepted, %d schema-invalid ones refused, %d bodies generated", valid, invalid, tries)
	require.Positive(t, invalid)
}

// repeatsKey reports a batch whose items share an idempotency key: the
// second is the first's duplicate (the batch's description says so), not
// a new send.
func repeatsKey(body any) bool {
	m, _ := body.(map[string]any)
	items, _ := m["items"].([]any)
	seen := map[any]bool{}
	for _, it := range items {
		k, ok := it.(map[string]any)["idempotency_key"]
		if ok && seen[k] {
			return true
		}
		seen[k] = true
	}
	return false
}

// validRequest checks a POST body against the document.
func (e *env) validRequest(path string, raw []byte) error {
	req := e.postRequest(path, raw)
	route, params, err := e.router.FindRoute(req)
	require.NoError(e.t, err)
	return openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: authenticate, MultiError: true},
	})
}

func (e *env) postRequest(path string, raw []byte) *http.Request {
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+path, bytes.NewReader(raw))
	require.NoError(e.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+adminKey)
	return req
}

type sent struct {
	status int
	body   []byte
}

// send POSTs raw and checks the response against the document.
func (e *env) send(path string, raw []byte) sent {
	t := e.t
	resp, err := e.srv.Client().Do(e.postRequest(path, raw))
	require.NoError(t, err)
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	req := e.postRequest(path, raw)
	route, params, err := e.router.FindRoute(req)
	require.NoError(t, err)
	err = openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 resp.StatusCode, Header: resp.Header, Body: io.NopCloser(bytes.NewReader(rb)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	})
	require.NoError(t, err, "response %d to %s %s breaks the document: %s", resp.StatusCode, path, raw, rb)
	return sent{resp.StatusCode, rb}
}

// examplePhones are libphonenumber's example numbers of every region and
// type, sorted: what the generator draws numbers of format e164 from.
func examplePhones() []string {
	var out []string
	for region := range phonenumbers.GetSupportedRegions() {
		for _, typ := range []phonenumbers.PhoneNumberType{phonenumbers.FIXED_LINE, phonenumbers.MOBILE, phonenumbers.TOLL_FREE} {
			if n := phonenumbers.GetExampleNumberForType(region, typ); n != nil {
				out = append(out, phonenumbers.Format(n, phonenumbers.E164))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// generator makes JSON values from schemas: random within the schema's
// keywords, checked by the caller against the whole document.
type generator struct {
	r      *rand.Rand
	phones []string
}

func (g *generator) pick(n int) int { return g.r.IntN(n) }

func (g *generator) value(s *openapi3.Schema, depth int) any {
	switch {
	case s.Const != nil:
		return s.Const
	case len(s.Enum) > 0:
		return s.Enum[g.pick(len(s.Enum))]
	case len(s.OneOf) > 0 && s.Properties == nil:
		return g.value(s.OneOf[g.pick(len(s.OneOf))].Value, depth)
	case len(s.AnyOf) > 0 && s.Type == nil:
		return g.value(s.AnyOf[g.pick(len(s.AnyOf))].Value, depth)
	}
	switch {
	case s.Type.Is("object") || s.Properties != nil:
		return g.object(s, depth)
	case s.Type.Is("array"):
		max := int(s.MinItems) + 3
		if s.MaxItems != nil && int(*s.MaxItems) < max {
			max = int(*s.MaxItems)
		}
		n := int(s.MinItems) + g.pick(max-int(s.MinItems)+1)
		out := make([]any, n)
		for i := range out {
			if s.Items != nil && s.Items.Value != nil {
				out[i] = g.value(s.Items.Value, depth+1)
			} else {
				out[i] = g.anyJSON(depth + 1)
			}
		}
		return out
	case s.Type.Is("string"):
		return g.str(s)
	case s.Type.Is("integer"):
		return g.pick(1000)
	case s.Type.Is("boolean"):
		return g.pick(2) == 0
	}
	return g.anyJSON(depth)
}

func (g *generator) object(s *openapi3.Schema, depth int) map[string]any {
	required := slices.Clone(s.Required)
	var others []string   // the other branches' members: left out
	if len(s.OneOf) > 0 { // "exactly one of": the branch's required members
		k := g.pick(len(s.OneOf))
		required = append(required, s.OneOf[k].Value.Required...)
		for i, b := range s.OneOf {
			if i != k {
				others = append(others, b.Value.Required...)
			}
		}
	}
	out := map[string]any{}
	names := make([]string, 0, len(s.Properties))
	for name := range s.Properties {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if slices.Contains(others, name) && !slices.Contains(required, name) {
			continue
		}
		if name == "send_at" { // (the document cannot say "at most 35 days from now")
			continue
		}
		if slices.Contains(required, name) || g.pick(3) == 0 {
			out[name] = g.value(s.Properties[name].Value, depth+1)
		}
	}
	switch ap := s.AdditionalProperties; {
	case ap.Schema != nil && ap.Schema.Value != nil: // a map (headers)
		for range g.pick(4) {
			out[g.str(s.PropertyNames.Value)] = g.value(ap.Schema.Value, depth+1)
		}
	case ap.Has != nil && *ap.Has && len(s.Properties) == 0: // any object
		for range g.pick(4) {
			out[g.text(1, 8)] = g.anyJSON(depth + 1)
		}
	}
	return out
}

// anyJSON is a small JSON value of any type.
func (g *generator) anyJSON(depth int) any {
	k := g.pick(6)
	if depth > 3 {
		k %= 4
	}
	switch k {
	case 0:
		return nil
	case 1:
		return g.pick(2) == 0
	case 2:
		return float64(g.pick(2000)-1000) / 8
	case 3:
		return g.text(0, 12)
	case 4:
		out := make([]any, g.pick(3))
		for i := range out {
			out[i] = g.anyJSON(depth + 1)
		}
		return out
	}
	out := map[string]any{}
	for range g.pick(3) {
		out[g.text(1, 6)] = g.anyJSON(depth + 1)
	}
	return out
}

func (g *generator) str(s *openapi3.Schema) string {
	switch s.Format {
	case "e164":
		return g.phones[g.pick(len(g.phones))]
	case "whatsapp-e164":
		return "whatsapp:" + g.phones[g.pick(len(g.phones))]
	case "date-time":
		t := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(g.r.Int64N(int64(10 * 365 * 24 * time.Hour))))
		return t.Format(time.RFC3339)
	case "uri": // IPv4 hosts: the run needs no DNS
		scheme := []string{"http", "https"}[g.pick(2)]
		u := fmt.Sprintf("%s://%d.%d.%d.%d", scheme, 1+g.pick(223), g.pick(256), g.pick(256), 1+g.pick(254))
		if g.pick(3) == 0 {
			u += fmt.Sprintf(":%d", 1+g.pick(65535))
		}
		return u + g.fromPattern(`^([/?#]([!-$&-~]|%[0-9A-Fa-f]{2})*)?$`)
	}
	pattern := s.Pattern
	if pattern == "" {
		for _, sub := range append(slices.Clone(s.AllOf), s.AnyOf...) {
			if sub.Value.Pattern != "" {
				pattern = sub.Value.Pattern
				break
			}
		}
	}
	max := 40
	if s.MaxLength != nil && int(*s.MaxLength) < max {
		max = int(*s.MaxLength)
	}
	if pattern == "" {
		return g.text(int(s.MinLength), max)
	}
	return g.fromPattern(pattern)
}

// interesting are characters beyond ASCII that the generator mixes in:
// Latin, CJK, an emoji (beyond U+FFFF), white space Go and JSON Schema
// treat differently from ASCII's, a control character.
var interesting = []rune{'é', 'ß', '漢', '🚀', '\u00a0', '\u2003', '\u3000', '\u0085', '\v', '\x01', '\x7f'}

// text is a string of min to max characters, mostly printable ASCII.
func (g *generator) text(min, max int) string {
	if max < min {
		max = min
	}
	n := min + g.pick(max-min+1)
	var b strings.Builder
	for range n {
		if g.pick(8) == 0 {
			b.WriteRune(interesting[g.pick(len(interesting))])
		} else {
			b.WriteByte(byte(0x20 + g.pick(0x5f)))
		}
	}
	return b.String()
}

// fromPattern is a string the regular expression matches (JSON Schema
// patterns are unanchored; the generated string is a whole match).
func (g *generator) fromPattern(pattern string) string {
	re, err := syntax.Parse(strings.NewReplacer(`\x85`, "\u0085", `\xa0`, "\u00a0").Replace(pattern), syntax.Perl)
	if err != nil {
		panic(fmt.Sprintf("pattern %q: %v", pattern, err))
	}
	var b strings.Builder
	g.emit(&b, re.Simplify())
	return b.String()
}

func (g *generator) emit(b *strings.Builder, re *syntax.Regexp) {
	reps := func(min, max int) int {
		if max < 0 {
			max = min + 6
		}
		return min + g.pick(max-min+1)
	}
	switch re.Op {
	case syntax.OpLiteral:
		b.WriteString(string(re.Rune))
	case syntax.OpCharClass:
		b.WriteRune(g.inClass(re.Rune))
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		b.WriteByte(byte(0x21 + g.pick(0x5e)))
	case syntax.OpCapture:
		g.emit(b, re.Sub[0])
	case syntax.OpConcat:
		for _, s := range re.Sub {
			g.emit(b, s)
		}
	case syntax.OpAlternate:
		g.emit(b, re.Sub[g.pick(len(re.Sub))])
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		min, max := re.Min, re.Max // OpRepeat's; max -1 is unbounded
		switch re.Op {
		case syntax.OpStar:
			min, max = 0, -1
		case syntax.OpPlus:
			min, max = 1, -1
		case syntax.OpQuest:
			min, max = 0, 1
		}
		for range reps(min, max) {
			g.emit(b, re.Sub[0])
		}
	}
}

// inClass picks a rune of the class (pairs of ranges): mostly printable
// ASCII, sometimes an interesting rune, else any non-surrogate in a range.
func (g *generator) inClass(ranges []rune) rune {
	in := func(r rune) bool {
		for i := 0; i < len(ranges); i += 2 {
			if r >= ranges[i] && r <= ranges[i+1] {
				return true
			}
		}
		return false
	}
	if g.pick(6) == 0 {
		if r := interesting[g.pick(len(interesting))]; in(r) {
			return r
		}
	}
	for range 8 {
		if r := rune(0x20 + g.pick(0x5f)); in(r) {
			return r
		}
	}
	for {
		i := 2 * g.pick(len(ranges)/2)
		lo, hi := ranges[i], min(ranges[i+1], 0x2FFFF)
		if hi < lo {
			continue
		}
		if r := lo + rune(g.pick(int(hi-lo)+1)); utf8.ValidRune(r) {
			return r
		}
	}
}

// mutate makes one change to a valid body that may make it invalid: a
// required member removed, a member of the wrong type, an unknown member;
// in a batch, to one item.
func (g *generator) mutate(body any) (any, bool) {
	m, ok := body.(map[string]any)
	if !ok {
		return nil, false
	}
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	if items, ok := out["items"].([]any); ok {
		items = slices.Clone(items)
		i := g.pick(len(items))
		mi, ok := g.mutate(items[i])
		if !ok {
			return nil, false
		}
		items[i] = mi
		out["items"] = items
		return out, true
	}
	names := make([]string, 0, len(out))
	for k := range out {
		names = append(names, k)
	}
	slices.Sort(names)
	name := names[g.pick(len(names))]
	switch g.pick(3) {
	case 0:
		delete(out, name)
	case 1:
		out[name] = []any{true, 7}
	default:
		out["x_"+g.fromPattern("^[a-z]{3,8}$")] = "unknown"
	}
	return out, true
}
