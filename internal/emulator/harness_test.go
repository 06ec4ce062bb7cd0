package emulator

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is the fake clock's start.
var t0 = time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)

// ms is a shorthand for fractional milliseconds in step tables.
func ms(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

// fakeClock is a settable clock for Options.Clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// harness is a started Server with a fake clock and an HTTP client.
type harness struct {
	t     *testing.T
	s     *Server
	clock *fakeClock
	hc    *http.Client
}

// newHarness starts a Server; opts.Clock defaults to a fake clock at t0.
func newHarness(t *testing.T, opts Options) *harness {
	t.Helper()
	clock := &fakeClock{now: t0}
	if opts.Clock == nil {
		opts.Clock = clock.Now
	}
	s, err := Start(opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &harness{t: t, s: s, clock: clock, hc: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (h *harness) do(method, u string, body io.Reader, header http.Header) response {
	h.t.Helper()
	req, err := http.NewRequest(method, u, body)
	require.NoError(h.t, err)
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := h.hc.Do(req)
	require.NoError(h.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(h.t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// hdr builds a header from key, value pairs.
func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// wa sends payload to /v23.0/{phoneID}/messages with the default token
// unless header sets Authorization.
func (h *harness) wa(phoneID string, payload any, header http.Header) response {
	h.t.Helper()
	return h.waRaw("/v23.0/"+phoneID+"/messages", payload, header)
}

func (h *harness) waRaw(path string, payload any, header http.Header) response {
	h.t.Helper()
	var body []byte
	switch p := payload.(type) {
	case string:
		body = []byte(p)
	default:
		var err error
		body, err = json.Marshal(p)
		require.NoError(h.t, err)
	}
	if header == nil {
		header = http.Header{}
	}
	if _, ok := header["Authorization"]; !ok {
		header.Set("Authorization", "Bearer "+DefaultWhatsAppToken)
	}
	header.Set("Content-Type", "application/json")
	return h.do(http.MethodPost, h.s.WhatsAppURL()+path, bytes.NewReader(body), header)
}

// waText sends a text message from phoneID to to.
func (h *harness) waText(phoneID, to string) response {
	h.t.Helper()
	return h.wa(phoneID, textMessage(to), nil)
}

func textMessage(to string) map[string]any {
	return map[string]any{
		"messaging_product": "whatsapp",
		"recipient_type":    "individual",
		"to":                to,
		"type":              "text",
		"text":              map[string]any{"body": "hello", "preview_url": false},
	}
}

// sms posts form to the default account with the default credentials unless
// header sets Authorization.
func (h *harness) sms(form url.Values, header http.Header) response {
	h.t.Helper()
	return h.smsTo(DefaultTwilioAccountSID, form, header)
}

func (h *harness) smsTo(account string, form url.Values, header http.Header) response {
	h.t.Helper()
	if header == nil {
		header = http.Header{}
	}
	if _, ok := header["Authorization"]; !ok {
		header.Set("Authorization", basicAuth(DefaultTwilioAccountSID, DefaultTwilioAuthToken))
	}
	header.Set("Content-Type", "application/x-www-form-urlencoded")
	u := h.s.TwilioURL() + "/2010-04-01/Accounts/" + account + "/Messages.json"
	return h.do(http.MethodPost, u, strings.NewReader(form.Encode()), header)
}

func basicAuth(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

func smsForm(from, to string) url.Values {
	return url.Values{"From": {from}, "To": {to}, "Body": {"hello"}}
}

// hook posts body to receiver i, signed with the default secret at the fake
// clock's time.
func (h *harness) hook(i int, id, body string) response {
	h.t.Helper()
	ts := strconv.FormatInt(h.clock.Now().Unix(), 10)
	return h.hookRaw(i, body, hdr(
		"webhook-id", id,
		"webhook-timestamp", ts,
		"webhook-signature", sign(DefaultWebhookSecret, id, ts, body),
	))
}

func (h *harness) hookRaw(i int, body string, header http.Header) response {
	h.t.Helper()
	header.Set("Content-Type", "application/json")
	return h.do(http.MethodPost, h.s.WebhookURLs()[i], strings.NewReader(body), header)
}

// sign returns a Standard Webhooks "v1,<base64>" signature.
func sign(secret, id, ts, body string) string {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		panic(err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + body))
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// graphErr decodes a WhatsApp error body.
func (r response) graphErr(t *testing.T) graphError {
	t.Helper()
	var b graphErrorBody
	require.NoError(t, json.Unmarshal(r.body, &b), "body: %s", r.body)
	return b.Error
}

// twErr decodes a Twilio error body.
func (r response) twErr(t *testing.T) twilioError {
	t.Helper()
	var e twilioError
	require.NoError(t, json.Unmarshal(r.body, &e), "body: %s", r.body)
	return e
}

// recipient returns a distinct 11-digit number for i that avoids the magic
// suffixes.
func recipient(i int) string { return fmt.Sprintf("1555%06d1", i) }
