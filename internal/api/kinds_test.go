package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/tasks"
)

// TestMessageKindsRefusedAtEnqueue: what a provider would refuse in the
// message kinds of issue 24, refused at enqueue with the field named (422,
// a JSON Pointer per field), before anything is queued. The declared
// template order_shipped (channels.whatsapp.templates) has an image header,
// two body parameters and a quick reply and a URL button; its checks are
// the server's alone, the document cannot know templates.
func TestMessageKindsRefusedAtEnqueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{keys: keysEnv, config: func(c *config.Config) {
		c.Channels["whatsapp"].Templates = map[string]tasks.TemplateShape{
			"order_shipped": {Header: "image", BodyParams: 2, Buttons: []string{"quick_reply", "url"}},
		}
	}})
	wa := func(kv ...any) map[string]any { return with(whatsApp(), append([]any{"text", nil}, kv...)...) }
	shipped := func(edit func(t map[string]any)) map[string]any {
		tm := map[string]any{"name": "order_shipped", "language": "en_US", "parameters": []string{"Ann", "1042"},
			"header":  map[string]any{"type": "image", "link": "https://cdn.example.com/1042.jpg"},
			"buttons": []any{map[string]any{"index": 1, "sub_type": "url", "text": "o/1042"}}}
		edit(tm)
		return wa("template", tm)
	}
	btn := func(id, title string) map[string]any { return map[string]any{"id": id, "title": title} }
	var rows []any
	for i := range 11 {
		rows = append(rows, map[string]any{"id": strings.Repeat("r", i+1), "title": "Row"})
	}
	var urls []string
	for i := range 11 {
		urls = append(urls, "https://cdn.example.com/"+strings.Repeat("m", i+1)+".jpg")
	}
	for _, tc := range []struct {
		name     string
		body     map[string]any
		valid    reqValid // whether the API document accepts it (it cannot know templates)
		pointer  string
		contains string
	}{
		{"four reply buttons", wa("interactive", map[string]any{"type": "button", "body": "b", "buttons": []any{btn("1", "a"), btn("2", "b"), btn("3", "c"), btn("4", "d")}}),
			specInvalid, "/interactive/buttons", "4 buttons, want 1 to 3"},
		{"a caption on audio", wa("media", map[string]any{"type": "audio", "id": "1", "caption": "listen"}), specInvalid, "/media/caption", "audio messages have no caption"},
		{"11 media URLs", with(sms(), "media_urls", urls), specInvalid, "/media_urls", "11 URLs, want at most 10"},
		{"a header type the template lacks", shipped(func(t map[string]any) { t["header"] = map[string]any{"type": "text", "text": "Ann"} }),
			specValid, "/template/header/type", "text, but template order_shipped's header is image"},
		{"the template's header left out", shipped(func(t map[string]any) { delete(t, "header") }), specValid, "/template/header", "order_shipped's header is image: give its value"},
		{"one body parameter for two", shipped(func(t map[string]any) { t["parameters"] = []string{"Ann"} }), specValid, "/template/parameters", "1, but template order_shipped's body has 2"},
		{"a button the template lacks", shipped(func(t map[string]any) {
			t["buttons"] = append(t["buttons"].([]any), map[string]any{"index": 2, "sub_type": "quick_reply", "payload": "p"})
		}), specValid, "/template/buttons/1/index", "no button at index 2"},
		{"the template's URL suffix left out", shipped(func(t map[string]any) { delete(t, "buttons") }), specValid, "/template/buttons", "url button 1 needs its value"},
		{"a coupon code over 15 characters", wa("template", map[string]any{"name": "coupon", "language": "en_US",
			"buttons": []any{map[string]any{"index": 0, "sub_type": "copy_code", "coupon_code": "SUMMER-SALE-2026"}}}), specInvalid, "/template/buttons/0/coupon_code", "16 characters, want at most 15"},
		{"both link and id", wa("media", map[string]any{"type": "image", "id": "1", "link": "https://a.example/x.jpg"}), specInvalid, "/media/link", "set exactly one (got both)"},
		{"a caption on a sticker", wa("media", map[string]any{"type": "sticker", "id": "1", "caption": "hi"}), specInvalid, "/media/caption", "sticker messages have no caption"},
		{"a file name on an image", wa("media", map[string]any{"type": "image", "id": "1", "filename": "a.jpg"}), specInvalid, "/media/filename", "only a document has a file name"},
		{"a list of 11 rows", wa("interactive", map[string]any{"type": "list", "body": "b", "list_button": "Pick", "rows": rows}), specInvalid, "/interactive/rows", "11 rows, want 1 to 10"},
		{"a javascript: call-to-action", wa("interactive", map[string]any{"type": "cta_url", "body": "b", "display_text": "Open", "url": "javascript:alert(1)"}),
			specInvalid, "/interactive/url", "must be an absolute http or https URL"},
		{"a list with an image header", wa("interactive", map[string]any{"type": "list", "body": "b", "list_button": "Pick", "rows": rows[:2],
			"header": map[string]any{"type": "image", "id": "1"}}), specInvalid, "/interactive/header/type", "a list message's header is text only"},
		{"a latitude off the map", wa("location", map[string]any{"latitude": 91, "longitude": 0}), specInvalid, "/location/latitude", "91, want -90 to 90"},
		{"six contacts", wa("contacts", []any{map[string]any{}, map[string]any{}, map[string]any{}, map[string]any{}, map[string]any{}, map[string]any{}}),
			specInvalid, "/contacts", "6 contacts, want 1 to 5"},
		{"a reaction in words", wa("reaction", map[string]any{"message_id": "wamid.A", "emoji": "thumbs up"}), specInvalid, "/reaction/emoji", "want one emoji"},
		{"a link preview on an image", wa("media", map[string]any{"type": "image", "id": "1"}, "preview_url", true), specInvalid, "/preview_url", "only a text message has a link preview"},
		{"a Content Template with a body", with(sms(), "content_sid", "HX0123456789abcdef0123456789abcdef"), specInvalid, "/body", "set one (the Content Template holds the text)"},
		{"two media from a WhatsApp sender", with(sms(), "from", "whatsapp:+12025550100", "to", "whatsapp:+12025550125", "media_urls", urls[:2]),
			specInvalid, "/media_urls", "2 URLs, want at most 1"},
		{"a validity period over 10 h", with(sms(), "validity_period", 36001), specInvalid, "/validity_period", "36001 seconds, want 1 to 36000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", "/v1/messages", tc.body, bearer(adminKey), tc.valid)
			require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s", r.Body)
			p := r.problem(t)
			require.NotEmpty(t, p.Errors)
			require.Equal(t, tc.pointer, p.Errors[0].Pointer, "%+v", p.Errors)
			require.Contains(t, p.Errors[0].Detail, tc.contains)
		})
	}
	// The template's declared shape, filled in full, is taken.
	r := e.do("POST", "/v1/messages", shipped(func(map[string]any) {}), bearer(adminKey), specValid)
	require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
}

// Each listed webhook endpoint's secret signs for its own URL prefixes
// only: a delivery naming it to another URL, or naming none to its URL,
// is refused at the API (422 at /url), without the URL or the configured
// names in the answer; an unlisted name is refused at /endpoint.
func TestWebhookEndpointsBoundToTheirURLs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{keys: keysEnv, config: func(c *config.Config) {
		c.Channels["webhook"].Endpoints = map[string]config.WebhookEndpoint{
			"billing": {SecretEnv: "BILLING_SECRET", URLs: []string{"https://billing.example.com/hooks/"}},
		}
	}})
	hook := func(url, endpoint string) map[string]any {
		return with(webhook("evt-"+endpoint), "url", url, "endpoint", endpoint)
	}
	for _, tc := range []struct {
		name, pointer, contains string
		body                    map[string]any
	}{
		{"billing's secret for the caller's URL", "/url", "not under the urls of the endpoint named",
			hook("https://collect.attacker.example/hooks/?t=tok", "billing")},
		{"a climb out of billing's prefix", "/url", `must be in canonical form (one spelling a URL, docs/webhooks.md): its path must not hold a segment of dots and spaces only, such as ".."`,
			hook("https://billing.example.com/hooks/../admin", "billing")},
		{"billing's URL with the default secret", "/url", "under the urls of one of channels.webhook.endpoints",
			with(webhook("evt-d"), "url", "https://billing.example.com/hooks/paid")},
		{"billing's URL spelt with its default port", "/url", "must be in canonical form (one spelling a URL, docs/webhooks.md): leave out the port 443",
			with(webhook("evt-p"), "url", "https://billing.example.com:443/hooks/paid")},
		{"an endpoint not listed", "/endpoint", "not one of channels.webhook.endpoints",
			hook("https://billing.example.com/hooks/paid", "crm")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", "/v1/webhooks", tc.body, bearer(adminKey), specValid)
			require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s", r.Body)
			p := r.problem(t)
			require.NotEmpty(t, p.Errors)
			require.Equal(t, tc.pointer, p.Errors[0].Pointer, "%+v", p.Errors)
			require.Contains(t, p.Errors[0].Detail, tc.contains)
			require.NotContains(t, string(r.Body), "attacker")
			require.NotContains(t, string(r.Body), "billing")
		})
	}
	r := e.do("POST", "/v1/webhooks", hook("https://billing.example.com/hooks/paid?x=1", "billing"), bearer(adminKey), specValid)
	require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
	r = e.do("POST", "/v1/webhooks", with(webhook("evt-o"), "url", "https://other.example.com/hook"), bearer(adminKey), specValid)
	require.Equal(t, http.StatusAccepted, r.Status, "the default secret still signs for URLs no endpoint holds: %s", r.Body)
}

// A reaction takes any one emoji Meta shows, its modifiers included: the
// API document's pattern and the server's check agree on each (do checks
// the request against the document as well as the answer).
func TestReactionEmojiForms(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{keys: keysEnv})
	for _, emoji := range []string{"👍", "👍🏽", "❤️", "1️⃣", "#️⃣", "🇧🇷", "👨‍👩‍👧", "🏳️‍🌈", ""} {
		body := with(whatsApp(), "text", nil, "reaction", map[string]any{"message_id": "wamid.A", "emoji": emoji})
		r := e.do("POST", "/v1/messages", body, bearer(adminKey), specValid)
		require.Equal(t, http.StatusAccepted, r.Status, "%q: %s", emoji, r.Body)
	}
	for _, emoji := range []string{"ok", "1", "👍 ", "👍👍👍👍👍👍👍👍👍"} {
		body := with(whatsApp(), "text", nil, "reaction", map[string]any{"message_id": "wamid.A", "emoji": emoji})
		r := e.do("POST", "/v1/messages", body, bearer(adminKey), specInvalid)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%q: %s", emoji, r.Body)
	}
}
