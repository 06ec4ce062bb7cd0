package channels

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/tasks"
)

// Standard Webhooks test vector (standard-webhooks libraries' tests).
const (
	testSecret  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID    = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTS    = 1614265330
	vectorBody  = `{"test": 2432232314}`
	vectorSig   = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	otherSecret = "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" // 30 zero bytes
)

func TestSignVector(t *testing.T) {
	t.Parallel()
	got, err := Sign(testSecret, vectorID, time.Unix(vectorTS, 0), []byte(vectorBody))
	require.NoError(t, err)
	require.Equal(t, vectorSig, got)
}

func vectorHeader(sig string) http.Header {
	h := http.Header{}
	h.Set("webhook-id", vectorID)
	h.Set("webhook-timestamp", strconv.Itoa(vectorTS))
	h.Set("webhook-signature", sig)
	return h
}

func TestVerify(t *testing.T) {
	t.Parallel()
	at := time.Unix(vectorTS, 0)
	wrong, err := Sign(otherSecret, vectorID, at, []byte(vectorBody))
	require.NoError(t, err)
	tests := []struct {
		name      string
		secret    string
		header    http.Header
		body      string
		tolerance time.Duration
		now       time.Time
		wantErr   bool
	}{
		{"vector", testSecret, vectorHeader(vectorSig), vectorBody, 0, at, false},
		{"within tolerance late", testSecret, vectorHeader(vectorSig), vectorBody, time.Minute, at.Add(time.Minute), false},
		{"within tolerance early", testSecret, vectorHeader(vectorSig), vectorBody, time.Minute, at.Add(-time.Minute), false},
		{"too old", testSecret, vectorHeader(vectorSig), vectorBody, time.Minute, at.Add(61 * time.Second), true},
		{"too new", testSecret, vectorHeader(vectorSig), vectorBody, time.Minute, at.Add(-61 * time.Second), true},
		{"default tolerance 5m", testSecret, vectorHeader(vectorSig), vectorBody, 0, at.Add(6 * time.Minute), true},
		{"tampered body", testSecret, vectorHeader(vectorSig), `{"test": 2432232315}`, 0, at, true},
		{"wrong secret", otherSecret, vectorHeader(vectorSig), vectorBody, 0, at, true},
		{"several, one matches", testSecret, vectorHeader(wrong + " v1a,abc " + vectorSig), vectorBody, 0, at, false},
		{"several, none match", testSecret, vectorHeader(wrong + " v2," + strings.TrimPrefix(vectorSig, "v1,")), vectorBody, 0, at, true},
		{"garbage signature", testSecret, vectorHeader("v1,!!!"), vectorBody, 0, at, true},
		{"missing signature", testSecret, http.Header{"Webhook-Id": {vectorID}, "Webhook-Timestamp": {"1614265330"}}, vectorBody, 0, at, true},
		{"bad timestamp", testSecret, func() http.Header { h := vectorHeader(vectorSig); h.Set("webhook-timestamp", "soon"); return h }(), vectorBody, 0, at, true},
		{"minimum timestamp", testSecret, func() http.Header {
			h := vectorHeader(vectorSig)
			h.Set("webhook-timestamp", "-9223372036854775808")
			return h
		}(), vectorBody, 0, at, true},
		{"other id", testSecret, func() http.Header { h := vectorHeader(vectorSig); h.Set("webhook-id", "msg_other"); return h }(), vectorBody, 0, at, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Verify(tt.secret, tt.header, []byte(tt.body), tt.tolerance, tt.now)
			if !tt.wantErr {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrVerification)
		})
	}
}

func TestSecretFormat(t *testing.T) {
	t.Parallel()
	b64 := func(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }
	for name, secret := range map[string]string{
		"no prefix":  "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		"bad base64": "whsec_not*base64",
		"23 bytes":   "whsec_" + b64(23),
		"65 bytes":   "whsec_" + b64(65),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Sign(secret, "id", time.Unix(0, 0), nil)
			require.Error(t, err)
			require.NotContains(t, err.Error(), strings.TrimPrefix(secret, "whsec_"))
			err = Verify(secret, vectorHeader(vectorSig), []byte(vectorBody), 0, time.Unix(vectorTS, 0))
			require.Error(t, err)
			require.False(t, errors.Is(err, ErrVerification))
		})
	}
	for _, n := range []int{24, 64} { // bounds are inclusive
		_, err := Sign("whsec_"+b64(n), "id", time.Unix(0, 0), nil)
		require.NoError(t, err, "%d bytes", n)
	}
}

func TestDeliver(t *testing.T) {
	t.Parallel()
	srv, got := capture(t, http.StatusNoContent, "", nil)
	at := time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC)
	var asked string
	w := &Webhook{Egress: loopback,
		Secrets: func(endpoint string) ([]string, error) { asked = endpoint; return []string{testSecret}, nil },
		HTTP:    srv.Client(),
		Now:     func() time.Time { return at },
	}
	p := tasks.WebhookDeliver{V: 1, URL: srv.URL + "/hooks?x=1", EventType: "order.updated",
		Payload: json.RawMessage(`{"order": 42, "state": "shipped"}`), Endpoint: "acme", IdempotencyKey: "msg_2Kx"}
	resp, err := w.Deliver(context.Background(), p)
	require.NoError(t, err)
	require.Equal(t, Response{Status: 204}, resp)
	require.Equal(t, "acme", asked)

	reqs := got()
	require.Len(t, reqs, 1)
	r := reqs[0]
	require.Equal(t, "POST", r.method)
	require.Equal(t, "/hooks?x=1", r.path)
	require.Equal(t, `{"type":"order.updated","timestamp":"2026-11-10T12:00:00Z","data":{"order":42,"state":"shipped"}}`, string(r.body))
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	require.Equal(t, DefaultUserAgent, r.header.Get("User-Agent"))
	require.Equal(t, "msg_2Kx", r.header.Get("webhook-id"))
	require.Equal(t, strconv.FormatInt(at.Unix(), 10), r.header.Get("webhook-timestamp"))
	require.NoError(t, Verify(testSecret, r.header, r.body, time.Minute, at))
	require.Error(t, Verify(otherSecret, r.header, r.body, time.Minute, at))

	// A retry keeps webhook-id and re-signs with the new timestamp.
	at = at.Add(90 * time.Second)
	w.UserAgent = "acme-hooks/2.0"
	_, err = w.Deliver(context.Background(), p)
	require.NoError(t, err)
	r2 := got()[1]
	require.Equal(t, "msg_2Kx", r2.header.Get("webhook-id"))
	require.Equal(t, strconv.FormatInt(at.Unix(), 10), r2.header.Get("webhook-timestamp"))
	require.Equal(t, "acme-hooks/2.0", r2.header.Get("User-Agent"))
	require.NoError(t, Verify(testSecret, r2.header, r2.body, time.Minute, at))
}

// TestDeliverRetryKeepsEventTimestamp: the body's timestamp is the event's
// time, stamped when the task is made, and every attempt of one webhook-id
// sends the same body; only webhook-timestamp (the attempt's time) and the
// signature change (Standard Webhooks).
func TestDeliverRetryKeepsEventTimestamp(t *testing.T) {
	t.Parallel()
	srv, got := capture(t, http.StatusServiceUnavailable, "", nil)
	before := time.Now().UTC().Truncate(time.Second)
	task, err := tasks.NewWebhookDeliverTask(tasks.WebhookDeliver{URL: srv.URL + "/hooks", EventType: "order.updated",
		Payload: json.RawMessage(`{"order":42}`), IdempotencyKey: "msg_3Fy"})
	require.NoError(t, err)
	p, err := tasks.DecodeWebhookDeliver(task.Payload()) // as the worker reads it
	require.NoError(t, err)
	require.False(t, p.Timestamp.Before(before), "stamped at enqueue: %v, before %v", p.Timestamp, before)
	require.False(t, p.Timestamp.After(time.Now()), "stamped at enqueue: %v", p.Timestamp)

	at := p.Timestamp.Add(10 * time.Minute) // the first attempt waited for its slot
	w := &Webhook{Egress: loopback, HTTP: srv.Client(), Now: func() time.Time { return at },
		Secrets: func(string) ([]string, error) { return []string{testSecret}, nil }}
	_, err = w.Deliver(context.Background(), p)
	require.Error(t, err) // 503: the worker retries
	at = at.Add(90 * time.Second)
	_, err = w.Deliver(context.Background(), p)
	require.Error(t, err)

	reqs := got()
	require.Len(t, reqs, 2)
	want := `{"type":"order.updated","timestamp":"` + p.Timestamp.Format(time.RFC3339) + `","data":{"order":42}}`
	require.Equal(t, want, string(reqs[0].body))
	require.Equal(t, want, string(reqs[1].body), "a retry sends the event's timestamp again")
	require.Equal(t, strconv.FormatInt(at.Add(-90*time.Second).Unix(), 10), reqs[0].header.Get("webhook-timestamp"))
	require.Equal(t, strconv.FormatInt(at.Unix(), 10), reqs[1].header.Get("webhook-timestamp"))
	require.NoError(t, Verify(testSecret, reqs[1].header, reqs[1].body, time.Minute, at))
}

func TestDeliverNoRedirect(t *testing.T) {
	t.Parallel()
	target, gotTarget := capture(t, 200, "", nil)
	srv, _ := capture(t, http.StatusTemporaryRedirect, "", http.Header{"Location": {target.URL}})
	// The default client (nil HTTP) must not follow the redirect.
	w := &Webhook{Egress: loopback, Secrets: func(string) ([]string, error) { return []string{testSecret}, nil }}
	_, err := w.Deliver(context.Background(), tasks.WebhookDeliver{URL: srv.URL, EventType: "e", Payload: json.RawMessage(`1`), IdempotencyKey: "msg_1"})
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, Permanent, e.Class)
	require.Equal(t, 307, e.HTTPStatus)
	require.Empty(t, gotTarget())
}

func TestDeliverSecretLookupFails(t *testing.T) {
	t.Parallel()
	boom := errors.New("vault sealed")
	w := &Webhook{Egress: loopback, Secrets: func(string) ([]string, error) { return nil, boom }}
	_, err := w.Deliver(context.Background(), tasks.WebhookDeliver{URL: "https://example.invalid/", EventType: "e", IdempotencyKey: "msg_1"})
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, Transient, e.Class)
	require.ErrorIs(t, err, boom)
}

func FuzzVerify(f *testing.F) {
	f.Add(vectorID, "1614265330", vectorSig, []byte(vectorBody))
	f.Add("", "", "", []byte(nil))
	f.Add("id", "-1", "v1,AAAA v1 ,", []byte("x"))
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := http.Header{"Webhook-Id": {id}, "Webhook-Timestamp": {ts}, "Webhook-Signature": {sig}}
		err := Verify(testSecret, h, body, time.Minute, time.Unix(vectorTS, 0))
		if err == nil {
			key, _ := decodeSecret(testSecret)
			if !strings.Contains(sig, sign(key, id, ts, body)) {
				t.Fatalf("accepted a signature that is not the HMAC: %q", sig)
			}
		}
	})
}
