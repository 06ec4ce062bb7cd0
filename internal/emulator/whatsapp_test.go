package emulator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const phoneID = "106540352242922"

func TestWhatsAppAccepts(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})

	r := h.wa(phoneID, textMessage("+16505551234"), nil)
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	assert.Equal(t, "application/json", r.header.Get("Content-Type"))

	var got waResponse
	require.NoError(t, json.Unmarshal(r.body, &got))
	require.Len(t, got.Messages, 1)
	assert.Regexp(t, `^wamid\.[A-Za-z0-9_-]+$`, got.Messages[0].ID)
	want := waResponse{
		MessagingProduct: "whatsapp",
		Contacts:         []waContact{{Input: "+16505551234", WaID: "16505551234"}},
		Messages:         []waMessage{{ID: got.Messages[0].ID}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}

	// Without "+", and a template.
	tmpl := map[string]any{
		"messaging_product": "whatsapp",
		"to":                "16505551235",
		"type":              "template",
		"template": map[string]any{
			"name":     "order_update",
			"language": map[string]any{"code": "en_US"},
			"components": []any{map[string]any{
				"type": "body", "parameters": []any{map[string]any{"type": "text", "text": "42"}},
			}},
		},
	}
	r2 := h.wa(phoneID, tmpl, nil)
	require.Equal(t, http.StatusOK, r2.status, "body: %s", r2.body)
	var got2 waResponse
	require.NoError(t, json.Unmarshal(r2.body, &got2))
	assert.Equal(t, []waContact{{Input: "16505551235", WaID: "16505551235"}}, got2.Contacts)
	assert.NotEqual(t, got.Messages[0].ID, got2.Messages[0].ID)

	wantRecords := []Record{
		{Channel: ChannelWhatsApp, At: t0, Sender: phoneID, Recipient: "+16505551234", ProviderID: got.Messages[0].ID, Kind: "text"},
		{Channel: ChannelWhatsApp, At: t0, Sender: phoneID, Recipient: "+16505551235", ProviderID: got2.Messages[0].ID, Kind: "template"},
	}
	if diff := cmp.Diff(wantRecords, h.s.Records()); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	st := h.s.Stats()[ChannelWhatsApp]
	assert.Equal(t, 2, st.Accepted)
	assert.Equal(t, 2, st.Unique)
}

func TestWhatsAppThroughputAtOneInstant(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{}) // 80 in any 1-s span per phone-number-id

	for i := range 80 {
		r := h.waText(phoneID, recipient(i))
		require.Equal(t, http.StatusOK, r.status, "message %d: %s", i, r.body)
	}
	r := h.waText(phoneID, recipient(80))
	require.Equal(t, http.StatusBadRequest, r.status)
	e := r.graphErr(t)
	assert.Equal(t, 130429, e.Code)
	assert.Equal(t, "OAuthException", e.Type)
	assert.Equal(t, "(#130429) Rate limit hit", e.Message)
	require.NotNil(t, e.ErrorData)
	assert.Equal(t, "whatsapp", e.ErrorData.MessagingProduct)
	assert.NotEmpty(t, e.ErrorData.Details)
	assert.Len(t, e.FBTraceID, 23)

	// Another business number has its own limit.
	r = h.waText("106540352242923", recipient(80))
	assert.Equal(t, http.StatusOK, r.status)

	// The 80 at t0 count until t0+1s, when they leave the span (t0, t0+1s].
	h.clock.Set(t0.Add(time.Second - time.Nanosecond))
	assert.Equal(t, 130429, h.waText(phoneID, recipient(80)).graphErr(t).Code)
	h.clock.Set(t0.Add(time.Second))
	assert.Equal(t, http.StatusOK, h.waText(phoneID, recipient(80)).status)

	st := h.s.Stats()[ChannelWhatsApp]
	assert.Equal(t, 82, st.Accepted)
	assert.Equal(t, 2, st.Throttled)
	assert.Equal(t, map[string]int{"130429": 2}, st.ThrottledByCode)
	assert.Len(t, h.s.Records(), 82)
}

// burst is n arrivals at t0+at.
func burst(at time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = at
	}
	return out
}

func TestWhatsAppThroughputWindow(t *testing.T) {
	t.Parallel()
	var topOfEachSecond, spread, paced, straddle []time.Duration
	for s := range 10 {
		topOfEachSecond = append(topOfEachSecond, burst(time.Duration(s)*time.Second, 80)...)
	}
	for i := range 81 { // t0 .. t0+987.65ms, 12.35ms apart
		spread = append(spread, time.Duration(i)*time.Second/81)
	}
	for i := range 80 { // t0 .. t0+987.5ms, 12.5ms apart
		paced = append(paced, time.Duration(i)*ms(12.5))
	}
	straddle = append(burst(ms(990), 40), burst(time.Second, 80)...)
	indices := func(from, to int) []int { // from..to-1
		var out []int
		for i := from; i < to; i++ {
			out = append(out, i)
		}
		return out
	}

	for _, tc := range []struct {
		name      string
		tolerance time.Duration
		arrivals  []time.Duration // since t0, one message each to a distinct recipient
		refused   []int           // indices into arrivals answered 130429 (sliding window)
		calendar  []int           // the same with CalendarSeconds
	}{
		// Bursts exactly 1s apart: the previous burst has left (t-1s, t].
		{name: "80 at the top of each second for 10s", arrivals: topOfEachSecond},
		{name: "81 spread over one second", arrivals: spread, refused: []int{80}, calendar: []int{80}},
		{name: "81 spread over one second, exact", tolerance: -1, arrivals: spread, refused: []int{80}, calendar: []int{80}},
		// Tolerance is for interval limits only: it adds nothing to the cap.
		{name: "81 at one instant, tolerance 1s", tolerance: time.Second, arrivals: burst(0, 81), refused: []int{80}, calendar: []int{80}},
		// 80 at 12.5ms; the 81st at +999ms is refused; at +1000ms the first
		// has left the span, so one more fits, but not two; at +1012.5ms the
		// second has left too.
		{
			name:     "80 paced, then at 999ms, 1000ms, 1012.5ms",
			arrivals: append(append([]time.Duration{}, paced...), ms(999), ms(1000), ms(1000), ms(1012.5), ms(1012.5)),
			refused:  []int{80, 82, 84},
			calendar: []int{80},
		},
		// 120 within 10ms: 40 in one calendar second and 80 in the next, but
		// 120 in one sliding second.
		{name: "burst straddling a second boundary", arrivals: straddle, refused: indices(80, 120)},
		{name: "80 at s.999 then one at s+1.001", arrivals: append(burst(ms(999), 80), ms(1001)), refused: []int{80}},
		// The burst at s.999 leaves the span at s+1.999.
		{name: "80 at s.999 then at s+1.998 and s+1.999", arrivals: append(burst(ms(999), 80), ms(1998), ms(1999)), refused: []int{80}},
		{name: "41st at x.990 after 40", arrivals: append(burst(0, 40), burst(ms(990), 41)...), refused: []int{80}, calendar: []int{80}},
	} {
		for _, calendar := range []bool{false, true} {
			name := tc.name + ", sliding"
			want := tc.refused
			if calendar {
				name = tc.name + ", calendar"
				want = tc.calendar
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				h := newHarness(t, Options{Tolerance: tc.tolerance, CalendarSeconds: calendar})
				var refused []int
				for i, at := range tc.arrivals {
					h.clock.Set(t0.Add(at))
					r := h.waText(phoneID, recipient(i))
					switch r.status {
					case http.StatusOK:
					case http.StatusBadRequest:
						require.Equal(t, 130429, r.graphErr(t).Code, "message %d at %s", i, at)
						refused = append(refused, i)
					default:
						t.Fatalf("message %d at %s: status %d: %s", i, at, r.status, r.body)
					}
				}
				if diff := cmp.Diff(want, refused, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("refused messages (-want +got):\n%s", diff)
				}
				st := h.s.Stats()[ChannelWhatsApp]
				assert.Equal(t, len(tc.arrivals)-len(want), st.Accepted)
				assert.Equal(t, len(want), st.Throttled)
				// The records agree with the limiter.
				maxIn := MaxInSpan(h.s.Records(), ChannelWhatsApp, time.Second)[phoneID]
				assert.Equal(t, maxIn, h.s.MaxInAnySecond()[ChannelWhatsApp])
				if !calendar {
					assert.LessOrEqual(t, maxIn, 80)
				}
			})
		}
	}
}

func TestWhatsAppPacedExactlyIsAccepted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{Tolerance: -1}) // exact
	step := time.Second / 80                   // 12.5ms
	for i := range 1000 {
		h.clock.Set(t0.Add(time.Duration(i) * step))
		r := h.waText(phoneID, recipient(i))
		require.Equal(t, http.StatusOK, r.status, "message %d: %s", i, r.body)
	}
	st := h.s.Stats()[ChannelWhatsApp]
	assert.Equal(t, 1000, st.Accepted)
	assert.Zero(t, st.Throttled)
}

func TestWhatsApp81stInOneSecondIsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{Tolerance: -1})
	step := time.Second / 80
	for i := range 80 { // t0 .. t0+987.5ms
		h.clock.Set(t0.Add(time.Duration(i) * step))
		require.Equal(t, http.StatusOK, h.waText(phoneID, recipient(i)).status, "message %d", i)
	}
	// The 81st at the same instant as the 80th, and just before the next slot.
	r := h.waText(phoneID, recipient(80))
	require.Equal(t, http.StatusBadRequest, r.status)
	assert.Equal(t, 130429, r.graphErr(t).Code)
	h.clock.Set(t0.Add(time.Second - time.Nanosecond))
	assert.Equal(t, 130429, h.waText(phoneID, recipient(80)).graphErr(t).Code)
	// The refused requests did not move the schedule: the next slot is t0+1s.
	h.clock.Set(t0.Add(time.Second))
	assert.Equal(t, http.StatusOK, h.waText(phoneID, recipient(80)).status)
	assert.Equal(t, 2, h.s.Stats()[ChannelWhatsApp].Throttled)
}

func TestWhatsAppToleranceAbsorbsJitter(t *testing.T) {
	t.Parallel()
	// A sender paced at the pair limit (1 per 6s to one recipient) whose
	// requests arrive 20ms late (even) or 20ms early (odd): each odd one is
	// 40ms early on the previous one's schedule.
	const to = "+16505551234"
	arrivals := func(i int) time.Time {
		jitter := 20 * time.Millisecond
		if i%2 == 1 {
			jitter = -jitter
		}
		return t0.Add(time.Duration(i)*DefaultPairInterval + jitter)
	}
	for _, tc := range []struct {
		name      string
		tolerance time.Duration
		throttled int
	}{
		{name: "default: exact", tolerance: 0, throttled: 10}, // every early (odd) arrival
		{name: "50ms", tolerance: 50 * time.Millisecond, throttled: 0},
		{name: "40ms", tolerance: 40 * time.Millisecond, throttled: 0},
		{name: "39ms", tolerance: 39 * time.Millisecond, throttled: 10}, // every early (odd) arrival
		{name: "exact", tolerance: -1, throttled: 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Options{Tolerance: tc.tolerance})
			for i := range 20 {
				h.clock.Set(arrivals(i))
				r := h.waText(phoneID, to)
				if r.status != http.StatusOK {
					require.Equal(t, 131056, r.graphErr(t).Code, "message %d", i)
				}
			}
			st := h.s.Stats()[ChannelWhatsApp]
			assert.Equal(t, tc.throttled, st.Throttled)
			assert.Equal(t, tc.throttled, st.ThrottledByCode["131056"])
		})
	}
}

func TestWhatsAppPairRate(t *testing.T) {
	t.Parallel()
	const to = "+16505551234"
	type step struct {
		at     time.Duration
		to     string
		status int
	}
	for _, tc := range []struct {
		name      string
		tolerance time.Duration
		steps     []step
	}{
		{name: "default: exact", steps: []step{
			{at: 0, to: to, status: 200},
			{at: time.Second, to: to, status: 400},
			{at: time.Second, to: "+16505551299", status: 200}, // other recipients unaffected
			{at: 5999 * time.Millisecond, to: to, status: 400},
			{at: 6*time.Second - time.Nanosecond, to: to, status: 400},
			{at: 6 * time.Second, to: to, status: 200}, // exactly 6s after the previous accepted one
			{at: 6500 * time.Millisecond, to: to, status: 400},
			{at: 11950 * time.Millisecond, to: to, status: 400}, // 50ms early
			{at: 12 * time.Second, to: to, status: 200},
			{at: 19 * time.Second, to: to, status: 200}, // late: the next is due 6s after this one
			{at: 24999 * time.Millisecond, to: to, status: 400},
			{at: 25 * time.Second, to: to, status: 200},
		}},
		{name: "tolerance 50ms", tolerance: 50 * time.Millisecond, steps: []step{
			{at: 0, to: to, status: 200},
			{at: 5949 * time.Millisecond, to: to, status: 400},
			{at: 5950 * time.Millisecond, to: to, status: 200},  // 50ms early is tolerated
			{at: 11899 * time.Millisecond, to: to, status: 400}, // early arrivals do not add up
			{at: 11950 * time.Millisecond, to: to, status: 200},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Options{Tolerance: tc.tolerance}) // 1 per 6s per pair
			throttled := 0
			for i, st := range tc.steps {
				h.clock.Set(t0.Add(st.at))
				r := h.waText(phoneID, st.to)
				require.Equal(t, st.status, r.status, "step %d at %s: %s", i, st.at, r.body)
				if st.status == http.StatusBadRequest {
					throttled++
					e := r.graphErr(t)
					assert.Equal(t, 131056, e.Code, "step %d", i)
					assert.Equal(t, "(#131056) (Business Account, Consumer Account) pair rate limit hit", e.Message)
				}
			}
			st := h.s.Stats()[ChannelWhatsApp]
			assert.Equal(t, map[string]int{"131056": throttled}, st.ThrottledByCode)
			assert.Equal(t, len(tc.steps)-throttled, st.Accepted)
			gap, ok := MinPairGap(h.s.Records())
			require.True(t, ok)
			if tc.tolerance == 0 {
				assert.Equal(t, 6*time.Second, gap)
			} else {
				assert.Equal(t, 5950*time.Millisecond, gap)
			}
		})
	}
}

func TestWhatsAppAuth(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{WhatsAppToken: "secret-token"})
	for _, tc := range []struct {
		name, auth string
		code       int
	}{
		{name: "missing", auth: "", code: 104},
		{name: "wrong token", auth: "Bearer test-token", code: 190},
		{name: "not bearer", auth: "Basic c2VjcmV0LXRva2Vu", code: 190},
	} {
		header := http.Header{"Authorization": {tc.auth}}
		if tc.auth == "" {
			header = http.Header{"Authorization": nil}
		}
		r := h.wa(phoneID, textMessage("+16505551234"), header)
		require.Equal(t, http.StatusUnauthorized, r.status, tc.name)
		e := r.graphErr(t)
		assert.Equal(t, tc.code, e.Code, tc.name)
		assert.Equal(t, "OAuthException", e.Type, tc.name)
		assert.Nil(t, e.ErrorData, tc.name)
		assert.NotEmpty(t, r.header.Get("WWW-Authenticate"), tc.name)
	}
	r := h.wa(phoneID, textMessage("+16505551234"), hdr("Authorization", "Bearer secret-token"))
	assert.Equal(t, http.StatusOK, r.status)

	st := h.s.Stats()[ChannelWhatsApp]
	assert.Equal(t, 3, st.Rejected)
	assert.Equal(t, 1, st.Accepted)
}

func TestWhatsAppValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	with := func(mut func(m map[string]any)) map[string]any {
		m := textMessage("+16505551234")
		mut(m)
		return m
	}
	for _, tc := range []struct {
		name    string
		path    string
		payload any
		code    int
		subcode int
	}{
		{name: "version without v", path: "/23.0/" + phoneID + "/messages", payload: textMessage("+16505551234"), code: 2500},
		{name: "version without minor", path: "/v23/" + phoneID + "/messages", payload: textMessage("+16505551234"), code: 2500},
		{name: "phone id not numeric", path: "/v23.0/me/messages", payload: textMessage("+16505551234"), code: 100, subcode: 33},
		{name: "not JSON", payload: "{", code: 100},
		{name: "JSON array", payload: "[]", code: 100},
		{name: "no messaging_product", payload: with(func(m map[string]any) { delete(m, "messaging_product") }), code: 100},
		{name: "wrong messaging_product", payload: with(func(m map[string]any) { m["messaging_product"] = "sms" }), code: 100},
		{name: "group recipient", payload: with(func(m map[string]any) { m["recipient_type"] = "group" }), code: 100},
		{name: "no to", payload: with(func(m map[string]any) { delete(m, "to") }), code: 100},
		{name: "to with letters", payload: with(func(m map[string]any) { m["to"] = "+1650555ABCD" }), code: 100},
		{name: "to too short", payload: with(func(m map[string]any) { m["to"] = "+1234567" }), code: 100},
		{name: "to too long", payload: with(func(m map[string]any) { m["to"] = "+1234567890123456" }), code: 100},
		{name: "to not a string", payload: with(func(m map[string]any) { m["to"] = 16505551234 }), code: 100},
		{name: "empty text body", payload: with(func(m map[string]any) { m["text"] = map[string]any{"body": ""} }), code: 100},
		{name: "no text", payload: with(func(m map[string]any) { delete(m, "text") }), code: 100},
		{name: "template without name", payload: with(func(m map[string]any) {
			m["type"] = "template"
			m["template"] = map[string]any{"language": map[string]any{"code": "en_US"}}
		}), code: 100},
		{name: "template without language", payload: with(func(m map[string]any) {
			m["type"] = "template"
			m["template"] = map[string]any{"name": "order_update"}
		}), code: 100},
		{name: "image without its object", payload: with(func(m map[string]any) { m["type"] = "image" }), code: 100},
		{name: "unsupported type", payload: with(func(m map[string]any) { m["type"] = "carousel" }), code: 100},
		{name: "template button index 10", payload: templateWith(map[string]any{"type": "button", "sub_type": "quick_reply", "index": "10",
			"parameters": []any{map[string]any{"type": "payload", "payload": "p"}}}), code: 100},
		{name: "template coupon code over 15", payload: templateWith(map[string]any{"type": "button", "sub_type": "copy_code", "index": "0",
			"parameters": []any{map[string]any{"type": "coupon_code", "coupon_code": "SUMMER-SALE-2026"}}}), code: 100},
		{name: "template currency code lower case", payload: templateWith(map[string]any{"type": "body", "parameters": []any{
			map[string]any{"type": "currency", "currency": map[string]any{"fallback_value": "$1", "code": "usd", "amount_1000": 1000}}}}), code: 100},
		{name: "template header sticker", payload: templateWith(map[string]any{"type": "header", "parameters": []any{
			map[string]any{"type": "sticker", "sticker": map[string]any{"id": "1"}}}}), code: 100},
		{name: "template header location null", payload: templateWith(map[string]any{"type": "header", "parameters": []any{
			map[string]any{"type": "location", "location": nil}}}), code: 100},
		{name: "template header location without longitude", payload: templateWith(map[string]any{"type": "header", "parameters": []any{
			map[string]any{"type": "location", "location": map[string]any{"latitude": "37.48"}}}}), code: 100},
		{name: "template header text with a newline", payload: templateWith(map[string]any{"type": "header", "parameters": []any{
			map[string]any{"type": "text", "text": "a\nb"}}}), code: 100},
		{name: "currency fallback with a tab", payload: templateWith(map[string]any{"type": "body", "parameters": []any{
			map[string]any{"type": "currency", "currency": map[string]any{"fallback_value": "$1\t", "code": "USD", "amount_1000": 1000}}}}), code: 100},
		{name: "date fallback with five spaces", payload: templateWith(map[string]any{"type": "body", "parameters": []any{
			map[string]any{"type": "date_time", "date_time": map[string]any{"fallback_value": "May     1"}}}}), code: 100},
		{name: "interactive without body", payload: interactiveMessage(map[string]any{"type": "button",
			"action": map[string]any{"buttons": []any{replyButton("1", "Yes")}}}), code: 100},
		{name: "four reply buttons", payload: interactiveMessage(map[string]any{"type": "button", "body": map[string]any{"text": "b"},
			"action": map[string]any{"buttons": []any{replyButton("1", "a"), replyButton("2", "b"), replyButton("3", "c"), replyButton("4", "d")}}}), code: 100},
		{name: "reply button title over 20", payload: interactiveMessage(map[string]any{"type": "button", "body": map[string]any{"text": "b"},
			"action": map[string]any{"buttons": []any{replyButton("1", strings.Repeat("t", 21))}}}), code: 100},
		{name: "list of 11 rows", payload: interactiveMessage(map[string]any{"type": "list", "body": map[string]any{"text": "b"},
			"action": map[string]any{"button": "Pick", "sections": []any{map[string]any{"rows": listRows(11)}}}}), code: 100},
		{name: "cta_url without url", payload: interactiveMessage(map[string]any{"type": "cta_url", "body": map[string]any{"text": "b"},
			"action": map[string]any{"name": "cta_url", "parameters": map[string]any{"display_text": "Go"}}}), code: 100},
		{name: "latitude off the map", payload: map[string]any{"messaging_product": "whatsapp", "to": "16505551234", "type": "location",
			"location": map[string]any{"latitude": "91", "longitude": "0"}}, code: 100},
		{name: "contact without formatted_name", payload: map[string]any{"messaging_product": "whatsapp", "to": "16505551234", "type": "contacts",
			"contacts": []any{map[string]any{"name": map[string]any{"first_name": "Ann"}}}}, code: 100},
		{name: "reaction without message_id", payload: map[string]any{"messaging_product": "whatsapp", "to": "16505551234", "type": "reaction",
			"reaction": map[string]any{"emoji": "x"}}, code: 100},
		{name: "image with id and link", payload: mediaMessage("image", map[string]any{"id": "1", "link": "https://a.example/x.jpg"}), code: 100},
		{name: "image with neither id nor link", payload: mediaMessage("image", map[string]any{"caption": "x"}), code: 100},
		{name: "video link not http", payload: mediaMessage("video", map[string]any{"link": "file:///etc/passwd"}), code: 100},
		{name: "audio with caption", payload: mediaMessage("audio", map[string]any{"id": "1", "caption": "listen"}), code: 100},
		{name: "sticker with caption", payload: mediaMessage("sticker", map[string]any{"id": "1", "caption": "hi"}), code: 100},
		{name: "caption too long", payload: mediaMessage("image", map[string]any{"id": "1", "caption": strings.Repeat("a", 1025)}), code: 100},
		{name: "filename on video", payload: mediaMessage("video", map[string]any{"id": "1", "filename": "a.mp4"}), code: 100},
		{name: "media id not digits", payload: mediaMessage("document", map[string]any{"id": "abc"}), code: 100},
		{name: "context without message_id", payload: with(func(m map[string]any) { m["context"] = map[string]any{} }), code: 100},
	} {
		path := tc.path
		if path == "" {
			path = "/v23.0/" + phoneID + "/messages"
		}
		r := h.waRaw(path, tc.payload, nil)
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", tc.name, r.body)
		e := r.graphErr(t)
		assert.Equal(t, tc.code, e.Code, tc.name)
		assert.Equal(t, tc.subcode, e.ErrorSubcode, tc.name)
		assert.NotEmpty(t, e.Message, tc.name)
		assert.NotEmpty(t, e.FBTraceID, tc.name)
	}
	st := h.s.Stats()[ChannelWhatsApp]
	assert.Equal(t, 45, st.Rejected)
	assert.Zero(t, st.Accepted)
	assert.Empty(t, h.s.Records())
}

func TestWhatsAppMagicRecipients(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{Tolerance: -1})

	r := h.waText(phoneID, "+16505550000")
	require.Equal(t, http.StatusBadRequest, r.status)
	e := r.graphErr(t)
	assert.Equal(t, 131026, e.Code)
	assert.Equal(t, "(#131026) Message undeliverable", e.Message)
	assert.Nil(t, e.IsTransient)

	r = h.waText(phoneID, "16505550500")
	require.Equal(t, http.StatusInternalServerError, r.status)
	e = r.graphErr(t)
	assert.Equal(t, 131000, e.Code)
	assert.Equal(t, "(#131000) Something went wrong", e.Message)
	require.NotNil(t, e.IsTransient)
	assert.True(t, *e.IsTransient)

	// Neither used up the number's limit: an exact limiter still has room
	// at this instant.
	assert.Equal(t, http.StatusOK, h.waText(phoneID, "+16505551234").status)

	st := h.s.Stats()[ChannelWhatsApp]
	assert.Equal(t, ChannelStats{Accepted: 1, Unique: 1, Rejected: 1, Failed: 1, ThrottledByCode: map[string]int{}}, st)
	assert.Len(t, h.s.Records(), 1)
}

func TestWhatsAppDuplicates(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	send := func(to string, header http.Header, opaque string) {
		t.Helper()
		m := textMessage(to)
		if opaque != "" {
			m["biz_opaque_callback_data"] = opaque
		}
		h.clock.Advance(time.Second)
		r := h.wa(phoneID, m, header)
		require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	}
	send("+16505551231", hdr("Idempotency-Key", "k1"), "")
	send("+16505551232", hdr("Idempotency-Key", "k1"), "ignored") // header wins
	send("+16505551233", nil, "k2")                               // body fallback
	send("+16505551234", nil, "")                                 // no key
	send("+16505551235", nil, "")                                 // no key: not a duplicate
	send("+16505551236", hdr("Idempotency-Key", "k2"), "")

	var got []keyDup
	for _, rec := range h.s.Records() {
		got = append(got, keyDup{rec.IdempotencyKey, rec.Duplicate})
	}
	want := []keyDup{{"k1", false}, {"k1", true}, {"k2", false}, {"", false}, {"", false}, {"k2", true}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(keyDup{})); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	st := h.s.Stats()[ChannelWhatsApp]
	if diff := cmp.Diff(ChannelStats{Accepted: 6, Unique: 4, Duplicates: 2}, st, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
}

type keyDup struct {
	key string
	dup bool
}

func TestNewWamidUnique(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(`^wamid\.[A-Za-z0-9_-]+$`)
	seen := map[string]bool{}
	for range 1000 {
		id := newWamid("16505551234")
		require.Regexp(t, re, id)
		require.False(t, seen[id], "duplicate %s", id)
		seen[id] = true
	}
}

// mediaMessage is a media send of type typ with its object obj.
func mediaMessage(typ string, obj map[string]any) map[string]any {
	return map[string]any{"messaging_product": "whatsapp", "recipient_type": "individual", "to": "16505551234", "type": typ, typ: obj}
}

// Media messages of each type are accepted and recorded like text: they
// count against the number's throughput and the pair's pace the same way.
func TestWhatsAppAcceptsMediaMessages(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{Tolerance: -1})
	for i, m := range []map[string]any{
		mediaMessage("image", map[string]any{"link": "https://cdn.example.com/a.jpg", "caption": "Your order"}),
		mediaMessage("video", map[string]any{"id": "1166846181421424", "caption": "How to"}),
		mediaMessage("audio", map[string]any{"link": "https://cdn.example.com/a.ogg"}),
		mediaMessage("document", map[string]any{"link": "https://cdn.example.com/i.pdf", "caption": "Invoice", "filename": "i.pdf"}),
		mediaMessage("sticker", map[string]any{"id": "798882015472548"}),
	} {
		m["to"] = fmt.Sprintf("1650555%04d", 1000+i) // a recipient each: no pair limit
		m["context"] = map[string]any{"message_id": "wamid.ABC"}
		r := h.waRaw("/v23.0/"+phoneID+"/messages", m, nil)
		require.Equal(t, http.StatusOK, r.status, "%s: %s", m["type"], r.body)
	}
	assert.Equal(t, 5, h.s.Stats()[ChannelWhatsApp].Accepted)
}

// interactiveMessage is an interactive send of in.
func interactiveMessage(in map[string]any) map[string]any {
	return map[string]any{"messaging_product": "whatsapp", "recipient_type": "individual", "to": "16505551234", "type": "interactive", "interactive": in}
}

func replyButton(id, title string) map[string]any {
	return map[string]any{"type": "reply", "reply": map[string]any{"id": id, "title": title}}
}

func listRows(n int) []any {
	var rows []any
	for i := range n {
		rows = append(rows, map[string]any{"id": fmt.Sprint("r", i), "title": fmt.Sprint("Row ", i)})
	}
	return rows
}

// Interactive, location, contacts and reaction messages are accepted and
// recorded with their kind.
func TestWhatsAppAcceptsInteractiveAndOthers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{Tolerance: -1})
	for i, m := range []map[string]any{
		interactiveMessage(map[string]any{"type": "button", "body": map[string]any{"text": "Arrived?"}, "footer": map[string]any{"text": "Order 1042"},
			"action": map[string]any{"buttons": []any{replyButton("yes", "Yes"), replyButton("no", "Not yet")}}}),
		interactiveMessage(map[string]any{"type": "list", "body": map[string]any{"text": "Pick"}, "header": map[string]any{"type": "text", "text": "Slots"},
			"action": map[string]any{"button": "Slots", "sections": []any{map[string]any{"title": "Mon", "rows": listRows(5)}, map[string]any{"title": "Tue", "rows": []any{map[string]any{"id": "t", "title": "8"}}}}}}),
		interactiveMessage(map[string]any{"type": "cta_url", "body": map[string]any{"text": "Track"},
			"action": map[string]any{"name": "cta_url", "parameters": map[string]any{"display_text": "Track", "url": "https://example.com/t"}}}),
		{"messaging_product": "whatsapp", "to": "16505551234", "type": "location", "location": map[string]any{"latitude": "37.4847", "longitude": "-122.1486"}},
		{"messaging_product": "whatsapp", "to": "16505551234", "type": "contacts", "contacts": []any{map[string]any{"name": map[string]any{"formatted_name": "Ann Lee", "first_name": "Ann"}}}},
		{"messaging_product": "whatsapp", "to": "16505551234", "type": "reaction", "reaction": map[string]any{"message_id": "wamid.A", "emoji": "👍"}},
	} {
		m["to"] = fmt.Sprintf("1650555%04d", 2000+i)
		r := h.waRaw("/v23.0/"+phoneID+"/messages", m, nil)
		require.Equal(t, http.StatusOK, r.status, "%s: %s", m["type"], r.body)
	}
	var kinds []string
	for _, rec := range h.s.Records() {
		kinds = append(kinds, rec.Kind)
	}
	assert.Equal(t, []string{"interactive", "interactive", "interactive", "location", "contacts", "reaction"}, kinds)
}

// templateWith is a template send with the one component c.
func templateWith(c map[string]any) map[string]any {
	return map[string]any{"messaging_product": "whatsapp", "recipient_type": "individual", "to": "16505551234", "type": "template",
		"template": map[string]any{"name": "t", "language": map[string]any{"code": "en_US"}, "components": []any{c}}}
}

// A template with a media header, typed body parameters and each kind of
// button is accepted.
func TestWhatsAppAcceptsTemplateComponents(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{Tolerance: -1})
	m := templateWith(map[string]any{"type": "header", "parameters": []any{map[string]any{"type": "image", "image": map[string]any{"link": "https://cdn.example.com/h.jpg"}}}})
	tmpl := m["template"].(map[string]any)
	tmpl["components"] = append(tmpl["components"].([]any),
		map[string]any{"type": "body", "parameters": []any{map[string]any{"type": "text", "text": "Ann"},
			map[string]any{"type": "currency", "currency": map[string]any{"fallback_value": "$100.99", "code": "USD", "amount_1000": 100990}},
			map[string]any{"type": "date_time", "date_time": map[string]any{"fallback_value": "May 1"}}}},
		map[string]any{"type": "button", "sub_type": "quick_reply", "index": "0", "parameters": []any{map[string]any{"type": "payload", "payload": "STOP"}}},
		map[string]any{"type": "button", "sub_type": "url", "index": "1", "parameters": []any{map[string]any{"type": "text", "text": "o/1"}}},
		map[string]any{"type": "button", "sub_type": "copy_code", "index": "2", "parameters": []any{map[string]any{"type": "coupon_code", "coupon_code": "SAVE10"}}})
	r := h.waRaw("/v23.0/"+phoneID+"/messages", m, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	for i, loc := range []map[string]any{{"latitude": "37.4847", "longitude": "-122.1486", "name": "HQ"}, {"latitude": -33.9, "longitude": 151.2}} {
		m := templateWith(map[string]any{"type": "header", "parameters": []any{map[string]any{"type": "location", "location": loc}}})
		m["to"] = fmt.Sprintf("1650555124%d", i) // another recipient: the pair limit is 1 per 6 s
		r := h.waRaw("/v23.0/"+phoneID+"/messages", m, nil)
		require.Equal(t, http.StatusOK, r.status, "%v: %s", loc, r.body)
	}
}
