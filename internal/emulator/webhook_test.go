package emulator

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const event = `{"type":"order.shipped","data":{"id":"o_1"}}`

func TestWebhookSignature(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	const otherSecret = "whsec_" + "c2x1aWNlLW90aGVyLXNlY3JldC0yNC1ieXRlcw=="

	unix := func(d time.Duration) string { return strconv.FormatInt(h.clock.Now().Add(d).Unix(), 10) }
	for _, tc := range []struct {
		name   string
		body   string
		header func() http.Header
		status int
	}{
		{name: "valid", body: event, status: 204, header: func() http.Header {
			ts := unix(0)
			return hdr("webhook-id", "msg_1", "webhook-timestamp", ts, "webhook-signature", sign(DefaultWebhookSecret, "msg_1", ts, event))
		}},
		{name: "valid among several", body: event, status: 204, header: func() http.Header {
			ts := unix(0)
			return hdr("webhook-id", "msg_2", "webhook-timestamp", ts, "webhook-signature",
				"v1,"+base64.StdEncoding.EncodeToString([]byte("nope"))+" v1a,xyz "+sign(DefaultWebhookSecret, "msg_2", ts, event))
		}},
		{name: "4m59s old", body: event, status: 204, header: func() http.Header {
			ts := unix(-(5*time.Minute - time.Second))
			return hdr("webhook-id", "msg_3", "webhook-timestamp", ts, "webhook-signature", sign(DefaultWebhookSecret, "msg_3", ts, event))
		}},
		{name: "wrong secret", body: event, status: 401, header: func() http.Header {
			ts := unix(0)
			return hdr("webhook-id", "msg_4", "webhook-timestamp", ts, "webhook-signature", sign(otherSecret, "msg_4", ts, event))
		}},
		{name: "signed other body", body: event, status: 401, header: func() http.Header {
			ts := unix(0)
			return hdr("webhook-id", "msg_5", "webhook-timestamp", ts, "webhook-signature", sign(DefaultWebhookSecret, "msg_5", ts, `{}`))
		}},
		{name: "signed other id", body: event, status: 401, header: func() http.Header {
			ts := unix(0)
			return hdr("webhook-id", "msg_6", "webhook-timestamp", ts, "webhook-signature", sign(DefaultWebhookSecret, "msg_x", ts, event))
		}},
		{name: "only v1a", body: event, status: 401, header: func() http.Header {
			ts := unix(0)
			sig := sign(DefaultWebhookSecret, "msg_7", ts, event)
			return hdr("webhook-id", "msg_7", "webhook-timestamp", ts, "webhook-signature", "v1a,"+sig[3:])
		}},
		{name: "expired", body: event, status: 401, header: func() http.Header {
			ts := unix(-6 * time.Minute)
			return hdr("webhook-id", "msg_8", "webhook-timestamp", ts, "webhook-signature", sign(DefaultWebhookSecret, "msg_8", ts, event))
		}},
		{name: "from the future", body: event, status: 401, header: func() http.Header {
			ts := unix(6 * time.Minute)
			return hdr("webhook-id", "msg_9", "webhook-timestamp", ts, "webhook-signature", sign(DefaultWebhookSecret, "msg_9", ts, event))
		}},
		{name: "timestamp not seconds", body: event, status: 401, header: func() http.Header {
			ts := h.clock.Now().Format(time.RFC3339)
			return hdr("webhook-id", "msg_10", "webhook-timestamp", ts, "webhook-signature", sign(DefaultWebhookSecret, "msg_10", ts, event))
		}},
		{name: "no headers", body: event, status: 401, header: func() http.Header { return http.Header{} }},
		{name: "not JSON", body: "hello", status: 400, header: func() http.Header {
			ts := unix(0)
			return hdr("webhook-id", "msg_11", "webhook-timestamp", ts, "webhook-signature", sign(DefaultWebhookSecret, "msg_11", ts, "hello"))
		}},
	} {
		h.clock.Advance(time.Second) // stay under 10/s
		r := h.hookRaw(0, tc.body, tc.header())
		assert.Equal(t, tc.status, r.status, "%s: %s", tc.name, r.body)
	}
	st := h.s.Stats()[ChannelWebhook]
	assert.Equal(t, 3, st.Accepted)
	assert.Equal(t, 9, st.Rejected)
}

// webhookHosts returns the receivers' host:port, checking they differ.
func webhookHosts(t *testing.T, h *harness) []string {
	t.Helper()
	var hosts []string
	for _, u := range h.s.WebhookURLs() {
		pu, err := url.Parse(u)
		require.NoError(t, err)
		assert.Equal(t, "/hooks", pu.Path)
		hosts = append(hosts, pu.Host)
	}
	require.NotEqual(t, hosts[0], hosts[1], "receivers must be distinct hosts")
	return hosts
}

type hookStep struct {
	at         time.Duration
	receiver   int
	n          int    // requests sent at once
	status     int    // for each of them
	retryAfter string // on 429
}

// runHookSteps sends the steps and checks statuses, Retry-After and the
// records' senders.
func runHookSteps(t *testing.T, h *harness, hosts []string, steps []hookStep) {
	t.Helper()
	var want []string
	id := 0
	for i, st := range steps {
		h.clock.Set(t0.Add(st.at))
		for range st.n {
			id++
			r := h.hook(st.receiver, "msg_"+strconv.Itoa(id), event)
			require.Equal(t, st.status, r.status, "step %d: %s", i, r.body)
			if st.status == http.StatusTooManyRequests {
				assert.Equal(t, st.retryAfter, r.header.Get("Retry-After"), "step %d", i)
			} else {
				assert.Empty(t, r.header.Get("Retry-After"), "step %d", i)
				want = append(want, hosts[st.receiver])
			}
		}
	}
	var senders []string
	for _, rec := range h.s.Records() {
		senders = append(senders, rec.Sender)
		assert.Empty(t, rec.Recipient)
	}
	if diff := cmp.Diff(want, senders); diff != "" {
		t.Errorf("record senders (-want +got):\n%s", diff)
	}
}

func TestWebhookRateLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{WebhookEndpoints: 2}) // 10 in any 1-s span each
	hosts := webhookHosts(t, h)
	// Retry-After is the time until the earliest counted request leaves the
	// span, rounded up: with a clock that moves forward, never over 1s.
	runHookSteps(t, h, hosts, []hookStep{
		{at: ms(500), receiver: 0, n: 5, status: 204},
		{at: ms(800), receiver: 0, n: 5, status: 204},
		{at: ms(800), receiver: 0, n: 1, status: 429, retryAfter: "1"},  // the 11th: wait 700ms
		{at: ms(800), receiver: 1, n: 10, status: 204},                  // its own limit
		{at: ms(1499), receiver: 0, n: 1, status: 429, retryAfter: "1"}, // wait 1ms
		{at: ms(1500), receiver: 0, n: 5, status: 204},                  // the 5 at 500 have left
		{at: ms(1500), receiver: 0, n: 1, status: 429, retryAfter: "1"}, // the 5 at 800 and 5 at 1500
		{at: ms(1800), receiver: 0, n: 5, status: 204},
		{at: ms(1800), receiver: 1, n: 10, status: 204}, // its 10 at 800 have left
		{at: ms(2499), receiver: 0, n: 1, status: 429, retryAfter: "1"},
		{at: ms(2500), receiver: 0, n: 5, status: 204},
	})
	st := h.s.Stats()[ChannelWebhook]
	assert.Equal(t, 45, st.Accepted)
	assert.Equal(t, map[string]int{"429": 4}, st.ThrottledByCode)
	assert.Equal(t, 10, h.s.MaxInAnySecond()[ChannelWebhook])
	assert.Equal(t, map[string]int{hosts[0]: 10, hosts[1]: 10}, MaxInSpan(h.s.Records(), ChannelWebhook, time.Second))
}

func TestWebhookRateLimitRetryAfterClockSetBack(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{WebhookRPS: 2})
	h.clock.Set(t0.Add(ms(1500)))
	require.Equal(t, http.StatusNoContent, h.hook(0, "a", event).status)
	require.Equal(t, http.StatusNoContent, h.hook(0, "b", event).status)
	// Set back 0.7s: the span (0.5s, 1.5s] would hold it and both, until
	// they leave at t0+2.5s (1.7s on: Retry-After 2).
	h.clock.Set(t0.Add(ms(800)))
	r := h.hook(0, "c", event)
	require.Equal(t, http.StatusTooManyRequests, r.status)
	assert.Equal(t, "2", r.header.Get("Retry-After"))
	// Set back 1.5s: no 1-second span holds it with them.
	h.clock.Set(t0)
	require.Equal(t, http.StatusNoContent, h.hook(0, "d", event).status)
}

func TestWebhookRateLimitCalendar(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{WebhookEndpoints: 2, CalendarSeconds: true}) // 10 per calendar second each
	hosts := webhookHosts(t, h)
	// Retry-After is the time to the next whole second, rounded up: always 1.
	runHookSteps(t, h, hosts, []hookStep{
		{at: 500 * time.Millisecond, receiver: 0, n: 10, status: 204},
		{at: 500 * time.Millisecond, receiver: 0, n: 1, status: 429, retryAfter: "1"}, // the 11th of the second
		{at: 500 * time.Millisecond, receiver: 1, n: 10, status: 204},                 // its own limit
		{at: time.Second - time.Nanosecond, receiver: 0, n: 1, status: 429, retryAfter: "1"},
		{at: time.Second, receiver: 0, n: 10, status: 204}, // a new second: 20 within 500ms
		{at: time.Second, receiver: 0, n: 1, status: 429, retryAfter: "1"},
		{at: 1999 * time.Millisecond, receiver: 0, n: 1, status: 429, retryAfter: "1"},
		{at: 2 * time.Second, receiver: 0, n: 1, status: 204},
	})
	st := h.s.Stats()[ChannelWebhook]
	assert.Equal(t, 31, st.Accepted)
	assert.Equal(t, map[string]int{"429": 4}, st.ThrottledByCode)
	assert.Equal(t, 20, h.s.MaxInAnySecond()[ChannelWebhook]) // the calendar mode lets 20 through within 500ms
}

func TestWebhookDuplicates(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	for _, id := range []string{"msg_1", "msg_1", "msg_2"} {
		h.clock.Advance(time.Second)
		require.Equal(t, http.StatusNoContent, h.hook(0, id, event).status)
	}
	var got []keyDup
	for _, rec := range h.s.Records() {
		got = append(got, keyDup{rec.IdempotencyKey, rec.Duplicate})
	}
	want := []keyDup{{"msg_1", false}, {"msg_1", true}, {"msg_2", false}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(keyDup{})); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

func TestWebhookCustomSecret(t *testing.T) {
	t.Parallel()
	const secret = "whsec_" + "c2x1aWNlLW90aGVyLXNlY3JldC0yNC1ieXRlcw=="
	h := newHarness(t, Options{WebhookSecret: secret})
	ts := strconv.FormatInt(t0.Unix(), 10)
	r := h.hookRaw(0, event, hdr("webhook-id", "m", "webhook-timestamp", ts, "webhook-signature", sign(secret, "m", ts, event)))
	assert.Equal(t, http.StatusNoContent, r.status, "body: %s", r.body)
	h.clock.Advance(time.Second)
	assert.Equal(t, http.StatusUnauthorized, h.hook(0, "m2", event).status, "default secret must not verify")
}

func TestRetryAfterSeconds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		wait time.Duration
		want int
	}{
		{0, 1}, {time.Nanosecond, 1}, {time.Second, 1}, {time.Second + 1, 2}, {2500 * time.Millisecond, 3},
	} {
		assert.Equal(t, tc.want, retryAfterSeconds(tc.wait), "wait %s", tc.wait)
	}
}

func FuzzVerifyWebhook(f *testing.F) {
	f.Add("msg_1", "1793610000", "v1,abc", []byte(event))
	f.Add("", "", "", []byte{})
	f.Add("id", "-1", "v1,"+base64.StdEncoding.EncodeToString(make([]byte, 32))+" v1", []byte("{}"))
	key, err := decodeWebhookSecret(DefaultWebhookSecret)
	require.NoError(f, err)
	now := time.Unix(1793610000, 0)
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		_ = verifyWebhook(key, id, ts, sig, body, now) // must not panic
		// A correct signature always verifies.
		if id == "" {
			return
		}
		good := sign(DefaultWebhookSecret, id, "1793610000", string(body))
		if err := verifyWebhook(key, id, "1793610000", sig+" "+good, body, now); err != nil {
			t.Fatalf("valid signature refused: %v", err)
		}
	})
}
