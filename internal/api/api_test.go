package api_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/producer"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
)

// Valid requests, one per channel; tests change copies.
func whatsApp() map[string]any {
	return map[string]any{"channel": "whatsapp", "phone_number_id": "106540352242922", "to": "+12025550123", "text": "Your order shipped"}
}

func whatsAppTemplate() map[string]any {
	return map[string]any{"channel": "whatsapp", "phone_number_id": "106540352242922", "to": "+12025550124",
		"template": map[string]any{"name": "order_update", "language": "en_US", "parameters": []string{"A-1001"}}, "priority": "high"}
}

func sms() map[string]any {
	return map[string]any{"channel": "sms", "from": "+12025550100", "to": "+12025550125", "body": "Your code is 123456"}
}

func webhook(key string) map[string]any {
	return map[string]any{"url": "https://hooks.example.com/orders", "event_type": "order.updated",
		"payload": map[string]any{"order": "A-1001"}, "idempotency_key": key}
}

func call() map[string]any {
	return map[string]any{"method": "POST", "url": "https://api.example.com/v2/orders",
		"headers": map[string]string{"Content-Type": "application/json"}, "body": `{"id":"A-1001"}`}
}

func with(m map[string]any, kv ...any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
		} else {
			out[kv[i].(string)] = kv[i+1]
		}
	}
	return out
}

func TestEnqueueEachChannel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{keys: keysEnv})
	for _, tc := range []struct {
		name, path string
		body       map[string]any
		typ, queue string
		check      func(t *testing.T, payload map[string]any)
	}{
		{"whatsapp text", "/v1/messages", whatsApp(), "whatsapp:send", "whatsapp", func(t *testing.T, p map[string]any) {
			require.Equal(t, "+12025550123", p["to"], "normalized to E.164")
			require.EqualValues(t, 1, p["v"])
		}},
		{"whatsapp template", "/v1/messages", whatsAppTemplate(), "whatsapp:send", "whatsapp", func(t *testing.T, p map[string]any) {
			require.Equal(t, "order_update", p["template"].(map[string]any)["name"])
			require.Equal(t, "high", p["priority"])
		}},
		{"whatsapp document replying", "/v1/messages", with(whatsApp(), "text", nil, "reply_to", "wamid.ABC",
			"media", map[string]any{"type": "document", "link": "https://cdn.example.com/i.pdf", "caption": "Invoice", "filename": "invoice-1042.pdf"}),
			"whatsapp:send", "whatsapp", func(t *testing.T, p map[string]any) {
				require.Equal(t, map[string]any{"type": "document", "link": "https://cdn.example.com/i.pdf", "caption": "Invoice", "filename": "invoice-1042.pdf"}, p["media"])
				require.Equal(t, "wamid.ABC", p["reply_to"])
			}},
		{"whatsapp sticker by id", "/v1/messages", with(whatsApp(), "text", nil, "media", map[string]any{"type": "sticker", "id": "798882015472548"}),
			"whatsapp:send", "whatsapp", func(t *testing.T, p map[string]any) {
				require.Equal(t, map[string]any{"type": "sticker", "id": "798882015472548"}, p["media"])
			}},
		{"whatsapp reply buttons", "/v1/messages", with(whatsApp(), "text", nil, "interactive", map[string]any{"type": "button", "body": "Did it arrive?",
			"buttons": []any{map[string]any{"id": "yes", "title": "Yes"}, map[string]any{"id": "no", "title": "Not yet"}}}),
			"whatsapp:send", "whatsapp", func(t *testing.T, p map[string]any) {
				require.Equal(t, "button", p["interactive"].(map[string]any)["type"])
			}},
		{"whatsapp location", "/v1/messages", with(whatsApp(), "text", nil, "location", map[string]any{"latitude": 37.4847, "longitude": -122.1486}),
			"whatsapp:send", "whatsapp", func(t *testing.T, p map[string]any) {
				require.Equal(t, 37.4847, p["location"].(map[string]any)["latitude"])
			}},
		{"whatsapp text with preview", "/v1/messages", with(whatsApp(), "text", "See https://example.com/o/1", "preview_url", true),
			"whatsapp:send", "whatsapp", func(t *testing.T, p map[string]any) {
				require.Equal(t, true, p["preview_url"])
			}},
		{"sms", "/v1/messages", sms(), "sms:send", "sms", func(t *testing.T, p map[string]any) {
			require.Equal(t, "Your code is 123456", p["body"])
		}},
		{"mms", "/v1/messages", with(sms(), "media_urls", []string{"https://cdn.example.com/1.jpg"}, "validity_period", 600), "sms:send", "sms", func(t *testing.T, p map[string]any) {
			require.Equal(t, []any{"https://cdn.example.com/1.jpg"}, p["media_urls"])
			require.EqualValues(t, 600, p["validity_period"])
		}},
		{"content template", "/v1/messages", with(sms(), "body", nil, "content_sid", "HX0123456789abcdef0123456789abcdef", "content_variables", map[string]string{"1": "Ann"}),
			"sms:send", "sms", func(t *testing.T, p map[string]any) {
				require.Equal(t, map[string]any{"1": "Ann"}, p["content_variables"])
			}},
		{"sms held until later", "/v1/messages", with(sms(), "send_at", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)), "sms:send", "sms", func(t *testing.T, p map[string]any) {
			require.NotEmpty(t, p["send_at"], "held: scheduled for it, planned then")
		}},
		{"sms in a campaign", "/v1/messages", with(sms(), "campaign", "spring-sale"), "sms:send", "sms", func(t *testing.T, p map[string]any) {
			require.Equal(t, "spring-sale", p["campaign"], "counted per campaign by the worker")
		}},
		{"webhook", "/v1/webhooks", webhook("evt-1"), "webhook:deliver", "webhook", func(t *testing.T, p map[string]any) {
			require.Equal(t, "evt-1", p["idempotency_key"])
		}},
		{"call", "/v1/calls", call(), "http:call", "http", func(t *testing.T, p map[string]any) {
			require.Equal(t, "POST", p["method"], "upper-cased")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := time.Now().Add(-time.Second)
			r := e.do("POST", tc.path, tc.body, bearer(adminKey), specValid)
			require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
			var a api.Accepted
			r.json(t, &a)
			require.Equal(t, tc.typ, a.Type)
			require.Equal(t, tc.queue, a.Queue)
			require.False(t, a.Duplicate)
			require.False(t, a.ETA.Before(before), "eta %v", a.ETA)
			require.Contains(t, []string{"pending", "scheduled"}, a.State)
			require.Equal(t, "100", r.Header.Get("X-RateLimit-Limit"))
			require.NotEmpty(t, r.Header.Get("RateLimit"))
			info := e.task(a.Queue, a.ID)
			require.Equal(t, tc.typ, info.Type)
			require.Equal(t, e.cfg.Worker.MaxRetry, info.MaxRetry)
			tc.check(t, payloadOf(t, info))
		})
	}
}

func TestEnqueuePlansBehindEarlierSends(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{keys: keysEnv})
	// The WhatsApp pair limit spaces sends to one user by 6s: the second
	// is planned to a later slot and scheduled for it.
	var etas []time.Time
	for i := range 2 {
		r := e.do("POST", "/v1/messages", with(whatsApp(), "text", fmt.Sprint("message ", i)), bearer(adminKey), specValid)
		require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
		var a api.Accepted
		r.json(t, &a)
		etas = append(etas, a.ETA)
		if i == 1 {
			require.Equal(t, "scheduled", a.State)
			require.Equal(t, "scheduled", e.task(a.Queue, a.ID).State.String())
		}
	}
	require.GreaterOrEqual(t, etas[1].Sub(etas[0]), 5*time.Second, "etas %v", etas)
}

func TestBatchEachChannel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{keys: keysEnv})
	for _, tc := range []struct {
		path    string
		items   []any
		bad     map[int]string // index → pointer
		valid   reqValid
		queueOf map[int]string
	}{
		{"/v1/messages/batch",
			[]any{whatsApp(), sms(), with(sms(), "to", "+1555"), whatsAppTemplate()},
			map[int]string{2: "/items/2/to"}, specInvalid, map[int]string{0: "whatsapp", 1: "sms", 3: "whatsapp"}},
		{"/v1/webhooks/batch",
			[]any{webhook("b-1"), with(webhook("b-2"), "url", "http://10.1.2.3/hook"), webhook("b-3")},
			map[int]string{1: "/items/1/url"}, specValid, map[int]string{0: "webhook", 2: "webhook"}},
		{"/v1/calls/batch",
			[]any{call(), with(call(), "method", "TRACE"), with(call(), "headers", map[string]string{"X-A": "a\r\nb"}), call()},
			map[int]string{1: "/items/1/method", 2: "/items/2/headers/X-A"}, specInvalid, map[int]string{0: "http", 3: "http"}},
		// An item the document refuses (unknown field) is still only that
		// item's problem.
		{"/v1/messages/batch",
			[]any{with(whatsApp(), "colour", "blue"), sms()},
			map[int]string{0: "/items/0/colour"}, specInvalid, map[int]string{1: "sms"}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			r := e.do("POST", tc.path, map[string]any{"items": tc.items}, bearer(adminKey), tc.valid)
			require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
			var b api.BatchResponse
			r.json(t, &b)
			require.Len(t, b.Results, len(tc.items))
			require.Equal(t, len(tc.items)-len(tc.bad), b.Accepted)
			require.Equal(t, len(tc.bad), b.Rejected)
			for i, res := range b.Results {
				require.Equal(t, i, res.Index)
				if ptr, bad := tc.bad[i]; bad {
					require.Equal(t, http.StatusUnprocessableEntity, res.Status)
					require.Nil(t, res.Accepted)
					require.NotNil(t, res.Problem)
					require.Equal(t, ptr, res.Problem.Errors[0].Pointer, "%+v", res.Problem)
					continue
				}
				require.Equal(t, http.StatusAccepted, res.Status, "%+v", res.Problem)
				require.Equal(t, tc.queueOf[i], res.Queue)
				require.NotEmpty(t, e.task(res.Queue, res.ID).Payload)
			}
		})
	}
}

func TestBatchBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{keys: keysEnv})
	items := make([]any, api.MaxBatchItems+1)
	for i := range items {
		items[i] = call()
	}
	for _, tc := range []struct {
		name   string
		body   any
		status int
		ptr    string
	}{
		{"over 1000 items", map[string]any{"items": items}, 422, "/items"},
		{"no items", map[string]any{"items": []any{}}, 422, "/items"},
		{"items missing", map[string]any{}, 422, "/items"},
		{"unknown member", map[string]any{"items": []any{call()}, "Items": []any{}}, 422, "/Items"},
		{"items not an array", map[string]any{"items": "x"}, 422, "/items"},
		{"not JSON", `{"items": [`, 400, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", "/v1/calls/batch", tc.body, bearer(adminKey), specInvalid)
			require.Equal(t, tc.status, r.Status, "%s", r.Body)
			p := r.problem(t)
			require.Equal(t, tc.ptr, p.Errors[0].Pointer, "%+v", p)
		})
	}
	r := e.do("POST", "/v1/calls/batch", map[string]any{"items": []any{call()}}, withHeader(bearer(adminKey), "Idempotency-Key", "k1"), specValid)
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	require.Contains(t, r.problem(t).Detail, "Idempotency-Key")
}

func TestBatchOf1000(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{keys: keysEnv})
	items := make([]any, api.MaxBatchItems)
	for i := range items {
		items[i] = with(call(), "url", fmt.Sprintf("https://api%d.example.com/v2/orders", i%10), "idempotency_key", fmt.Sprint("c-", i))
	}
	sent := time.Now()
	r := e.do("POST", "/v1/calls/batch", map[string]any{"items": items}, bearer(adminKey), specValid)
	require.Equal(t, http.StatusOK, r.Status)
	var b api.BatchResponse
	r.json(t, &b)
	require.Equal(t, api.MaxBatchItems, b.Accepted)
	// 10 hosts at 10/s each: the last of each host's 100 calls is planned
	// about 10s after the batch was taken (counted from before the request,
	// so that a slow host's time to plan the batch does not count).
	last := b.Results[len(b.Results)-1]
	require.Equal(t, "scheduled", last.State)
	require.Greater(t, last.ETA.Sub(sent), 8*time.Second)
}

func TestIdempotency(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{keys: keysEnv})
	first := e.do("POST", "/v1/messages", with(sms(), "idempotency_key", "otp-1"), bearer(adminKey), specValid)
	require.Equal(t, http.StatusAccepted, first.Status, "%s", first.Body)
	var a api.Accepted
	first.json(t, &a)
	require.Equal(t, "otp-1", a.ID)

	t.Run("same request", func(t *testing.T) {
		r := e.do("POST", "/v1/messages", with(sms(), "idempotency_key", "otp-1"), bearer(adminKey), specValid)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var d api.Accepted
		r.json(t, &d)
		require.True(t, d.Duplicate)
		require.Equal(t, a.ID, d.ID)
		require.Equal(t, a.Queue, d.Queue)
		require.Equal(t, a.Type, d.Type)
		require.Equal(t, a.State, d.State)
		info := e.task(a.Queue, a.ID)
		require.WithinDuration(t, info.NextProcessAt, d.ETA, time.Second)
	})
	t.Run("same request, key in the header", func(t *testing.T) {
		for _, v := range []string{"otp-1", `"otp-1"`} {
			r := e.do("POST", "/v1/messages", sms(), withHeader(bearer(adminKey), "Idempotency-Key", v), specValid)
			require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		}
	})
	t.Run("different request", func(t *testing.T) {
		r := e.do("POST", "/v1/messages", with(sms(), "idempotency_key", "otp-1", "body", "Your code is 654321"), bearer(adminKey), specValid)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s", r.Body)
		p := r.problem(t)
		require.True(t, strings.HasSuffix(p.Type, "#idempotency-key-reused"), p.Type)
		// The original is untouched.
		require.Contains(t, string(e.task(a.Queue, a.ID).Payload), "123456")
	})
	t.Run("the key on another channel", func(t *testing.T) {
		// asynq's IDs are unique per queue only; Sluice's claim makes the
		// key one send across channels.
		r := e.do("POST", "/v1/webhooks", webhook("otp-1"), bearer(adminKey), specValid)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s", r.Body)
		p := r.problem(t)
		require.True(t, strings.HasSuffix(p.Type, "#idempotency-key-reused"), p.Type)
		require.Contains(t, p.Detail, "another channel")
		g := e.do("GET", "/v1/tasks/otp-1", nil, bearer(adminKey), specValid)
		var st api.TaskStatus
		g.json(t, &st)
		require.Equal(t, "sms:send", st.Type, "the key's task is still the SMS")
	})
	t.Run("header and body differ", func(t *testing.T) {
		r := e.do("POST", "/v1/messages", with(sms(), "idempotency_key", "otp-2"), withHeader(bearer(adminKey), "Idempotency-Key", "otp-3"), specValid)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s", r.Body)
		require.Equal(t, "/idempotency_key", r.problem(t).Errors[0].Pointer)
	})
	t.Run("repeats within a batch", func(t *testing.T) {
		items := []any{
			with(webhook("w-1")),
			with(webhook("w-1")),                    // the same again
			with(webhook("w-1"), "event_type", "x"), // the key for something else
		}
		r := e.do("POST", "/v1/webhooks/batch", map[string]any{"items": items}, bearer(adminKey), specValid)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var b api.BatchResponse
		r.json(t, &b)
		got := []int{b.Results[0].Status, b.Results[1].Status, b.Results[2].Status}
		require.Equal(t, []int{202, 200, 422}, got)
		require.True(t, b.Results[1].Duplicate)
		require.Equal(t, 2, b.Accepted)
		require.Equal(t, 1, b.Rejected)
	})
	t.Run("webhook takes its key from the header", func(t *testing.T) {
		// The document asks for the body's key (it cannot say "the header
		// or the body"); the server takes the header's alone too.
		r := e.do("POST", "/v1/webhooks", with(webhook(""), "idempotency_key", nil), withHeader(bearer(adminKey), "Idempotency-Key", "evt-h"), specInvalid)
		require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
	})
	t.Run("bad header", func(t *testing.T) {
		h := bearer(adminKey)
		h.Add("Idempotency-Key", "a")
		h.Add("Idempotency-Key", "b")
		r := e.do("POST", "/v1/messages", sms(), h, specValid)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
		r = e.do("POST", "/v1/messages", sms(), withHeader(bearer(adminKey), "Idempotency-Key", "no spaces"), specInvalid)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s", r.Body)
		p := r.problem(t)
		require.Equal(t, "/idempotency_key", p.Errors[0].Pointer)
		require.Contains(t, p.Errors[0].Detail, "Idempotency-Key header")
	})
}

func TestValidationNamesFields(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{keys: keysEnv, config: func(c *config.Config) {
		c.Channels["http"].Enabled = false
	}})
	type fieldErr struct{ Pointer, Contains string }
	for _, tc := range []struct {
		name, path string
		body       any
		valid      reqValid
		want       []fieldErr
	}{
		{"bad phone", "/v1/messages", with(whatsApp(), "to", "+1555"), specInvalid, []fieldErr{{"/to", "not a valid E.164"}}},
		{"unknown fields, exact names", "/v1/messages", with(whatsApp(), "TO", "+12025550123", "v", 1), specInvalid,
			[]fieldErr{{"/TO", "unknown field"}, {"/v", "unknown field"}}},
		{"unknown nested field", "/v1/messages", with(whatsAppTemplate(), "template", map[string]any{"name": "a", "language": "en", "Name": "b"}), specInvalid,
			[]fieldErr{{"/template/Name", "unknown field"}}},
		{"text and template", "/v1/messages", with(whatsAppTemplate(), "text", "hi"), specInvalid,
			[]fieldErr{{"/text", "set exactly one"}, {"/template", "set exactly one"}}},
		{"template parameter with a tab", "/v1/messages",
			with(whatsAppTemplate(), "template", map[string]any{"name": "a", "language": "en", "parameters": []string{"ok", "a\tb"}}), specInvalid,
			[]fieldErr{{"/template/parameters/1", "132018"}}},
		{"wrong type", "/v1/messages", with(whatsApp(), "to", 12025550123), specInvalid, []fieldErr{{"/to", "want a string"}}},
		{"no channel", "/v1/messages", with(whatsApp(), "channel", nil), specInvalid, []fieldErr{{"/channel", "required"}}},
		{"unknown channel", "/v1/messages", with(whatsApp(), "channel", "fax"), specInvalid, []fieldErr{{"/channel", `"fax"`}}},
		{"sms sender", "/v1/messages", with(sms(), "from", "not a sender!"), specInvalid, []fieldErr{{"/from", "not a Twilio sender"}}},
		{"priority", "/v1/messages", with(sms(), "priority", "urgent"), specInvalid, []fieldErr{{"/priority", "want \"high\""}}},
		{"webhook to a private address", "/v1/webhooks", with(webhook("k"), "url", "https://192.168.1.10/x"), specValid,
			[]fieldErr{{"/url", "https://192.168.1.10"}}},
		{"webhook to a name for loopback", "/v1/webhooks", with(webhook("k"), "url", "http://localhost-alias.test:8080/x"), specValid,
			[]fieldErr{{"/url", "target localhost-alias.test (127.0.0.1) refused: loopback"}}},
		{"webhook needs a key", "/v1/webhooks", with(webhook(""), "idempotency_key", nil), specInvalid, []fieldErr{{"/idempotency_key", "required for webhooks"}}},
		{"webhook payload not an object", "/v1/webhooks", with(webhook("k"), "payload", "text"), specInvalid, []fieldErr{{"/payload", "JSON object or array"}}},
		{"not an object", "/v1/messages", []any{1}, specInvalid, []fieldErr{{"", "want a JSON object"}}},
		{"disabled channel", "/v1/calls", call(), specValid, []fieldErr{{"", "disabled"}}},
		{"11 media urls", "/v1/messages", with(sms(), "media_urls", []string{"https://a.example/1", "https://a.example/2", "https://a.example/3", "https://a.example/4",
			"https://a.example/5", "https://a.example/6", "https://a.example/7", "https://a.example/8", "https://a.example/9", "https://a.example/10", "https://a.example/11"}), specInvalid,
			[]fieldErr{{"/media_urls", "11 URLs, want at most 10"}}},
		{"content template with a body", "/v1/messages", with(sms(), "content_sid", "HX0123456789abcdef0123456789abcdef"), specInvalid,
			[]fieldErr{{"/body", "set one"}, {"/content_sid", "set one"}}},
		{"four reply buttons", "/v1/messages", with(whatsApp(), "text", nil, "interactive", map[string]any{"type": "button", "body": "b",
			"buttons": []any{map[string]any{"id": "1", "title": "a"}, map[string]any{"id": "2", "title": "b"}, map[string]any{"id": "3", "title": "c"}, map[string]any{"id": "4", "title": "d"}}}), specInvalid,
			[]fieldErr{{"/interactive/buttons", "4 buttons, want 1 to 3"}}},
		{"list row title too long", "/v1/messages", with(whatsApp(), "text", nil, "interactive", map[string]any{"type": "list", "body": "b", "list_button": "Pick",
			"rows": []any{map[string]any{"id": "1", "title": strings.Repeat("t", 25)}}}), specInvalid,
			[]fieldErr{{"/interactive/rows/0/title", "25 characters, want at most 24"}}},
		{"caption on audio", "/v1/messages", with(whatsApp(), "text", nil, "media", map[string]any{"type": "audio", "id": "1", "caption": "hi"}), specInvalid,
			[]fieldErr{{"/media/caption", "audio messages have no caption"}}},
		{"media with link and id", "/v1/messages", with(whatsApp(), "text", nil, "media", map[string]any{"type": "image", "id": "1", "link": "https://a.example/x.jpg"}), specInvalid,
			[]fieldErr{{"/media/link", "set exactly one"}, {"/media/id", "set exactly one"}}},
		{"text and media", "/v1/messages", with(whatsApp(), "media", map[string]any{"type": "image", "id": "1"}), specInvalid,
			[]fieldErr{{"/text", "set exactly one of text, template, media, interactive, location, contacts and reaction"}, {"/media", "set exactly one of text, template, media, interactive, location, contacts and reaction"}}},
		{"filename on an image", "/v1/messages", with(whatsApp(), "text", nil, "media", map[string]any{"type": "image", "id": "1", "filename": "a.jpg"}), specInvalid,
			[]fieldErr{{"/media/filename", "only a document has a file name"}}},
		{"preview_url without text", "/v1/messages", with(whatsApp(), "text", nil, "preview_url", true, "media", map[string]any{"type": "image", "id": "1"}), specInvalid,
			[]fieldErr{{"/preview_url", "only a text message"}}},
		{"reserved key prefix", "/v1/messages", with(sms(), "idempotency_key", "t-0123456789abcdef:x"), specInvalid,
			[]fieldErr{{"/idempotency_key", "reserves"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", tc.path, tc.body, bearer(adminKey), tc.valid)
			require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s", r.Body)
			p := r.problem(t)
			require.True(t, strings.HasSuffix(p.Type, "#validation"), p.Type)
			require.Len(t, p.Errors, len(tc.want), "%+v", p.Errors)
			for i, w := range tc.want {
				require.Equal(t, w.Pointer, p.Errors[i].Pointer)
				require.Contains(t, p.Errors[i].Detail, w.Contains)
			}
		})
	}
	t.Run("malformed JSON", func(t *testing.T) {
		r := e.do("POST", "/v1/messages", `{"channel": "sms",`, bearer(adminKey), specInvalid)
		require.Equal(t, http.StatusBadRequest, r.Status)
		require.Contains(t, r.problem(t).Errors[0].Detail, "at byte")
	})
	t.Run("not JSON content", func(t *testing.T) {
		r := e.do("POST", "/v1/messages", sms(), withHeader(bearer(adminKey), "Content-Type", "text/plain"), specInvalid)
		require.Equal(t, http.StatusUnsupportedMediaType, r.Status)
		r.problem(t)
	})
	t.Run("wrong method", func(t *testing.T) {
		// Not in the document, which has no GET on this path: checked by hand.
		req, err := http.NewRequest("GET", e.srv.URL+"/v1/messages", nil)
		require.NoError(t, err)
		resp, err := e.srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
		require.Equal(t, "POST", resp.Header.Get("Allow"))
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	})
}

func TestAuthRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{keys: keysEnv})
	for _, tc := range []struct {
		name   string
		header http.Header
		valid  reqValid
		wantWA string
	}{
		{"no key", nil, specInvalid, `Bearer realm="sluice"`},
		{"wrong bearer", bearer("wrong-key-0123456789abcdef"), specValid, `Bearer realm="sluice", error="invalid_token"`},
		{"basic with the right key", http.Header{"Authorization": {"Basic " + basic("u", adminKey)}}, specInvalid, `Bearer realm="sluice"`},
		{"basic with a wrong key", http.Header{"Authorization": {"Basic " + basic("u", "wrong-key-0123456789abcdef")}}, specInvalid, `Bearer realm="sluice"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/v1/messages", "/v1/tasks/x1"} {
				method, body := "POST", any(sms())
				if strings.HasPrefix(path, "/v1/tasks/") {
					method, body = "GET", nil
				}
				r := e.do(method, path, body, tc.header, tc.valid)
				require.Equal(t, http.StatusUnauthorized, r.Status, "%s", r.Body)
				require.Equal(t, []string{tc.wantWA}, r.Header.Values("WWW-Authenticate"), "the API takes Bearer only")
				require.True(t, strings.HasSuffix(r.problem(t).Type, "#unauthorized"))
				require.Empty(t, r.Header.Get("X-RateLimit-Limit"), "refused before the limiter")
			}
		})
	}
	queues, err := e.insp.Queues()
	require.NoError(t, err)
	require.Empty(t, queues, "nothing enqueued")
	// The document is served without a key.
	r := e.do("GET", "/v1/openapi.json", nil, nil, specValid)
	require.Equal(t, http.StatusOK, r.Status)
}

func basic(user, pass string) string {
	req, _ := http.NewRequest("GET", "/", nil)
	req.SetBasicAuth(user, pass)
	return strings.TrimPrefix(req.Header.Get("Authorization"), "Basic ")
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{keys: keysEnv})
	send := func(key string, body map[string]any) (response, api.Accepted) {
		r := e.do("POST", "/v1/messages", body, bearer(key), specValid)
		var a api.Accepted
		if r.Status < 300 {
			r.json(t, &a)
		}
		return r, a
	}
	acmeR, acme := send(acmeKey, with(sms(), "idempotency_key", "order-1"))
	require.Equal(t, http.StatusAccepted, acmeR.Status, "%s", acmeR.Body)
	require.Equal(t, producer.TenantNamespace("acme")+"order-1", acme.ID)
	require.Equal(t, "acme", payloadOf(t, e.task(acme.Queue, acme.ID))["tenant"], "the key's tenant is forced into the payload")

	// The same key from another tenant is another task, not a duplicate
	// and not a 422.
	globexR, globex := send(globexKey, with(sms(), "idempotency_key", "order-1"))
	require.Equal(t, http.StatusAccepted, globexR.Status, "%s", globexR.Body)
	require.NotEqual(t, acme.ID, globex.ID)

	// An untenanted key acting for acme shares acme's key space.
	adminR, admin := send(adminKey, with(sms(), "idempotency_key", "order-1", "tenant", "acme"))
	require.Equal(t, http.StatusOK, adminR.Status, "%s", adminR.Body)
	require.Equal(t, acme.ID, admin.ID)
	require.True(t, admin.Duplicate)

	// Another tenant in the body is a field error.
	r, _ := send(acmeKey, with(sms(), "tenant", "globex"))
	require.Equal(t, http.StatusUnprocessableEntity, r.Status)
	require.Equal(t, "/tenant", r.problem(t).Errors[0].Pointer)
	// Its own tenant is fine.
	r, _ = send(acmeKey, with(sms(), "tenant", "acme"))
	require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)

	get := func(key, id string) response {
		return e.do("GET", "/v1/tasks/"+id, nil, bearer(key), specValid)
	}
	require.Equal(t, http.StatusOK, get(acmeKey, acme.ID).Status)
	require.Equal(t, http.StatusOK, get(acmeKey, "order-1").Status, "a tenant's key finds its task by the idempotency key it sent")
	require.Equal(t, http.StatusNotFound, get(globexKey, acme.ID).Status, "another tenant's task is not found")
	require.Equal(t, http.StatusNotFound, get(acmeKey, globex.ID).Status)
	var st api.TaskStatus
	g := get(adminKey, acme.ID)
	require.Equal(t, http.StatusOK, g.Status)
	g.json(t, &st)
	require.Equal(t, "acme", st.Tenant)

	// A send without a key gets a random ID, which its tenant's key reads.
	r, random := send(acmeKey, sms())
	require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
	require.Equal(t, http.StatusOK, get(acmeKey, random.ID).Status, "a tenant's key reads its task with a random ID")
	require.Equal(t, http.StatusNotFound, get(globexKey, random.ID).Status)

	// A task of acme's without the namespace (enqueued by the release
	// before issue 21, or by tasks.Enqueue… with a tenant) is found by its
	// bare ID for acme, and for no other tenant.
	old, err := tasks.NewSMSSendTask(tasks.SMSSend{Delivery: tasks.Delivery{Tenant: "acme"}, From: "+12025550100", To: "+12025550123", Body: "hi", IdempotencyKey: "legacy-1"})
	require.NoError(t, err)
	_, err = asynq.NewClientFromRedisClient(e.rdb).Enqueue(old, asynq.Queue("sms"))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, get(acmeKey, "legacy-1").Status, "a tenant's task without the namespace")
	require.Equal(t, http.StatusNotFound, get(globexKey, "legacy-1").Status)

	// A task without a tenant is not a tenant's either.
	r, plain := send(adminKey, sms())
	require.Equal(t, http.StatusAccepted, r.Status)
	require.Equal(t, http.StatusNotFound, get(acmeKey, plain.ID).Status)

	// A tenant's key may be at most 200 minus the namespace long.
	long := strings.Repeat("k", 200-len(producer.TenantNamespace("acme"))+1)
	r, _ = send(acmeKey, with(sms(), "idempotency_key", long))
	require.Equal(t, http.StatusUnprocessableEntity, r.Status)
	require.Contains(t, r.problem(t).Errors[0].Detail, "want at most 181")
	// A bad key is reported as the client sent it.
	r = e.do("POST", "/v1/messages", with(sms(), "idempotency_key", "bad/key"), bearer(acmeKey), specInvalid)
	require.Equal(t, http.StatusUnprocessableEntity, r.Status)
	require.Contains(t, r.problem(t).Errors[0].Detail, `"bad/key"`)
}

func TestRateLimitPerKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{keys: keysEnv, config: func(c *config.Config) {
		c.HTTP.APIRate = throttle.PerMinute(2)
		c.HTTP.APIBurst = 1
	}})
	r := e.do("POST", "/v1/messages", sms(), bearer(acmeKey), specValid)
	require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
	require.Equal(t, "1", r.Header.Get("X-RateLimit-Limit"))
	require.Equal(t, "0", r.Header.Get("X-RateLimit-Remaining"))
	require.Equal(t, `"requests";q=2;w=60`, r.Header.Get("RateLimit-Policy"))

	r = e.do("POST", "/v1/messages", sms(), bearer(acmeKey), specValid)
	require.Equal(t, http.StatusTooManyRequests, r.Status, "%s", r.Body)
	p := r.problem(t)
	require.True(t, strings.HasSuffix(p.Type, "#rate-limited"))
	retry := r.Header.Get("Retry-After")
	require.Contains(t, []string{"29", "30"}, retry)
	require.Equal(t, `"requests";r=0;t=`+retry, r.Header.Get("RateLimit"))
	require.Equal(t, retry, r.Header.Get("X-RateLimit-Reset"))
	require.Contains(t, p.Detail, "2 requests per 1m")

	// A GET counts too; another key has its own limit.
	r = e.do("GET", "/v1/tasks/abc", nil, bearer(acmeKey), specValid)
	require.Equal(t, http.StatusTooManyRequests, r.Status)
	r = e.do("POST", "/v1/messages", sms(), bearer(globexKey), specValid)
	require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)

	// The limiter's keys name the key's ID, never the key.
	keys, err := e.rdb.Keys(context.Background(), "*").Result()
	require.NoError(t, err)
	var limiterKeys []string
	for _, k := range keys {
		require.NotContains(t, k, acmeKey)
		require.NotContains(t, k, globexKey)
		if strings.Contains(k, ":api:") {
			limiterKeys = append(limiterKeys, k)
		}
	}
	require.NotEmpty(t, limiterKeys)
	for _, k := range limiterKeys {
		require.Regexp(t, `:api:requests:key:key-[0-9a-f]{8}`, k)
	}
}

func TestBodyLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{keys: keysEnv, config: func(c *config.Config) { c.HTTP.MaxBodyBytes = 1024 }})
	big := with(sms(), "body", strings.Repeat("x", 1100))
	r := e.do("POST", "/v1/messages", big, bearer(adminKey), specValid)
	require.Equal(t, http.StatusRequestEntityTooLarge, r.Status, "%s", r.Body)
	require.True(t, strings.HasSuffix(r.problem(t).Type, "#payload-too-large"))

	// Without Content-Length (chunked), the reader stops at the limit.
	req, err := http.NewRequest("POST", e.srv.URL+"/v1/messages/batch", strings.NewReader(strings.Repeat(" ", 2048)+"{}"))
	require.NoError(t, err)
	req.ContentLength = -1
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+adminKey)
	resp, err := e.srv.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
}

func TestGetTask(t *testing.T) {
	t.Parallel()
	updated := time.Date(2026, 11, 20, 9, 30, 0, 0, time.UTC)
	deliveries := func(_ context.Context, id string) (*api.Delivery, error) {
		switch id {
		case "delivered-1":
			return &api.Delivery{Status: "delivered", ProviderID: "SM0123", UpdatedAt: updated}, nil
		case "failing-1":
			return nil, errors.New("store down")
		}
		return nil, nil
	}
	e := newEnv(t, envOptions{keys: keysEnv, deliveries: deliveries})
	for _, key := range []string{"delivered-1", "failing-1", "plain-1"} {
		r := e.do("POST", "/v1/messages", with(whatsApp(), "idempotency_key", key, "text", key), bearer(adminKey), specValid)
		require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
	}
	var st api.TaskStatus
	r := e.do("GET", "/v1/tasks/delivered-1", nil, bearer(adminKey), specValid)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r.json(t, &st)
	want := api.TaskStatus{ID: "delivered-1", Type: "whatsapp:send", Queue: "whatsapp", State: "pending",
		MaxRetry: e.cfg.Worker.MaxRetry, Delivery: &api.Delivery{Status: "delivered", ProviderID: "SM0123", UpdatedAt: updated}}
	require.Empty(t, cmp.Diff(want, st), "(-want +got)")

	// The pair limit planned the later sends to the same user to later
	// slots: they are scheduled, with their reserved second.
	r = e.do("GET", "/v1/tasks/plain-1", nil, bearer(adminKey), specValid)
	st = api.TaskStatus{}
	r.json(t, &st)
	require.Equal(t, "scheduled", st.State)
	require.NotNil(t, st.NextProcessAt)
	require.True(t, st.NextProcessAt.After(time.Now()), "%v", st.NextProcessAt)
	require.Nil(t, st.Delivery)

	r = e.do("GET", "/v1/tasks/failing-1", nil, bearer(adminKey), specValid)
	require.Equal(t, http.StatusOK, r.Status, "a failed delivery lookup leaves the delivery out")
	st = api.TaskStatus{}
	r.json(t, &st)
	require.Nil(t, st.Delivery)

	r = e.do("GET", "/v1/tasks/nope", nil, bearer(adminKey), specValid)
	require.Equal(t, http.StatusNotFound, r.Status)
	r.problem(t)
	r = e.do("GET", "/v1/tasks/"+strings.Repeat("a", 201), nil, bearer(adminKey), specInvalid)
	require.Equal(t, http.StatusBadRequest, r.Status)
	r.problem(t)
}

// A send a batch task carries (channels.<name>.batch_sends) has no asynq
// task of its own: GET /v1/tasks/{id} answers from its claim, scheduled,
// then completed once its delivery record says the provider took it.
func TestGetBatchedTask(t *testing.T) {
	t.Parallel()
	deliveries := func(_ context.Context, id string) (*api.Delivery, error) {
		if id == "sent-1" {
			return &api.Delivery{Status: "sent", ProviderID: "wamid.1"}, nil
		}
		return nil, nil
	}
	e := newEnv(t, envOptions{keys: keysEnv, deliveries: deliveries, config: func(c *config.Config) {
		c.Channels["whatsapp"].BatchSends = true
	}})
	// 170 sends first fill the number's current second (80/s; a batch
	// pending at once) and the next, and the four after them are planned
	// two seconds on, in a batch with the last of the 170, however long the
	// request takes.
	var items []any
	for i := range 170 {
		items = append(items, with(whatsApp(), "idempotency_key", fmt.Sprint("fill-", i), "to", fmt.Sprintf("+1202556%04d", i)))
	}
	for i, key := range []string{"sent-1", "waiting-1", "waiting-2", "waiting-3"} {
		items = append(items, with(whatsApp(), "idempotency_key", key, "to", fmt.Sprintf("+1202557%04d", i)))
	}
	r := e.do("POST", "/v1/messages/batch", map[string]any{"items": items}, bearer(adminKey), specValid)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	for _, id := range []string{"waiting-1", "sent-1"} {
		r = e.do("GET", "/v1/tasks/"+id, nil, bearer(adminKey), specValid)
		require.Equal(t, http.StatusOK, r.Status, "%s: %s", id, r.Body)
		var st api.TaskStatus
		r.json(t, &st)
		require.Equal(t, id, st.ID)
		require.Equal(t, "whatsapp:send", st.Type)
		require.Equal(t, "whatsapp", st.Queue)
		if id == "sent-1" {
			require.Equal(t, "completed", st.State)
			require.Equal(t, "wamid.1", st.Delivery.ProviderID)
		} else {
			require.Equal(t, "scheduled", st.State)
		}
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{keys: keysEnv})
	e.do("POST", "/v1/messages", sms(), bearer(adminKey), specValid)
	e.do("POST", "/v1/messages", sms(), nil, specInvalid)
	e.do("GET", "/v1/tasks/nope", nil, bearer(adminKey), specValid)
	for _, tc := range []struct {
		route, code string
		want        float64
	}{
		{"/v1/messages", "202", 1},
		{"/v1/messages", "401", 1},
		{"/v1/tasks/{id}", "404", 1},
		{"/v1/openapi.json", "200", 1},
	} {
		require.Equal(t, tc.want, requestCount(t, e, tc.route, tc.code), "%s %s", tc.route, tc.code)
	}
	mfs, err := e.reg.Gather()
	require.NoError(t, err)
	observed := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() == "sluice_api_request_duration_seconds" {
			for _, m := range mf.GetMetric() {
				observed[m.GetLabel()[0].GetValue()] = m.GetHistogram().GetSampleCount()
			}
		}
	}
	require.Equal(t, uint64(2), observed["/v1/messages"])
	require.Equal(t, uint64(1), observed["/v1/tasks/{id}"])
	require.Zero(t, observed["/v1/calls/batch"])
}

// requestCount reads sluice_api_requests_total{route, code}.
func requestCount(t *testing.T, e *env, route, code string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "sluice_api_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["route"] == route && labels["code"] == code {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
