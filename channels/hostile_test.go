package channels

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/tasks"
)

// echo is a receiver that answers status with the whole request it got
// (request line, every header, body), plainly and JSON-escaped, as some
// debugging endpoints and hostile receivers do.
func echo(t *testing.T, status int) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dump, _ := httputil.DumpRequest(r, true)
		j, _ := json.Marshal(map[string]any{"url": r.URL.String(), "headers": r.Header})
		w.WriteHeader(status)
		fmt.Fprintf(w, "%s\n%s\n%s", dump, strings.ReplaceAll(string(j), "/", `\/`), r.URL.RawQuery)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestEchoedRequestStaysOutOfErrors: the archive reason (the *Error's text)
// carries the status and a bounded message, never the URL's query or path
// token, nor any header value Sluice sent (issue 7: `?sig=…` and header
// values reached archive reasons and WARN logs).
func TestEchoedRequestStaysOutOfErrors(t *testing.T) {
	const (
		sig      = "s1gnatureValue9f8e7d"
		pathTok  = "T0AAAAAAA1B0BBBBBBB2XXXXXXXXXXXXXXXXXXXX"
		apiKey   = "k3y-abcdef-0123456789"
		bearer   = "tok-zyxwvut-98765"
		custom   = "customHeaderValue42"
		slashTok = "a/b+c/d=="
	)
	ctx := context.Background()
	for _, status := range []int{400, 500, 503} {
		srv := echo(t, status)
		target := srv.URL + "/services/" + pathTok + "?sig=" + sig + "&v=" + slashTok
		_, err := (&HTTPCaller{Egress: loopback}).Call(ctx, tasks.HTTPCall{Method: "POST", URL: target, Body: "x",
			Headers: map[string]string{"X-Api-Key": apiKey, "Authorization": "Bearer " + bearer, "X-Custom": custom, "X-Slashed": slashTok}})
		requireNoEcho(t, err, status, sig, pathTok, apiKey, bearer, custom, slashTok, "a\\/b+c\\/d==")

		// Secrets only in the query, spelt so that neither the decoded nor
		// the re-escaped value matches the raw one, and a header value that
		// Go's json.Marshal escapes (review of issue 7).
		target = srv.URL + "/x?a=1&sig=Ab/Cd+Ef0123&q=Tok%7eVALUE1234"
		_, err = (&HTTPCaller{Egress: loopback}).Call(ctx, tasks.HTTPCall{Method: "GET", URL: target,
			Headers: map[string]string{"X-Html": "se<cr>et&tok9"}})
		requireNoEcho(t, err, status, "VALUE1234", "Ef0123", "cr>et", `cr\u003eet`, "tok9")

		wh := &Webhook{Egress: loopback, Secrets: func(string) ([]string, error) { return []string{testSecret}, nil }}
		_, err = wh.Deliver(ctx, tasks.WebhookDeliver{URL: target, EventType: "e", Payload: json.RawMessage(`{"a":1}`), IdempotencyKey: "msg_2fGh7k"})
		requireNoEcho(t, err, status, sig, pathTok, "v1,", strings.TrimPrefix(testSecret, "whsec_"))
	}
}

func requireNoEcho(t *testing.T, err error, status int, secrets ...string) {
	t.Helper()
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, status, e.HTTPStatus)
	require.LessOrEqual(t, len(e.Message), maxMessage+len("…"), "the message is bounded")
	for _, s := range secrets {
		require.NotContains(t, err.Error(), s, "HTTP %d: the error shows what the receiver echoed", status)
	}
}

// TestTwoXXIsADelivery: once a 2xx status line has arrived, the send is done,
// whatever happens to the body: cut off by a reset, or trickling past the
// client's timeout. Retrying would deliver twice (issue 7). A 5xx that does
// the same stays Transient.
func TestTwoXXIsADelivery(t *testing.T) {
	cut := func(status int, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "100000")
			w.WriteHeader(status)
			fmt.Fprint(w, body)
			w.(http.Flusher).Flush()
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close() // the body breaks off
			}
		}
	}
	trickle := func(status int, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			fmt.Fprint(w, body)
			w.(http.Flusher).Flush()
			<-r.Context().Done() // never finishes: the client's timeout ends it
		}
	}
	clients := map[string]func(srv *httptest.Server, hc *http.Client) error{
		"webhook": func(srv *httptest.Server, hc *http.Client) error {
			wh := &Webhook{Egress: loopback, HTTP: hc, Secrets: func(string) ([]string, error) { return []string{testSecret}, nil }}
			_, err := wh.Deliver(context.Background(), tasks.WebhookDeliver{URL: srv.URL, EventType: "e", Payload: json.RawMessage(`{}`), IdempotencyKey: "k"})
			return err
		},
		"http": func(srv *httptest.Server, hc *http.Client) error {
			_, err := (&HTTPCaller{Egress: loopback, HTTP: hc}).Call(context.Background(), tasks.HTTPCall{Method: "GET", URL: srv.URL})
			return err
		},
		"whatsapp": func(srv *httptest.Server, hc *http.Client) error {
			_, err := (&WhatsApp{BaseURL: srv.URL, Token: "t", HTTP: hc}).Send(context.Background(),
				tasks.WhatsAppSend{V: 1, PhoneNumberID: "1", To: "+12025550123", Text: "hi"})
			return err
		},
		"twilio": func(srv *httptest.Server, hc *http.Client) error {
			_, err := (&Twilio{BaseURL: srv.URL, AccountSID: testAccountSID, AuthToken: "t", HTTP: hc}).Send(context.Background(),
				tasks.SMSSend{V: 1, From: "+12025550100", To: "+12025550123", Body: "hi"})
			return err
		},
	}
	for name, send := range clients {
		for how, h := range map[string]func(int, string) http.HandlerFunc{"cut": cut, "trickle": trickle} {
			for _, tc := range []struct {
				status int
				body   string
				ok     bool
			}{{200, `{"messages":[{"id":"wamid.X"}],"sid":"SM1"`, true}, {201, "", true}, {500, `{"error"`, false}} {
				srv := httptest.NewServer(h(tc.status, tc.body))
				hc := NewHTTPClient()
				hc.Timeout = 100 * time.Millisecond // the trickle's end; no test sleeps
				err := send(srv, hc)
				srv.Close()
				if tc.ok {
					require.NoError(t, err, "%s, %s body after HTTP %d", name, how, tc.status)
					continue
				}
				var e *Error
				require.ErrorAs(t, err, &e, "%s, %s body after HTTP %d", name, how, tc.status)
				require.Equal(t, Transient, e.Class, "%s, %s body after HTTP %d: %v", name, how, tc.status, err)
			}
		}
	}
}

// TestEndpointNameStaysOutOfErrors: `sluice send` names a webhook's endpoint
// by its URL, so an endpoint may hold the URL's token; errors show only its
// scheme and host.
func TestEndpointNameStaysOutOfErrors(t *testing.T) {
	const endpoint = "https://hooks.example.com/services/T0AAAAAAA1B0BBBBBBB2XXXX?sig=s1gnatureValue9f8e7d"
	for _, secrets := range []func(string) ([]string, error){
		func(string) ([]string, error) { return nil, fmt.Errorf("vault unavailable") },
		func(string) ([]string, error) { return []string{"whsec_bad"}, nil },
		func(string) ([]string, error) { return []string{testSecret, "whsec_bad"}, nil },
		func(string) ([]string, error) { return nil, ErrUnknownEndpoint },
	} {
		wh := &Webhook{Egress: loopback, Secrets: secrets}
		_, err := wh.Deliver(context.Background(), tasks.WebhookDeliver{URL: "https://hooks.example.com/", EventType: "e",
			Payload: json.RawMessage(`{}`), Endpoint: endpoint, IdempotencyKey: "k"})
		require.Error(t, err)
		require.Contains(t, err.Error(), `endpoint "https://hooks.example.com"`)
		require.NotContains(t, err.Error(), "s1gnatureValue9f8e7d")
		require.NotContains(t, err.Error(), "T0AAAAAAA1B0")
	}
}

// TestDeliverHoldsEndpointsToTheirURLs: Deliver checks Webhook.Endpoints
// itself, before it asks for a secret, so a Secrets func that ignores the
// URL still never signs an endpoint's secret for another URL; the
// delivery is Permanent and nothing is sent.
func TestDeliverHoldsEndpointsToTheirURLs(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	asked := 0
	wh := &Webhook{Egress: loopback, HTTP: srv.Client(),
		Secrets:   func(string) ([]string, error) { asked++; return []string{testSecret}, nil },
		Endpoints: tasks.WebhookEndpoints{"billing": {srv.URL + "/billing/"}}}
	deliver := func(endpoint, path string) error {
		_, err := wh.Deliver(context.Background(), tasks.WebhookDeliver{URL: srv.URL + path, EventType: "e",
			Payload: json.RawMessage(`{}`), Endpoint: endpoint, IdempotencyKey: "k"})
		return err
	}
	for _, c := range []struct{ endpoint, path string }{{"billing", "/collect"}, {"billing", "/billing/%2e%2e/x"}, {"", "/billing/x"}} {
		err := deliver(c.endpoint, c.path)
		var ce *Error
		require.ErrorAs(t, err, &ce, "%+v", c)
		require.Equal(t, Permanent, ce.Class)
		require.ErrorIs(t, err, ErrEndpointURL)
	}
	require.ErrorIs(t, deliver("crm", "/billing/x"), ErrUnknownEndpoint)
	require.Zero(t, asked, "no secret asked for")
	require.Zero(t, hits.Load(), "nothing sent")
	require.NoError(t, deliver("billing", "/billing/x"))
	require.Equal(t, int32(1), hits.Load())
}
