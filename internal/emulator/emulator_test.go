package emulator

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestIntrospection(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	require.Equal(t, http.StatusOK, h.wa(phoneID, textMessage("+16505551234"), hdr("Idempotency-Key", "k1")).status)
	require.Equal(t, http.StatusBadRequest, h.waText(phoneID, "+16505551234").status) // 131056
	require.Equal(t, http.StatusCreated, h.sms(smsForm(fromA, toSMS), nil).status)
	require.Equal(t, http.StatusNoContent, h.hook(0, "msg_1", event).status)
	h.clock.Advance(1500 * time.Millisecond)
	require.Equal(t, http.StatusNoContent, h.hook(0, "msg_1", event).status)

	// Records: the same as Records(), with "at" in RFC 3339 with nanoseconds.
	r := h.do(http.MethodGet, h.s.WhatsAppURL()+"/_emulator/records", nil, nil)
	require.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "application/json", r.header.Get("Content-Type"))
	var recs []Record
	require.NoError(t, json.Unmarshal(r.body, &recs))
	if diff := cmp.Diff(h.s.Records(), recs); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	require.Len(t, recs, 4)
	var raw []map[string]any
	require.NoError(t, json.Unmarshal(r.body, &raw))
	assert.Equal(t, t0.Format(time.RFC3339Nano), raw[0]["at"])
	assert.Equal(t, t0.Add(1500*time.Millisecond).Format(time.RFC3339Nano), raw[3]["at"])
	var keys []string
	for k := range raw[0] {
		keys = append(keys, k)
	}
	assert.ElementsMatch(t, []string{"channel", "at", "sender", "recipient", "idempotency_key", "duplicate", "provider_id", "kind"}, keys)

	// Stats.
	r = h.do(http.MethodGet, h.s.WhatsAppURL()+"/_emulator/stats", nil, nil)
	require.Equal(t, http.StatusOK, r.status)
	var stats map[string]ChannelStats
	require.NoError(t, json.Unmarshal(r.body, &stats))
	want := map[string]ChannelStats{
		ChannelWhatsApp: {Accepted: 1, Unique: 1, Throttled: 1, ThrottledByCode: map[string]int{"131056": 1}},
		ChannelSMS:      {Accepted: 1, Unique: 1, ThrottledByCode: map[string]int{}},
		ChannelWebhook:  {Accepted: 2, Unique: 1, Duplicates: 1, ThrottledByCode: map[string]int{}},
	}
	if diff := cmp.Diff(want, stats); diff != "" {
		t.Errorf("stats over HTTP (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, h.s.Stats()); diff != "" {
		t.Errorf("Stats() (-want +got):\n%s", diff)
	}
	assert.Contains(t, string(r.body), `"throttled_by_code":{"131056":1},"max_in_any_second":1}`)
	// max_in_any_second is Server.MaxInAnySecond (the two hooks are 1.5s apart).
	var maxIn map[string]struct {
		MaxInAnySecond *int `json:"max_in_any_second"`
	}
	require.NoError(t, json.Unmarshal(r.body, &maxIn))
	wantMax := map[string]int{ChannelWhatsApp: 1, ChannelSMS: 1, ChannelWebhook: 1}
	assert.Equal(t, wantMax, h.s.MaxInAnySecond())
	for ch, n := range wantMax {
		require.NotNil(t, maxIn[ch].MaxInAnySecond, ch)
		assert.Equal(t, n, *maxIn[ch].MaxInAnySecond, ch)
	}

	// Reset clears records, counters, seen keys and limits.
	r = h.do(http.MethodPost, h.s.WhatsAppURL()+"/_emulator/reset", nil, nil)
	require.Equal(t, http.StatusNoContent, r.status)
	assert.Empty(t, h.s.Records())
	r = h.do(http.MethodGet, h.s.WhatsAppURL()+"/_emulator/records", nil, nil)
	assert.Equal(t, "[]\n", string(r.body))
	for ch, st := range h.s.Stats() {
		assert.Equal(t, ChannelStats{ThrottledByCode: map[string]int{}}, st, ch)
	}
	// The pair that was throttled is free again, and k1 is no longer known.
	r = h.wa(phoneID, textMessage("+16505551234"), hdr("Idempotency-Key", "k1"))
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	assert.False(t, h.s.Records()[0].Duplicate)

	// Wrong methods.
	assert.Equal(t, http.StatusMethodNotAllowed, h.do(http.MethodPost, h.s.WhatsAppURL()+"/_emulator/records", nil, nil).status)
	assert.Equal(t, http.StatusMethodNotAllowed, h.do(http.MethodGet, h.s.WhatsAppURL()+"/_emulator/reset", nil, nil).status)
}

func TestRecordsAndStatsAreCopies(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	require.Equal(t, http.StatusOK, h.waText(phoneID, "+16505551234").status)
	recs := h.s.Records()
	recs[0].Sender = "changed"
	stats := h.s.Stats()
	stats[ChannelWhatsApp].ThrottledByCode["x"] = 1
	assert.Equal(t, phoneID, h.s.Records()[0].Sender)
	assert.Empty(t, h.s.Stats()[ChannelWhatsApp].ThrottledByCode)
	urls := h.s.WebhookURLs()
	urls[0] = "changed"
	assert.NotEqual(t, "changed", h.s.WebhookURLs()[0])
}

func TestStartValidates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opts  Options
		field string
	}{
		{Options{WhatsAppMPS: -1}, "WhatsAppMPS"},
		{Options{TwilioMPS: -1}, "TwilioMPS"},
		{Options{TwilioConcurrency: -5}, "TwilioConcurrency"},
		{Options{WebhookEndpoints: -1}, "WebhookEndpoints"},
		{Options{WebhookRPS: -1}, "WebhookRPS"},
		{Options{PairInterval: -time.Second}, "PairInterval"},
		{Options{Latency: -time.Second}, "Latency"},
		{Options{TwilioAccountSID: "AC123"}, "TwilioAccountSID"},
		{Options{TwilioAccountSID: "MG0123456789abcdef0123456789abcdef"}, "TwilioAccountSID"},
		{Options{WebhookSecret: "c2VjcmV0"}, "WebhookSecret"},
		{Options{WebhookSecret: "whsec_!!!"}, "WebhookSecret"},
		{Options{WebhookSecret: "whsec_c2hvcnQ="}, "WebhookSecret"}, // 5 bytes
		{Options{Ports: Ports{WhatsApp: 70000}}, "Ports.WhatsApp"},
		{Options{Ports: Ports{Twilio: -1}}, "Ports.Twilio"},
		{Options{Ports: Ports{WebhookBase: 65535}, WebhookEndpoints: 2}, "Ports.WebhookBase"},
	} {
		s, err := Start(tc.opts)
		if !assert.Error(t, err, tc.field) {
			s.Close()
			continue
		}
		assert.Contains(t, err.Error(), tc.field+":")
	}
}

func TestStartDefaults(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	o := h.s.opts
	assert.Equal(t, DefaultWhatsAppToken, o.WhatsAppToken)
	assert.Equal(t, 80, o.WhatsAppMPS)
	assert.Equal(t, 6*time.Second, o.PairInterval)
	assert.Regexp(t, `^AC[0-9a-fA-F]{32}$`, o.TwilioAccountSID)
	assert.Equal(t, "test-auth-token", o.TwilioAuthToken)
	assert.Equal(t, 1, o.TwilioMPS)
	assert.Equal(t, 100, o.TwilioConcurrency)
	assert.Equal(t, 1, o.WebhookEndpoints)
	assert.Equal(t, 10, o.WebhookRPS)
	assert.Zero(t, h.s.tolerance) // the pair interval is exact
	assert.False(t, o.CalendarSeconds)
	assert.Equal(t, "127.0.0.1", o.Addr)
	assert.Regexp(t, `^http://127\.0\.0\.1:[0-9]+$`, h.s.WhatsAppURL())
	assert.Regexp(t, `^http://127\.0\.0\.1:[0-9]+$`, h.s.TwilioURL())
	require.Len(t, h.s.WebhookURLs(), 1)
	assert.Regexp(t, `^http://127\.0\.0\.1:[0-9]+/hooks$`, h.s.WebhookURLs()[0])
	key, err := decodeWebhookSecret(DefaultWebhookSecret)
	require.NoError(t, err)
	assert.Len(t, key, 24)
}

// freePorts finds n consecutive free ports (best effort: another process may
// take one before Start binds it).
func freePorts(t *testing.T, n int) int {
	t.Helper()
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		base := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if base+n > 65535 {
			continue
		}
		ok := true
		var held []net.Listener
		for i := range n {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+i))
			if err != nil {
				ok = false
				break
			}
			held = append(held, l)
		}
		for _, l := range held {
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free consecutive ports")
	return 0
}

func TestStartFixedPorts(t *testing.T) {
	t.Parallel()
	base := freePorts(t, 5)
	h := newHarness(t, Options{Ports: Ports{WhatsApp: base, Twilio: base + 1, WebhookBase: base + 2}, WebhookEndpoints: 3})
	assert.Equal(t, "http://127.0.0.1:"+strconv.Itoa(base), h.s.WhatsAppURL())
	assert.Equal(t, "http://127.0.0.1:"+strconv.Itoa(base+1), h.s.TwilioURL())
	assert.Equal(t, []string{
		"http://127.0.0.1:" + strconv.Itoa(base+2) + "/hooks",
		"http://127.0.0.1:" + strconv.Itoa(base+3) + "/hooks",
		"http://127.0.0.1:" + strconv.Itoa(base+4) + "/hooks",
	}, h.s.WebhookURLs())

	// A port in use is an error naming the listener, and nothing stays open.
	_, err := Start(Options{Ports: Ports{Twilio: base}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "listen twilio")
}

func TestCloseIsIdempotent(t *testing.T) {
	t.Parallel()
	s, err := Start(Options{})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	_, err = http.Get(s.WhatsAppURL() + "/_emulator/stats")
	assert.Error(t, err, "listener still open after Close")
}

func TestRun(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Run prints, then returns at once
	var out bytes.Buffer
	require.NoError(t, Run(ctx, Options{WebhookEndpoints: 2}, &out))
	s := out.String()
	for _, want := range []string{
		"whatsapp  http://127.0.0.1:",
		"/v23.0/{phone-number-id}/messages",
		"bearer token test-token; 80 msg/s per phone-number-id (130429); 1 per 6s per recipient (131056)",
		"/2010-04-01/Accounts/" + DefaultTwilioAccountSID + "/Messages.json",
		"auth token test-auth-token; 1 msg/s per From; 100 concurrent requests (20429)",
		"(receiver 0)", "(receiver 1)",
		"secret " + DefaultWebhookSecret,
		"rates     per-second caps hold in any 1-s span (sliding window on arrival), exact; pair interval exact\n",
		"/_emulator/records", "/_emulator/stats", "POST http://127.0.0.1:",
	} {
		assert.Contains(t, s, want)
	}

	out.Reset()
	require.NoError(t, Run(ctx, Options{WhatsAppToken: "real-looking", TwilioAuthToken: "x", WebhookSecret: DefaultWebhookSecret, CalendarSeconds: true, Tolerance: 50 * time.Millisecond}, &out))
	s = out.String()
	assert.NotContains(t, s, "real-looking")
	assert.Equal(t, 3, strings.Count(s, "(as configured)"))
	assert.Contains(t, s, "rates     per-second caps count per calendar second (UTC-aligned), exact; pair interval tolerance 50ms\n")

	out.Reset()
	require.NoError(t, Run(ctx, Options{Tolerance: -1}, &out))
	assert.Contains(t, out.String(), "; pair interval exact\n")

	_, err := Start(Options{WhatsAppMPS: -1})
	require.Error(t, err)
	assert.Error(t, Run(ctx, Options{WhatsAppMPS: -1}, &out))
}
