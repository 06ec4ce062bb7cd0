package channels

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/tasks"
)

// hangingServer answers nothing until the test ends; arrived is signalled when
// a request is in the handler.
func hangingServer(t *testing.T) (srv *httptest.Server, arrived <-chan struct{}) {
	t.Helper()
	release := make(chan struct{})
	in := make(chan struct{}, 16)
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	return srv, in
}

// sendAll runs each client once against url with client c.
func sendAll(ctx context.Context, url string, c *http.Client) map[string]error {
	errs := map[string]error{}
	_, errs["whatsapp"] = (&WhatsApp{BaseURL: url, Token: "t", HTTP: c}).Send(ctx, tasks.WhatsAppSend{PhoneNumberID: "1", To: "+12025550123", Text: "x"})
	_, errs["twilio"] = (&Twilio{BaseURL: url, AccountSID: testAccountSID, AuthToken: "t", HTTP: c}).Send(ctx, tasks.SMSSend{From: "+12025550100", To: "+12025550123", Body: "x"})
	_, errs["webhook"] = (&Webhook{Egress: loopback, Secrets: func(string) ([]string, error) { return []string{testSecret}, nil }, HTTP: c}).Deliver(ctx, tasks.WebhookDeliver{URL: url, EventType: "e", Payload: []byte(`1`), IdempotencyKey: "msg_1"})
	_, errs["http"] = (&HTTPCaller{Egress: loopback, HTTP: c}).Call(ctx, tasks.HTTPCall{Method: "POST", URL: url, Body: "x"})
	return errs
}

func TestClientTimeoutIsTransient(t *testing.T) {
	srv, _ := hangingServer(t)
	c := srv.Client()
	c.Timeout = 50 * time.Millisecond
	for provider, err := range sendAll(context.Background(), srv.URL, c) {
		t.Run(provider, func(t *testing.T) {
			var e *Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, Transient, e.Class)
			require.Equal(t, provider, e.Provider)
			require.Zero(t, e.HTTPStatus)
			require.NotNil(t, e.Err)
			var ne net.Error
			require.ErrorAs(t, err, &ne)
			require.True(t, ne.Timeout())
		})
	}
}

func TestContextDeadlineIsTransient(t *testing.T) {
	srv, _ := hangingServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	for provider, err := range sendAll(ctx, srv.URL, srv.Client()) {
		t.Run(provider, func(t *testing.T) {
			var e *Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, Transient, e.Class)
			require.ErrorIs(t, err, context.DeadlineExceeded)
		})
	}
}

func TestCancelledContextIsNotAFailure(t *testing.T) {
	srv, arrived := hangingServer(t)
	t.Run("during the request", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-arrived:
			case <-time.After(10 * time.Second):
			}
			cancel()
		}()
		_, err := (&WhatsApp{BaseURL: srv.URL, Token: "t", HTTP: srv.Client()}).Send(ctx, tasks.WhatsAppSend{PhoneNumberID: "1", To: "+12025550123", Text: "x"})
		require.ErrorIs(t, err, context.Canceled)
		var e *Error
		require.False(t, errors.As(err, &e), "cancellation must not be an *Error: %v", err)
	})
	t.Run("before the request", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for provider, err := range sendAll(ctx, srv.URL, srv.Client()) {
			require.ErrorIs(t, err, context.Canceled, provider)
			var e *Error
			require.False(t, errors.As(err, &e), "%s: cancellation must not be an *Error: %v", provider, err)
		}
	})
	t.Run("with a cause", func(t *testing.T) {
		cause := errors.New("worker shutting down")
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(cause)
		_, err := (&HTTPCaller{Egress: loopback, HTTP: srv.Client()}).Call(ctx, tasks.HTTPCall{Method: "GET", URL: srv.URL})
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, cause)
	})
}

func TestConnectionRefusedIsTransient(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	for provider, err := range sendAll(context.Background(), url, nil) {
		var e *Error
		require.ErrorAs(t, err, &e, provider)
		require.Equal(t, Transient, e.Class, provider)
		require.NotNil(t, e.Err, provider)
	}
}

func TestBodyReadIsBounded(t *testing.T) {
	// 1 MiB of error text: only MaxBodyBytes are read, the message is short.
	big := strings.Repeat("x", 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(500)
		io.WriteString(w, big)
	}))
	defer srv.Close()
	r, err := do(context.Background(), srv.Client(), mustRequest(t, srv.URL), ProviderHTTP)
	require.NoError(t, err)
	require.Len(t, r.body, MaxBodyBytes)
	_, err = httpResult(ProviderHTTP, r, testNow)
	var e *Error
	require.ErrorAs(t, err, &e)
	require.LessOrEqual(t, len(e.Message), maxMessage+len("…"))
}

func mustRequest(t *testing.T, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	return req
}

func TestDefaultHTTPClient(t *testing.T) {
	c := NewHTTPClient()
	require.Equal(t, 15*time.Second, c.Timeout)
	require.ErrorIs(t, c.CheckRedirect(nil, nil), http.ErrUseLastResponse)
	require.Same(t, defaultHTTP(), httpClient(nil))
}

func TestHTTPCall(t *testing.T) {
	srv, got := capture(t, 200, `{"ok":true}`, nil)
	c := &HTTPCaller{Egress: loopback, HTTP: srv.Client()}
	ctx := context.Background()

	resp, err := c.Call(ctx, tasks.HTTPCall{Method: "patch", URL: srv.URL + "/v1/things/7?expand=1",
		Headers: map[string]string{"Content-Type": "application/json", "X-Api-Key": "k"}, Body: `{"a":1}`, IdempotencyKey: "call-1"})
	require.NoError(t, err)
	require.Equal(t, Response{Status: 200}, resp)
	r := got()[0]
	require.Equal(t, "PATCH", r.method)
	require.Equal(t, "/v1/things/7?expand=1", r.path)
	require.Equal(t, `{"a":1}`, string(r.body))
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	require.Equal(t, "k", r.header.Get("X-Api-Key"))
	require.Equal(t, "call-1", r.header.Get("Idempotency-Key"))

	// Headers win over p.IdempotencyKey, whatever their case.
	_, err = c.Call(ctx, tasks.HTTPCall{Method: "POST", URL: srv.URL, Headers: map[string]string{"idempotency-key": "mine"}, IdempotencyKey: "call-2"})
	require.NoError(t, err)
	require.Equal(t, []string{"mine"}, got()[1].header.Values("Idempotency-Key"))

	// No key, no header; GET without body.
	_, err = c.Call(ctx, tasks.HTTPCall{Method: "GET", URL: srv.URL})
	require.NoError(t, err)
	require.Empty(t, got()[2].header.Values("Idempotency-Key"))
	require.Empty(t, got()[2].body)
}
