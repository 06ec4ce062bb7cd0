package callbacks_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/internal/callbacks"
	"github.com/sluice-dev/sluice/internal/delivery"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

const (
	authToken   = "twilio-auth-token-0123456789abcdef"
	appSecret   = "meta-app-secret-0123456789abcdef"
	verifyToken = "verify-me-7f3a"
	publicURL   = "https://sluice.example.com/callbacks/twilio"
	accountSID  = "AC0123456789abcdef0123456789abcdef"
	messageSID  = "SM0123456789abcdef0123456789abcdef"
	sender      = "+12025550100"
	recipient   = "+12025550123"
	phoneID     = "106540352242922"
	wamid       = "wamid.HBgLMTIwMjU1NTAxMjMVAgARGBI5QTNDQTVCM0Q0Q0Q2RTY3RTcA"
)

// twilioSign computes X-Twilio-Signature as Twilio's security docs
// describe it, independently of the package: HMAC-SHA1 of the URL and
// each POST parameter's name and value, names sorted, base64.
func twilioSign(token, u string, params url.Values) string {
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(u)
	for _, k := range keys {
		for _, v := range params[k] {
			b.WriteString(k + v)
		}
	}
	mac := hmac.New(sha1.New, []byte(token))
	mac.Write([]byte(b.String()))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// metaSign computes X-Hub-Signature-256 as Meta's webhook docs describe.
func metaSign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

func TestTwilioSignatureMatchesTwiliosExample(t *testing.T) {
	t.Parallel()
	// The worked example of Twilio's request validation docs and of its
	// helper libraries' tests (twilio-python tests/unit/test_request_validator.py).
	params := url.Values{"CallSid": {"CA1234567890ABCDE"}, "Caller": {"+14158675309"}, "Digits": {"1234"},
		"From": {"+14158675309"}, "To": {"+18005551212"}}
	const u = "https://mycompany.com/myapp.php?foo=1&bar=2"
	require.Equal(t, "RSOYDt4T1cUTdK1PDd93/VVr8B8=", callbacks.TwilioSignature("12345", u, params))
	require.Equal(t, "RSOYDt4T1cUTdK1PDd93/VVr8B8=", twilioSign("12345", u, params), "the test's own signer agrees")
	params.Set("Digits", "9999")
	require.NotEqual(t, "RSOYDt4T1cUTdK1PDd93/VVr8B8=", callbacks.TwilioSignature("12345", u, params))
}

func TestWhatsAppSignature(t *testing.T) {
	t.Parallel()
	body := []byte(`{"object":"whatsapp_business_account"}`)
	require.Equal(t, metaSign("s3cret", body), callbacks.WhatsAppSignature("s3cret", body))
	require.True(t, strings.HasPrefix(callbacks.WhatsAppSignature("s3cret", body), "sha256="))
}

// env is a callbacks handler over a real redis-server, with a real worker
// (built as internal/app builds it) for the feedback.
type env struct {
	t     *testing.T
	h     http.Handler
	store *delivery.Store
	lim   *throttle.Redis
	rdb   *redis.Client
	reg   *prometheus.Registry
	logs  *bytes.Buffer
}

func newEnv(t *testing.T, mod ...func(*callbacks.Options)) *env {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	lim := throttle.NewRedis(rdb, throttle.Options{Prefix: "cb"})
	store, err := delivery.New(delivery.Options{Redis: rdb, Prefix: "cb"})
	require.NoError(t, err)
	sms := worker.SMSChannel(&channels.Twilio{AccountSID: accountSID, AuthToken: authToken}, []rules.Rule{
		{Key: "sms:sender:{sender}", Limit: throttle.Limit{Name: "sender", Algorithm: throttle.GCRA, Rate: throttle.Rate{Limit: 10, Period: time.Second}, Burst: 1}}})
	wa := worker.WhatsAppChannel(&channels.WhatsApp{Token: "wa-token"}, nil)
	w, err := worker.New(worker.Options{Redis: rdb, Limiter: lim, Channels: []worker.Channel{sms, wa}, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	logs := &bytes.Buffer{}
	reg := prometheus.NewRegistry()
	o := callbacks.Options{Store: store, Feedback: w.Feedback, TwilioAuthToken: authToken, TwilioURL: publicURL,
		WhatsAppAppSecret: appSecret, WhatsAppVerifyToken: verifyToken, Limiter: lim, Registerer: reg,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), MaxBodyBytes: 64 << 10}
	for _, m := range mod {
		m(&o)
	}
	h, err := callbacks.New(o)
	require.NoError(t, err)
	e := &env{t: t, h: h, store: store, lim: lim, rdb: rdb, reg: reg, logs: logs}
	t.Cleanup(func() {
		for _, secret := range []string{authToken, appSecret, verifyToken} {
			require.NotContains(t, logs.String(), secret, "a secret was logged")
		}
	})
	return e
}

func (e *env) do(req *http.Request) (int, string) {
	e.t.Helper()
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

func twilioRequest(target string, params url.Values, sig string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(params.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if sig != "" {
		req.Header.Set("X-Twilio-Signature", sig)
	}
	return req
}

func statusParams(status, code string) url.Values {
	p := url.Values{"MessageSid": {messageSID}, "SmsSid": {messageSID}, "MessageStatus": {status}, "SmsStatus": {status},
		"From": {sender}, "To": {recipient}, "AccountSid": {accountSID}, "ApiVersion": {"2010-04-01"}}
	if code != "" {
		p.Set("ErrorCode", code)
	}
	return p
}

func (e *env) recordSent(channel, providerID string) {
	e.t.Helper()
	require.NoError(e.t, e.store.RecordSent(context.Background(), delivery.Sent{TaskID: "task-1", Queue: channel, Channel: channel,
		Tenant: "acme", Campaign: "spring-sale", ProviderID: providerID, Status: "sent", At: time.Now()}))
}

func (e *env) state() delivery.State {
	e.t.Helper()
	st, err := e.store.Get(context.Background(), "task-1")
	require.NoError(e.t, err)
	return st.State
}

func TestTwilioCallbackRecordsSignedStatuses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.recordSent("sms", messageSID)

	p := statusParams("delivered", "")
	code, _ := e.do(twilioRequest("http://10.0.0.5:9090/callbacks/twilio", p, twilioSign(authToken, publicURL, p)))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, delivery.StateDelivered, e.state())

	// A late "sent" does not move it back.
	p = statusParams("sent", "")
	code, _ = e.do(twilioRequest("http://10.0.0.5:9090/callbacks/twilio", p, twilioSign(authToken, publicURL, p)))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, delivery.StateDelivered, e.state())

	// Twilio may sign the URL with the scheme's port.
	p = statusParams("read", "")
	code, _ = e.do(twilioRequest("http://10.0.0.5:9090/callbacks/twilio", p, twilioSign(authToken, "https://sluice.example.com:443/callbacks/twilio", p)))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, delivery.StateRead, e.state())
	pr, err := e.store.Progress(context.Background(), "acme", "spring-sale")
	require.NoError(t, err)
	require.Equal(t, delivery.Progress{Sent: 1, Delivered: 1, Read: 1}, pr)
	require.Equal(t, 3.0, counter(t, e.reg, "sluice_callback_requests_total", map[string]string{"provider": "twilio", "result": "ok"}))
	require.Equal(t, 1.0, counter(t, e.reg, "sluice_delivery_status_total", map[string]string{"channel": "sms", "status": "delivered"}))
}

func TestTwilioCallbackRefusesBadSignatures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.recordSent("sms", messageSID)
	p := statusParams("undelivered", "30003")
	forged := statusParams("delivered", "")
	for name, req := range map[string]*http.Request{
		"missing":          twilioRequest("/callbacks/twilio", p, ""),
		"wrong token":      twilioRequest("/callbacks/twilio", p, twilioSign("another-token", publicURL, p)),
		"other URL":        twilioRequest("/callbacks/twilio", p, twilioSign(authToken, "https://evil.example/callbacks/twilio", p)),
		"params changed":   twilioRequest("/callbacks/twilio", forged, twilioSign(authToken, publicURL, p)),
		"garbage":          twilioRequest("/callbacks/twilio", p, "not base64 at all \x00"),
		"signature of url": twilioRequest("/callbacks/twilio", p, twilioSign(authToken, publicURL, nil)),
	} {
		code, body := e.do(req)
		require.Equal(t, http.StatusForbidden, code, name)
		require.NotContains(t, body, twilioSign(authToken, publicURL, p), "the right signature is never echoed")
	}
	require.Equal(t, delivery.StateSent, e.state(), "nothing recorded")
	require.Equal(t, 6.0, counter(t, e.reg, "sluice_callback_requests_total", map[string]string{"provider": "twilio", "result": "forbidden"}))
}

func TestTwilioCallbackURLFromTheRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *callbacks.Options) { o.TwilioURL = "" })
	e.recordSent("sms", messageSID)
	p := statusParams("delivered", "")
	// Behind a TLS-terminating proxy that says so.
	req := twilioRequest("http://hooks.example.org/callbacks/twilio?tenant=a", p, twilioSign(authToken, "https://hooks.example.org/callbacks/twilio?tenant=a", p))
	req.Header.Set("X-Forwarded-Proto", "https")
	code, _ := e.do(req)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, delivery.StateDelivered, e.state())
}

func TestTwilioCallbackRefusesBadFields(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for name, tc := range map[string]struct {
		mod  func(url.Values)
		want string
	}{
		"no sid":       {func(p url.Values) { p.Del("MessageSid") }, "MessageSid: want"},
		"bad sid":      {func(p url.Values) { p.Set("MessageSid", "SM../../etc") }, "MessageSid: want"},
		"two sids":     {func(p url.Values) { p.Add("MessageSid", "SM9999999999abcdef0123456789abcdef") }, "MessageSid: want"},
		"no status":    {func(p url.Values) { p.Del("MessageStatus") }, "MessageStatus: want"},
		"code":         {func(p url.Values) { p.Set("ErrorCode", "30022; DROP") }, "ErrorCode: want"},
		"huge code":    {func(p url.Values) { p.Set("ErrorCode", "99999999999") }, "ErrorCode: want"},
		"from":         {func(p url.Values) { p.Set("From", "<script>") }, "From: want"},
		"account":      {func(p url.Values) { p.Set("AccountSid", "AC1") }, "AccountSid: want"},
		"service":      {func(p url.Values) { p.Set("MessagingServiceSid", strings.Repeat("M", 40)) }, "MessagingServiceSid: want"},
		"long to":      {func(p url.Values) { p.Set("To", strings.Repeat("1", 65)) }, "To: want"},
		"ctl in to":    {func(p url.Values) { p.Set("To", "+1202\n") }, "To: want"},
		"long status":  {func(p url.Values) { p.Set("MessageStatus", strings.Repeat("x", 33)) }, "MessageStatus: want"},
		"empty status": {func(p url.Values) { p.Set("MessageStatus", "") }, "MessageStatus: want"},
	} {
		p := statusParams("failed", "30008")
		tc.mod(p)
		code, body := e.do(twilioRequest("/callbacks/twilio", p, twilioSign(authToken, publicURL, p)))
		require.Equal(t, http.StatusBadRequest, code, name)
		require.Contains(t, body, tc.want, name)
		require.NotContains(t, body, "<script>", name)
	}
	// An untracked status (inbound) is accepted and counted as other.
	p := statusParams("received", "")
	code, _ := e.do(twilioRequest("/callbacks/twilio", p, twilioSign(authToken, publicURL, p)))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 1.0, counter(t, e.reg, "sluice_delivery_status_total", map[string]string{"channel": "sms", "status": "other"}))
}

func TestTwilioThrottleCodePausesTheSender(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.recordSent("sms", messageSID)
	ctx := context.Background()
	_, after, err := e.lim.Events(ctx, "0", 1000, 0)
	require.NoError(t, err)

	p := statusParams("undelivered", "30022")
	code, _ := e.do(twilioRequest("/callbacks/twilio", p, twilioSign(authToken, publicURL, p)))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, delivery.StateUndelivered, e.state())

	pz, err := e.lim.PauseOf(ctx, "sms:paused:sender:"+sender)
	require.NoError(t, err)
	require.NotNil(t, pz, "30022 pauses the sender in Redis, for every worker")
	require.Equal(t, 30022, pz.Code)
	// Twilio posting the same status again (or a replay of it) is not a
	// second throttle: the pause is neither renewed nor counted again.
	code, _ = e.do(twilioRequest("/callbacks/twilio", p, twilioSign(authToken, publicURL, p)))
	require.Equal(t, http.StatusOK, code)
	again, err := e.lim.PauseOf(ctx, "sms:paused:sender:"+sender)
	require.NoError(t, err)
	require.Equal(t, pz.Since, again.Since, "the repeat renewed the pause")
	require.Equal(t, 1, again.InARow)
	st, err := e.store.Get(ctx, "task-1")
	require.NoError(t, err)
	require.Equal(t, 30022, st.Code)
	require.Equal(t, "twilio: throttled: code 30022 (carrier throughput exceeded)", st.Reason)

	evs, _, err := e.lim.Events(ctx, after, 100, 0)
	require.NoError(t, err)
	types := map[string]throttle.Event{}
	for _, ev := range evs {
		types[ev.Type] = ev
	}
	require.Contains(t, types, throttle.EventProviderPaused)
	require.Contains(t, types, callbacks.EventDeliveryFailed)
	require.Equal(t, int64(30022), types[callbacks.EventDeliveryFailed].Code)
	require.Equal(t, "sms:message:"+messageSID, types[callbacks.EventDeliveryFailed].Key)

	// Through a Messaging Service the service is the sender that is paused.
	p = statusParams("failed", "30023")
	p.Set("MessageSid", "SM00000000000000000000000000000001")
	p.Set("MessagingServiceSid", "MG0123456789abcdef0123456789abcdef")
	code, _ = e.do(twilioRequest("/callbacks/twilio", p, twilioSign(authToken, publicURL, p)))
	require.Equal(t, http.StatusOK, code)
	pz, err = e.lim.PauseOf(ctx, "sms:paused:sender:MG0123456789abcdef0123456789abcdef")
	require.NoError(t, err)
	require.NotNil(t, pz)
	require.Greater(t, time.Until(pz.Until), time.Minute, "30023 waits for the daily reset")
}

// A throttle status for a send the worker has not recorded yet (the
// callback won the race, or the message is another app's) is fed back
// once: Twilio's repeats of it neither renew the pause nor count again.
func TestThrottleStatusBeforeTheRecordIsFedBackOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	p := statusParams("undelivered", "30022")
	code, _ := e.do(twilioRequest("/callbacks/twilio", p, twilioSign(authToken, publicURL, p)))
	require.Equal(t, http.StatusOK, code)
	pz, err := e.lim.PauseOf(ctx, "sms:paused:sender:"+sender)
	require.NoError(t, err)
	require.NotNil(t, pz, "the first report pauses the sender")
	for range 2 {
		code, _ = e.do(twilioRequest("/callbacks/twilio", p, twilioSign(authToken, publicURL, p)))
		require.Equal(t, http.StatusOK, code)
	}
	again, err := e.lim.PauseOf(ctx, "sms:paused:sender:"+sender)
	require.NoError(t, err)
	require.Equal(t, pz.Since, again.Since, "a repeat renewed the pause")
	require.Equal(t, 1, again.InARow, "a repeat counted as another throttle")
	// The send recorded afterwards takes the waiting status.
	e.recordSent("sms", messageSID)
	require.Equal(t, delivery.StateUndelivered, e.state())
}

func TestNotConfiguredProvidersAnswer404(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *callbacks.Options) { o.TwilioAuthToken, o.WhatsAppAppSecret = "", "" })
	p := statusParams("delivered", "")
	code, body := e.do(twilioRequest("/callbacks/twilio", p, twilioSign(authToken, publicURL, p)))
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, body, "not configured")
	code, _ = e.do(httptest.NewRequest(http.MethodGet, "/callbacks/whatsapp?hub.mode=subscribe&hub.verify_token="+verifyToken+"&hub.challenge=1", nil))
	require.Equal(t, http.StatusNotFound, code)
	code, _ = e.do(whatsappRequest([]byte(`{}`), metaSign(appSecret, []byte(`{}`))))
	require.Equal(t, http.StatusNotFound, code)
}

func TestMethodsAndPaths(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	code, _ := e.do(httptest.NewRequest(http.MethodGet, "/callbacks/twilio", nil))
	require.Equal(t, http.StatusMethodNotAllowed, code)
	code, _ = e.do(httptest.NewRequest(http.MethodPost, "/callbacks/other", nil))
	require.Equal(t, http.StatusNotFound, code)
}

func TestBodiesAreBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *callbacks.Options) { o.MaxBodyBytes = 4096 })
	p := statusParams("delivered", "")
	p.Set("Body", strings.Repeat("x", 5000))
	code, _ := e.do(twilioRequest("/callbacks/twilio", p, twilioSign(authToken, publicURL, p)))
	require.Equal(t, http.StatusRequestEntityTooLarge, code)
	body := []byte(`{"object":"whatsapp_business_account","pad":"` + strings.Repeat("x", 5000) + `"}`)
	code, _ = e.do(whatsappRequest(body, metaSign(appSecret, body)))
	require.Equal(t, http.StatusRequestEntityTooLarge, code)
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, err := callbacks.New(callbacks.Options{})
	require.ErrorContains(t, err, "Options.Store is required")
	store, err := delivery.New(delivery.Options{Redis: redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})})
	require.NoError(t, err)
	_, err = callbacks.New(callbacks.Options{Store: store, TwilioURL: "https://user:" + authToken + "@x.example/cb"})
	require.ErrorContains(t, err, "Options.TwilioURL")
	require.NotContains(t, err.Error(), authToken)
	_, err = callbacks.New(callbacks.Options{Store: store, MaxBodyBytes: 10})
	require.ErrorContains(t, err, "Options.MaxBodyBytes")
}

// counter reads a counter with labels from reg; 0 when absent.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// failingStore is a Store whose Redis is down.
type failingStore struct{}

func (failingStore) Update(context.Context, string, string, delivery.Status) (delivery.Applied, error) {
	return delivery.Applied{}, errors.New("dial tcp 127.0.0.1:6379: connection refused")
}

func TestStoreFailureAsksForARetry(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	h, err := callbacks.New(callbacks.Options{Store: failingStore{}, TwilioAuthToken: authToken, TwilioURL: publicURL,
		WhatsAppAppSecret: appSecret, WhatsAppVerifyToken: verifyToken, Registerer: reg, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	p := statusParams("delivered", "")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, twilioRequest("/callbacks/twilio", p, twilioSign(authToken, publicURL, p)))
	require.Equal(t, http.StatusInternalServerError, rec.Code, "the provider posts again")
	body := webhookPost(wamid, "read", "")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, whatsappRequest(body, metaSign(appSecret, body)))
	require.Equal(t, http.StatusInternalServerError, rec.Code)
	require.NotContains(t, rec.Body.String(), "127.0.0.1", "internal errors are not echoed")
	require.Equal(t, 1.0, counter(t, reg, "sluice_callback_requests_total", map[string]string{"provider": "whatsapp", "result": "error"}))
}
