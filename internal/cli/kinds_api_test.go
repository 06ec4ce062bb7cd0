package cli

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/emulator"
	"github.com/sluice-dev/sluice/internal/redistest"
)

// Every message kind of issue 24 goes end to end through the HTTP API: a
// worker sends each to the emulators, which check each on their own and
// record its kind; one recipient a send, so that no pair limit is in play.
func TestEveryMessageKindThroughTheAPI(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	emu := startWorker(t, rdb, nil)
	h, err := api.New(api.Options{Config: config.Default(), Redis: rdb})
	require.NoError(t, err)
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)

	const phone = "106540352242922"
	wa := func(to string, kv ...any) map[string]any {
		m := map[string]any{"channel": "whatsapp", "phone_number_id": phone, "to": to}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	sms := func(to string, kv ...any) map[string]any {
		m := map[string]any{"channel": "sms", "from": "+12025550100", "to": to}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	items := []map[string]any{
		wa("+12025550131", "media", map[string]any{"type": "image", "link": "https://cdn.example.com/1.jpg", "caption": "Your order"}),
		wa("+12025550132", "media", map[string]any{"type": "video", "id": "1166846181421424"}),
		wa("+12025550133", "media", map[string]any{"type": "audio", "link": "https://cdn.example.com/a.ogg"}),
		wa("+12025550134", "media", map[string]any{"type": "document", "link": "https://cdn.example.com/i.pdf", "filename": "i.pdf"}, "reply_to", "wamid.ABC"),
		wa("+12025550135", "media", map[string]any{"type": "sticker", "id": "798882015472548"}),
		wa("+12025550136", "text", "See https://example.com/t/1", "preview_url", true),
		wa("+12025550137", "interactive", map[string]any{"type": "button", "body": "Arrived?", "footer": "Order 1042",
			"header":  map[string]any{"type": "image", "link": "https://cdn.example.com/h.jpg"},
			"buttons": []any{map[string]any{"id": "yes", "title": "Yes"}, map[string]any{"id": "no", "title": "Not yet"}}}),
		wa("+12025550138", "interactive", map[string]any{"type": "list", "body": "Pick a slot", "list_button": "Slots",
			"rows": []any{map[string]any{"section": "Mon", "id": "m8", "title": "08:00"}, map[string]any{"section": "Tue", "id": "t8", "title": "08:00", "description": "Two hours"}}}),
		wa("+12025550139", "interactive", map[string]any{"type": "cta_url", "body": "Track it", "display_text": "Track", "url": "https://example.com/t/1"}),
		wa("+12025550140", "location", map[string]any{"latitude": 37.4847, "longitude": -122.1486, "name": "Meta HQ"}),
		wa("+12025550141", "contacts", []any{map[string]any{"name": map[string]any{"formatted_name": "Ann Lee", "first_name": "Ann"},
			"phones": []any{map[string]any{"phone": "+1 202 555 0199", "type": "WORK"}}}}),
		wa("+12025550142", "reaction", map[string]any{"message_id": "wamid.ABC", "emoji": "👍"}),
		wa("+12025550143", "template", map[string]any{"name": "order_shipped", "language": "en_US",
			"header":      map[string]any{"type": "location", "location": map[string]any{"latitude": 1.5, "longitude": 2.5}},
			"body_params": []any{map[string]any{"type": "currency", "currency": map[string]any{"fallback_value": "$9.99", "code": "USD", "amount_1000": 9990}}},
			"buttons":     []any{map[string]any{"index": 0, "sub_type": "quick_reply", "payload": "STOP"}, map[string]any{"index": 1, "sub_type": "copy_code", "coupon_code": "SAVE10"}}}),
		sms("+12025550144", "media_urls", []string{"https://cdn.example.com/1.jpg", "https://cdn.example.com/2.jpg"}, "validity_period", 600),
		sms("+12025550145", "content_sid", "HX0123456789abcdef0123456789abcdef", "content_variables", map[string]string{"1": "Ann"}),
	}
	want := map[string]string{
		"+12025550131": "image", "+12025550132": "video", "+12025550133": "audio", "+12025550134": "document", "+12025550135": "sticker",
		"+12025550136": "text", "+12025550137": "interactive", "+12025550138": "interactive", "+12025550139": "interactive",
		"+12025550140": "location", "+12025550141": "contacts", "+12025550142": "reaction", "+12025550143": "template",
		"+12025550144": "mms", "+12025550145": "content",
	}
	body, err := json.Marshal(map[string]any{"items": items})
	require.NoError(t, err)
	resp, err := http.Post(ts.URL+"/v1/messages/batch", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var br api.BatchResponse
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&br))
	require.Equal(t, len(items), br.Accepted, "%+v", br)

	got := kindsByRecipient(t, emu, len(want))
	require.Equal(t, want, got)
	require.Zero(t, emu.Stats()["whatsapp"].Rejected+emu.Stats()["sms"].Rejected, "the emulators refused none")
}

// kindsByRecipient waits until the emulators have accepted sends to n
// recipients and returns each one's kind (a hang bound of 30 s, not a
// speed check).
func kindsByRecipient(t *testing.T, emu *emulator.Server, n int) map[string]string {
	t.Helper()
	got := map[string]string{}
	require.Eventually(t, func() bool {
		for _, rec := range emu.Records() {
			got[rec.Recipient] = rec.Kind
		}
		return len(got) == n
	}, 30*time.Second, 20*time.Millisecond, "sends to %d recipients reach the emulators", n)
	return got
}
