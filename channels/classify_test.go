package channels

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/tasks"
)

// testNow is a fixed clock: Tuesday 2026-11-10 12:00:00 UTC (04:00 in Los Angeles, PST).
var testNow = time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC)

func waErrBody(code int, transient bool) string {
	tr := ""
	if transient {
		tr = `,"is_transient":true`
	}
	return fmt.Sprintf(`{"error":{"message":"(#%d) msg","type":"OAuthException","code":%d%s,"error_data":{"messaging_product":"whatsapp","details":"det"},"fbtrace_id":"Ab"}}`, code, code, tr)
}

func TestWhatsAppClassification(t *testing.T) {
	t.Parallel()
	const msg = "(#%d) msg (det)"
	tests := []struct {
		name   string
		status int
		header http.Header
		body   string
		want   *Error // Provider, HTTPStatus and Message are filled in below when zero
	}{
		{"4 app rate limit", 429, nil, waErrBody(4, false), &Error{Class: Throttled, Code: 4, Scope: ScopeAccount, Growth: 2}},
		{"80007 WABA rate limit", 400, nil, waErrBody(80007, false), &Error{Class: Throttled, Code: 80007, Scope: ScopeAccount, Growth: 2}},
		{"130429 throughput", 400, nil, waErrBody(130429, false), &Error{Class: Throttled, Code: 130429, Scope: ScopeSender, Growth: 2, MaxWait: 30 * time.Second}},
		{"130429 Retry-After wins", 400, http.Header{"Retry-After": {"3"}}, waErrBody(130429, false), &Error{Class: Throttled, Code: 130429, Scope: ScopeSender, RetryAfter: 3 * time.Second}},
		{"131056 pair", 400, nil, waErrBody(131056, false), &Error{Class: Throttled, Code: 131056, Scope: ScopePair, Growth: 4}},
		{"131057 upgrade", 400, nil, waErrBody(131057, false), &Error{Class: Throttled, Code: 131057, Scope: ScopeSender, RetryAfter: time.Minute}},
		{"131048 spam default 1h", 400, nil, waErrBody(131048, false), &Error{Class: Throttled, Code: 131048, Scope: ScopeSender, RetryAfter: time.Hour}},
		{"131049 marketing default 24h", 400, nil, waErrBody(131049, false), &Error{Class: Throttled, Code: 131049, Scope: ScopePair, RetryAfter: 24 * time.Hour}},
		{"131048 provider delay wins", 400, http.Header{"X-Business-Use-Case-Usage": {`{"1":[{"type":"whatsapp","estimated_time_to_regain_access":7}]}`}},
			waErrBody(131048, false), &Error{Class: Throttled, Code: 131048, Scope: ScopeSender, RetryAfter: 7 * time.Minute}},
		{"1 unknown", 500, nil, waErrBody(1, false), &Error{Class: Transient, Code: 1}},
		{"2 unavailable", 503, nil, waErrBody(2, false), &Error{Class: Transient, Code: 2}},
		{"131000 went wrong", 500, nil, waErrBody(131000, true), &Error{Class: Transient, Code: 131000}},
		{"131000 on 400 still transient", 400, nil, waErrBody(131000, false), &Error{Class: Transient, Code: 131000}},
		{"368 policy", 403, nil, waErrBody(368, false), &Error{Class: Permanent, Code: 368}},
		{"131026 undeliverable", 400, nil, waErrBody(131026, false), &Error{Class: Permanent, Code: 131026}},
		{"131047 window", 400, nil, waErrBody(131047, false), &Error{Class: Permanent, Code: 131047}},
		{"other code 4xx", 400, nil, waErrBody(100, false), &Error{Class: Permanent, Code: 100}},
		{"other code is_transient", 400, nil, waErrBody(100, true), &Error{Class: Transient, Code: 100}},
		{"other code 5xx", 502, nil, waErrBody(100, false), &Error{Class: Transient, Code: 100}},
		// Every 429 counts: without a code the tables know it pauses the
		// number (the phone number ID), for its Retry-After or the backoff.
		{"other code 429", 429, nil, waErrBody(613, false), &Error{Class: Throttled, Code: 613, Scope: ScopeSender, Growth: 2, MaxWait: 30 * time.Second}},
		{"other code 429, Retry-After", 429, http.Header{"Retry-After": {"5"}}, waErrBody(613, false), &Error{Class: Throttled, Code: 613, Scope: ScopeSender, RetryAfter: 5 * time.Second}},
		{"other code is_transient 429: every 429 counts", 429, nil, waErrBody(613, true), &Error{Class: Throttled, Code: 613, Scope: ScopeSender, Growth: 2, MaxWait: 30 * time.Second}},
		{"throttle code beats is_transient", 400, nil, waErrBody(130429, true), &Error{Class: Throttled, Code: 130429, Scope: ScopeSender, Growth: 2, MaxWait: 30 * time.Second}},
		{"5xx no body", 503, nil, "", &Error{Class: Transient, Message: "Service Unavailable"}},
		{"5xx html", 502, nil, "<html>bad gateway</html>", &Error{Class: Transient, Message: "<html>bad gateway</html>"}},
		{"429 no body, Retry-After", 429, http.Header{"Retry-After": {"5"}}, "", &Error{Class: Throttled, Scope: ScopeSender, RetryAfter: 5 * time.Second, Message: "Too Many Requests"}},
		{"429 no body", 429, nil, "", &Error{Class: Throttled, Scope: ScopeSender, Growth: 2, MaxWait: 30 * time.Second, Message: "Too Many Requests"}},
		{"429 JSON without error", 429, http.Header{"Retry-After": {"5"}}, `{"detail":"slow down"}`, &Error{Class: Throttled, Scope: ScopeSender, RetryAfter: 5 * time.Second, Message: `{"detail":"slow down"}`}},
		{"4xx no JSON", 404, nil, "not found", &Error{Class: Permanent, Message: "not found"}},
		{"BUC header on throttle", 400, http.Header{"X-Business-Use-Case-Usage": {`{"102290129340398":[{"type":"whatsapp_business_management","call_count":100,"estimated_time_to_regain_access":0},{"type":"whatsapp","call_count":100,"estimated_time_to_regain_access":15}]}`}},
			waErrBody(80007, false), &Error{Class: Throttled, Code: 80007, Scope: ScopeAccount, RetryAfter: 15 * time.Minute}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := *tt.want
			want.Provider = ProviderWhatsApp
			want.HTTPStatus = tt.status
			if want.Message == "" {
				want.Message = fmt.Sprintf(msg, want.Code)
			}
			h := tt.header
			if h == nil {
				h = http.Header{}
			}
			resp, err := whatsappResult(&reply{status: tt.status, header: h, body: []byte(tt.body)}, testNow)
			require.Equal(t, Response{Status: tt.status}, resp)
			var got *Error
			require.ErrorAs(t, err, &got)
			if diff := cmp.Diff(&want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestTwilioClassification(t *testing.T) {
	t.Parallel()
	body := func(code, status int) string {
		return fmt.Sprintf(`{"code":%d,"message":"m%d","more_info":"https://www.twilio.com/docs/errors/%d","status":%d}`, code, code, code, status)
	}
	// testNow is 04:00 PST, so the next Los Angeles midnight is 20 h away.
	tests := []struct {
		name   string
		status int
		header http.Header
		body   string
		want   *Error
	}{
		// 20429 is the account's API concurrency: the account, for the
		// provider's wait, else a backoff that grows to at most 30 s.
		{"20429", 429, nil, body(20429, 429), &Error{Class: Throttled, Code: 20429, Scope: ScopeAccount, Growth: 2, MaxWait: 30 * time.Second}},
		{"20429 Retry-After wins", 429, http.Header{"Retry-After": {"3"}}, body(20429, 429), &Error{Class: Throttled, Code: 20429, Scope: ScopeAccount, RetryAfter: 3 * time.Second}},
		// Any other 429 pauses the sender.
		{"HTTP 429 unknown code", 429, nil, body(29999, 429), &Error{Class: Throttled, Code: 29999, Scope: ScopeSender, Growth: 2, MaxWait: 30 * time.Second}},
		{"HTTP 429 no body, Retry-After", 429, http.Header{"Retry-After": {"2"}}, "", &Error{Class: Throttled, Scope: ScopeSender, RetryAfter: 2 * time.Second, Message: "Too Many Requests"}},
		{"HTTP 429 no body", 429, nil, "", &Error{Class: Throttled, Scope: ScopeSender, Growth: 2, MaxWait: 30 * time.Second, Message: "Too Many Requests"}},
		{"30022", 400, nil, body(30022, 400), &Error{Class: Throttled, Code: 30022, Scope: ScopeSender, Growth: 2, MaxWait: 30 * time.Second}},
		{"21611", 400, nil, body(21611, 400), &Error{Class: Throttled, Code: 21611, Scope: ScopeSender, RetryAfter: time.Minute, Growth: 2}},
		{"30001", 400, nil, body(30001, 400), &Error{Class: Throttled, Code: 30001, Scope: ScopeSender, RetryAfter: time.Minute, Growth: 2}},
		{"63017", 400, nil, body(63017, 400), &Error{Class: Throttled, Code: 63017, Scope: ScopeAccount, Growth: 2, MaxWait: 30 * time.Second}},
		{"30023 until LA midnight", 400, nil, body(30023, 400), &Error{Class: Throttled, Code: 30023, Scope: ScopeSender, RetryAfter: 20 * time.Hour}},
		{"30023 Retry-After wins", 400, http.Header{"Retry-After": {"60"}}, body(30023, 400), &Error{Class: Throttled, Code: 30023, Scope: ScopeSender, RetryAfter: time.Minute}},
		{"63038 24h", 400, nil, body(63038, 400), &Error{Class: Throttled, Code: 63038, Scope: ScopeAccount, RetryAfter: 24 * time.Hour}},
		{"14107 pair 30s", 400, nil, body(14107, 400), &Error{Class: Throttled, Code: 14107, Scope: ScopePair, RetryAfter: 30 * time.Second}},
		{"21211", 400, nil, body(21211, 400), &Error{Class: Permanent, Code: 21211}},
		{"21610", 400, nil, body(21610, 400), &Error{Class: Permanent, Code: 21610}},
		{"63016", 400, nil, body(63016, 400), &Error{Class: Permanent, Code: 63016}},
		{"other 4xx", 400, nil, body(21408, 400), &Error{Class: Permanent, Code: 21408}},
		{"20003 bad credentials", 401, nil, body(20003, 401), &Error{Class: Unauthorized, Code: 20003, Scope: ScopeChannel}},
		{"HTTP 403 with a code", 403, nil, body(20403, 403), &Error{Class: Permanent, Code: 20403}},
		{"HTTP 401 unknown code", 401, nil, body(20099, 401), &Error{Class: Unauthorized, Code: 20099, Scope: ScopeChannel}},
		{"5xx", 500, nil, body(20500, 500), &Error{Class: Transient, Code: 20500}},
		{"5xx no body", 503, nil, "", &Error{Class: Transient, Message: "Service Unavailable"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := *tt.want
			want.Provider = ProviderTwilio
			want.HTTPStatus = tt.status
			if want.Message == "" {
				want.Message = fmt.Sprintf("m%d", want.Code)
			}
			h := tt.header
			if h == nil {
				h = http.Header{}
			}
			resp, err := twilioResult(&reply{status: tt.status, header: h, body: []byte(tt.body)}, testNow)
			require.Equal(t, Response{Status: tt.status}, resp)
			var got *Error
			require.ErrorAs(t, err, &got)
			if diff := cmp.Diff(&want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestUntilPacificMidnight(t *testing.T) {
	t.Parallel()
	la := pacific()
	if la.String() != "America/Los_Angeles" {
		t.Skip("no zone database; using the UTC-8 fallback")
	}
	tests := []struct {
		now  time.Time
		want time.Duration
	}{
		{time.Date(2026, 11, 10, 4, 0, 0, 0, la), 20 * time.Hour},
		{time.Date(2026, 11, 10, 23, 59, 59, 500e6, la), time.Second}, // rounded up
		{time.Date(2026, 11, 10, 0, 0, 0, 0, la), 24 * time.Hour},
		{time.Date(2026, 3, 8, 0, 0, 0, 0, la), 23 * time.Hour},  // spring forward day
		{time.Date(2026, 11, 1, 0, 0, 0, 0, la), 25 * time.Hour}, // fall back day
	}
	for _, tt := range tests {
		if got := untilPacificMidnight(tt.now); got != tt.want {
			t.Errorf("untilPacificMidnight(%v) = %v, want %v", tt.now, got, tt.want)
		}
	}
}

func TestHTTPClassification(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status  int
		header  http.Header
		body    string
		webhook Class // class for webhooks
		http    Class // class for HTTP calls
	}{
		{200, nil, "", Success, Success},
		{204, nil, "", Success, Success},
		{304, nil, "", Permanent, Success},
		{301, http.Header{"Location": {"https://u:p@example.com/new?token=s3cret"}}, "", Permanent, Permanent},
		{408, nil, "", Transient, Transient},
		{410, nil, "gone", Permanent, Permanent},
		{400, nil, "bad", Permanent, Permanent},
		{404, nil, "", Permanent, Permanent},
		{429, http.Header{"Retry-After": {"120"}}, "", Throttled, Throttled},
		{500, nil, "", Transient, Transient},
		{501, nil, "", Transient, Transient},
		{502, nil, "", Throttled, Transient},
		{503, http.Header{"Retry-After": {"Tue, 10 Nov 2026 12:00:30 GMT"}}, "", Throttled, Throttled},
		{504, nil, "", Throttled, Transient},
	}
	for _, tt := range tests {
		for _, provider := range []string{ProviderWebhook, ProviderHTTP} {
			want := tt.webhook
			if provider == ProviderHTTP {
				want = tt.http
			}
			t.Run(fmt.Sprintf("%s %d", provider, tt.status), func(t *testing.T) {
				h := tt.header
				if h == nil {
					h = http.Header{}
				}
				resp, err := httpResult(provider, &reply{status: tt.status, header: h, body: []byte(tt.body)}, testNow)
				require.Equal(t, Response{Status: tt.status}, resp)
				if want == Success {
					require.NoError(t, err)
					return
				}
				var e *Error
				require.ErrorAs(t, err, &e)
				require.Equal(t, want, e.Class)
				require.Equal(t, provider, e.Provider)
				require.Equal(t, tt.status, e.HTTPStatus)
				require.Equal(t, ParseRetryAfter(h, testNow), e.RetryAfter)
				if e.Class == Throttled {
					require.Equal(t, ScopeSender, e.Scope)
				}
				switch {
				case tt.status == 410:
					require.Equal(t, "endpoint is gone (410 Gone): disable it: gone", e.Message)
				case tt.status == 301:
					require.Equal(t, "redirects are not followed (Location: https://example.com)", e.Message)
				}
			})
		}
	}
}

func TestClassString(t *testing.T) {
	t.Parallel()
	for c, want := range map[Class]string{Success: "success", Throttled: "throttled", Transient: "transient", Permanent: "permanent", 9: "Class(9)"} {
		require.Equal(t, want, c.String())
	}
}

func TestErrorString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		e    *Error
		want string
	}{
		{&Error{Class: Throttled, Provider: "whatsapp", HTTPStatus: 400, Code: 131056, Scope: ScopePair, Message: "(#131056) pair rate limit hit"},
			"whatsapp: throttled: code 131056 (pair rate limit): (#131056) pair rate limit hit"},
		{&Error{Class: Permanent, Provider: "twilio", HTTPStatus: 400, Code: 12345, Message: "m"}, "twilio: permanent: code 12345: m"},
		{&Error{Class: Throttled, Provider: "webhook", HTTPStatus: 429, Message: "slow down"}, "webhook: throttled: HTTP 429: slow down"},
		{&Error{Class: Transient, Provider: "http", Err: context.DeadlineExceeded}, "http: transient: context deadline exceeded"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, tt.e.Error())
	}
}

// TestInvalidPayloads: requests that cannot be built are Permanent, without a
// round trip.
func TestInvalidPayloads(t *testing.T) {
	t.Parallel()
	srv, got := capture(t, 200, whatsappOK, nil)
	ctx := context.Background()
	secret := func(string) ([]string, error) { return []string{testSecret}, nil }
	wa := &WhatsApp{BaseURL: srv.URL, Token: "EAAtok", HTTP: srv.Client()}
	tw := &Twilio{BaseURL: srv.URL, AccountSID: testAccountSID, AuthToken: "tok", HTTP: srv.Client()}
	wh := &Webhook{Egress: loopback, Secrets: secret, HTTP: srv.Client()}
	hc := &HTTPCaller{Egress: loopback, HTTP: srv.Client()}
	text := func(f func(*tasks.WhatsAppSend)) tasks.WhatsAppSend {
		p := tasks.WhatsAppSend{V: 1, PhoneNumberID: "1065", To: "+12025550123", Text: "hi"}
		f(&p)
		return p
	}
	hook := func(f func(*tasks.WebhookDeliver)) tasks.WebhookDeliver {
		p := tasks.WebhookDeliver{V: 1, URL: srv.URL, EventType: "e", Payload: []byte(`{}`), IdempotencyKey: "msg_1"}
		f(&p)
		return p
	}
	okSMS := tasks.SMSSend{From: "+12025550100", To: "+12025550123", Body: "b"}
	send := func(c *WhatsApp, p tasks.WhatsAppSend) error { _, err := c.Send(ctx, p); return err }
	sms := func(c *Twilio, p tasks.SMSSend) error { _, err := c.Send(ctx, p); return err }
	deliver := func(c *Webhook, p tasks.WebhookDeliver) error { _, err := c.Deliver(ctx, p); return err }
	call := func(p tasks.HTTPCall) error { _, err := hc.Call(ctx, p); return err }

	errs := map[string]error{
		"wa text and template": send(wa, text(func(p *tasks.WhatsAppSend) { p.Template = &tasks.Template{Name: "n", Language: "en"} })),
		"wa neither":           send(wa, text(func(p *tasks.WhatsAppSend) { p.Text = "" })),
		"wa to without plus":   send(wa, text(func(p *tasks.WhatsAppSend) { p.To = "12025550123" })),
		"wa phone id path":     send(wa, text(func(p *tasks.WhatsAppSend) { p.PhoneNumberID = "1/../x" })),
		"wa template no name":  send(wa, text(func(p *tasks.WhatsAppSend) { p.Text = ""; p.Template = &tasks.Template{Language: "en"} })),
		"wa key with newline":  send(wa, text(func(p *tasks.WhatsAppSend) { p.IdempotencyKey = "a\nb" })),
		"wa location header without its location": send(wa, text(func(p *tasks.WhatsAppSend) {
			p.Text = ""
			p.Template = &tasks.Template{Name: "n", Language: "en", Header: &tasks.TemplateHeader{Type: "location"}}
		})),
		"wa text and media":   send(wa, text(func(p *tasks.WhatsAppSend) { p.Media = &tasks.Media{Type: "image", ID: "1"} })),
		"wa media type gif":   send(wa, text(func(p *tasks.WhatsAppSend) { p.Text = ""; p.Media = &tasks.Media{Type: "gif", ID: "1"} })),
		"wa no token":         send(&WhatsApp{BaseURL: srv.URL}, text(func(*tasks.WhatsAppSend) {})),
		"wa bad version":      send(&WhatsApp{BaseURL: srv.URL, Token: "t", Version: "23.0"}, text(func(*tasks.WhatsAppSend) {})),
		"wa base URL query":   send(&WhatsApp{BaseURL: srv.URL + "?a=b", Token: "t"}, text(func(*tasks.WhatsAppSend) {})),
		"tw no sender":        sms(tw, tasks.SMSSend{To: "+1", Body: "b"}),
		"tw no to":            sms(tw, tasks.SMSSend{From: "+1", Body: "b"}),
		"tw no body":          sms(tw, tasks.SMSSend{From: "+1", To: "+1"}),
		"tw bad service":      sms(tw, tasks.SMSSend{MessagingServiceSID: "MG1", To: "+1", Body: "b"}),
		"tw bad account":      sms(&Twilio{BaseURL: srv.URL, AccountSID: "AC1", AuthToken: "t"}, okSMS),
		"tw no auth token":    sms(&Twilio{BaseURL: srv.URL, AccountSID: testAccountSID}, okSMS),
		"wh no id":            deliver(wh, hook(func(p *tasks.WebhookDeliver) { p.IdempotencyKey = "" })),
		"wh id with space":    deliver(wh, hook(func(p *tasks.WebhookDeliver) { p.IdempotencyKey = "a b" })),
		"wh no event type":    deliver(wh, hook(func(p *tasks.WebhookDeliver) { p.EventType = "" })),
		"wh bad url":          deliver(wh, hook(func(p *tasks.WebhookDeliver) { p.URL = "ftp://x/" })),
		"wh payload not JSON": deliver(wh, hook(func(p *tasks.WebhookDeliver) { p.Payload = []byte(`{`) })),
		"wh no Secret func":   deliver(&Webhook{Egress: loopback, HTTP: srv.Client()}, hook(func(*tasks.WebhookDeliver) {})),
		"wh short secret": deliver(&Webhook{Egress: loopback, Secrets: func(string) ([]string, error) { return []string{"whsec_c2hvcnQ="}, nil }},
			hook(func(*tasks.WebhookDeliver) {})),
		"http method":       call(tasks.HTTPCall{Method: "TRACE", URL: srv.URL}),
		"http relative url": call(tasks.HTTPCall{Method: "GET", URL: "/relative"}),
		"http header value": call(tasks.HTTPCall{Method: "GET", URL: srv.URL, Headers: map[string]string{"X-A": "1\r\nX-B: 2"}}),
		"http header name":  call(tasks.HTTPCall{Method: "GET", URL: srv.URL, Headers: map[string]string{"X A": "1"}}),
		"http key with ctl": call(tasks.HTTPCall{Method: "GET", URL: srv.URL, IdempotencyKey: "a\x00"}),
	}
	for name, err := range errs {
		t.Run(name, func(t *testing.T) {
			var e *Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, Permanent, e.Class, "%v", err)
			require.Zero(t, e.HTTPStatus)
		})
	}
	require.Empty(t, got(), "no request may be sent for invalid payloads")
}

// TestSecretsNotInErrors: tokens echoed by a provider and credentials in URLs
// do not reach error text.
func TestSecretsNotInErrors(t *testing.T) {
	t.Parallel()
	const token, auth = "EAAsupersecrettoken", "twiliosecretauthtoken"
	srv, _ := capture(t, 401, `{"error":{"message":"Invalid OAuth access token - Cannot parse access token EAAsupersecrettoken twiliosecretauthtoken","type":"OAuthException","code":190}}`, nil)
	ctx := context.Background()

	_, err := (&WhatsApp{BaseURL: srv.URL, Token: token, HTTP: srv.Client()}).Send(ctx, tasks.WhatsAppSend{PhoneNumberID: "1", To: "+12025550123", Text: "x"})
	require.Error(t, err)
	require.NotContains(t, err.Error(), token)

	_, err = (&Twilio{BaseURL: srv.URL, AccountSID: testAccountSID, AuthToken: auth, HTTP: srv.Client()}).Send(ctx, tasks.SMSSend{From: "+12025550100", To: "+12025550123", Body: "b"})
	require.Error(t, err)
	require.NotContains(t, err.Error(), auth)

	_, err = (&HTTPCaller{Egress: loopback, HTTP: srv.Client()}).Call(ctx, tasks.HTTPCall{Method: "GET", URL: srv.URL, Headers: map[string]string{"Authorization": "Bearer " + token}})
	require.Error(t, err)
	require.NotContains(t, err.Error(), token)

	// Network error: the URL's query and user info are dropped.
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	_, err = (&HTTPCaller{Egress: loopback}).Call(ctx, tasks.HTTPCall{Method: "GET", URL: strings.Replace(deadURL, "http://", "http://user:pw@", 1) + "/x?api_key=" + token})
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, Transient, e.Class)
	require.NotContains(t, err.Error(), token)
	require.NotContains(t, err.Error(), "pw")
	require.NotContains(t, err.Error(), "/x") // paths may hold tokens: only scheme and host are shown
}
