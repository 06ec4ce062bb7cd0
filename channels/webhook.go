package channels

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/tasks"
)

// Standard Webhooks 1.0 (standardwebhooks.com, spec/standard-webhooks.md).
const (
	// SecretPrefix starts every signing secret: "whsec_" + base64 of 24–64 random bytes.
	SecretPrefix = "whsec_"
	// DefaultTolerance is how far webhook-timestamp may be from now in Verify
	// when tolerance <= 0 (the reference libraries' 5 minutes).
	DefaultTolerance = 5 * time.Minute

	minSecretBytes = 24
	maxSecretBytes = 64
)

// ErrUnknownEndpoint is wrapped by a Webhook.Secrets or Endpoints.Check
// error for an endpoint that has no secrets, and ErrEndpointURL by an
// Endpoints.Check error for a URL the endpoint's secrets may not sign for
// (tasks.WebhookEndpoints.Check): Deliver classes both Permanent (a
// configuration or caller error that a retry does not mend; the task is
// archived, and can be run again once mended). They are the tasks
// package's, so the producer refuses the same at enqueue.
var (
	ErrUnknownEndpoint = tasks.ErrUnknownEndpoint
	ErrEndpointURL     = tasks.ErrEndpointURL
)

// maxSignatures bounds the secrets one delivery is signed with: the
// current and, during rotations, the ones it replaces.
const maxSignatures = 4

// ErrVerification is wrapped by every error Verify returns for a request that
// is not authentic or not fresh (missing headers, stale timestamp, no matching
// signature). A malformed secret is reported without it.
var ErrVerification = errors.New("webhook verification failed")

// Webhook delivers events to customer endpoints, signed per Standard Webhooks
// 1.0. Safe for concurrent use.
type Webhook struct {
	// Secrets returns the signing secrets ("whsec_<base64>", 24–64 bytes
	// decoded) of the named endpoint (tasks.WebhookDeliver.Endpoint; "" for
	// a delivery that names none): the current one first, then those it
	// replaces while a rotation lasts. Each signs the delivery, and
	// webhook-signature carries every signature, space-separated in that
	// order (Standard Webhooks "Signature scheme": a receiver accepts any
	// one it can verify). An unknown endpoint is an error that wraps
	// ErrUnknownEndpoint. Required.
	Secrets func(endpoint string) ([]string, error)
	// Endpoints binds each named endpoint to the URL prefixes its secrets
	// may sign for (channels.webhook.endpoints.<name>.urls): Deliver holds
	// every delivery to Endpoints.Check before it asks Secrets, so an
	// endpoint's secret never signs a caller's body for a caller's URL. Nil
	// or empty: no endpoint is listed, and Secrets is asked for any.
	Endpoints tasks.WebhookEndpoints
	// HTTP is the client to use; nil = NewEgressHTTPClient(Egress) (15 s
	// timeout, redirects not followed, as Standard Webhooks requires, and every
	// dialled address checked by Egress). A client given here is used as is:
	// only the URL's literal host is checked, so it should refuse private
	// addresses itself (NewEgressHTTPClient does).
	HTTP *http.Client
	// Egress is where deliveries may go; the zero value refuses loopback,
	// private, link-local and the other ranges Egress lists.
	Egress Egress
	// UserAgent is the User-Agent header; default DefaultUserAgent.
	UserAgent string
	// Now is the clock for webhook-timestamp, Retry-After dates and the
	// body's timestamp of a payload without one; nil = time.Now.
	Now func() time.Time
}

// Deliver POSTs one event as
//
//	{"type":<p.EventType>,"timestamp":<RFC 3339, p.Timestamp>,"data":<p.Payload>}
//
// with Content-Type application/json and the Standard Webhooks headers:
// webhook-id = p.IdempotencyKey (stable across retries, so receivers can
// deduplicate; required), webhook-timestamp = Unix seconds of this attempt,
// webhook-signature = Sign(secret, id, now, body) for each of the
// endpoint's secrets (c.Secrets), space-separated. The body's timestamp is
// the event's (p.Timestamp, set at enqueue), the same in every attempt, so
// a retry's body differs from the first only if the payload does; a payload
// without one gets the attempt's time.
//
// A target that c.Egress refuses (before the request, or at dial time) is
// Permanent, with an *EgressError as Err naming the refused range.
//
// Classification (Standard Webhooks "Retry schedule" and RFC 9110):
// 2xx success; 429, 502, 503, 504 Throttled with ScopeSender (the whole host)
// and RetryAfter from Retry-After; 408 and other 5xx Transient; 3xx Permanent
// (redirects are not followed); 410 Permanent, the endpoint is gone and should
// be disabled; other 4xx Permanent. Network errors and timeouts are Transient;
// if ctx is cancelled the error wraps context.Canceled and is not an *Error.
// Secret lookup errors are Transient (the store may come back), but for an
// unknown endpoint (ErrUnknownEndpoint) or a URL not the endpoint's
// (ErrEndpointURL); those, a malformed secret, an invalid payload or a
// missing Secrets func are Permanent.
func (c *Webhook) Deliver(ctx context.Context, p tasks.WebhookDeliver) (Response, error) {
	if c.Secrets == nil {
		return Response{}, permanent(ProviderWebhook, "config: channels: Webhook.Secrets: required")
	}
	if err := validEndpointURL(p.URL); err != nil {
		return Response{}, permanent(ProviderWebhook, "invalid payload: url: %v", err)
	}
	if err := c.Egress.CheckURL(p.URL); err != nil {
		return Response{}, targetError(ProviderWebhook, err)
	}
	if p.IdempotencyKey == "" {
		return Response{}, permanent(ProviderWebhook, "invalid payload: idempotency_key: required, it is the webhook-id")
	}
	if !validHeaderValue(p.IdempotencyKey) || strings.ContainsAny(p.IdempotencyKey, " \t") {
		return Response{}, permanent(ProviderWebhook, "invalid payload: idempotency_key: must not contain spaces or control characters")
	}
	if p.EventType == "" {
		return Response{}, permanent(ProviderWebhook, "invalid payload: event_type: required")
	}
	ua := orDefault(c.UserAgent, DefaultUserAgent)
	if !validHeaderValue(ua) {
		return Response{}, permanent(ProviderWebhook, "config: channels: Webhook.UserAgent: contains control characters")
	}
	err := c.Endpoints.Check(p.Endpoint, p.URL)
	var secrets []string
	if err == nil {
		secrets, err = c.Secrets(p.Endpoint)
	}
	switch {
	case errors.Is(err, ErrUnknownEndpoint):
		return Response{}, &Error{Class: Permanent, Provider: ProviderWebhook,
			Message: fmt.Sprintf("config: endpoint %s has no signing secret (channels.webhook.endpoints)", endpointName(p.Endpoint)), Err: err}
	case errors.Is(err, ErrEndpointURL):
		return Response{}, &Error{Class: Permanent, Provider: ProviderWebhook,
			Message: "invalid payload: " + err.Error() + " (nothing signed)", Err: err}
	case err != nil:
		return Response{}, &Error{Class: Transient, Provider: ProviderWebhook,
			Message: fmt.Sprintf("secret lookup for endpoint %s failed", endpointName(p.Endpoint)), Err: err}
	case len(secrets) == 0 || len(secrets) > maxSignatures:
		return Response{}, permanent(ProviderWebhook, "config: endpoint %s has %d signing secrets, want 1 to %d", endpointName(p.Endpoint), len(secrets), maxSignatures)
	}
	keys := make([][]byte, len(secrets))
	for i, secret := range secrets {
		if keys[i], err = decodeSecret(secret); err != nil {
			return Response{}, permanent(ProviderWebhook, "config: secret %d of endpoint %s: %v", i+1, endpointName(p.Endpoint), err)
		}
	}
	now := clock(c.Now)
	eventTime := p.Timestamp
	if eventTime.IsZero() {
		eventTime = now
	}
	data := p.Payload
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	body, err := json.Marshal(struct {
		Type      string          `json:"type"`
		Timestamp string          `json:"timestamp"`
		Data      json.RawMessage `json:"data"`
	}{p.EventType, eventTime.UTC().Format(time.RFC3339), data})
	if err != nil {
		return Response{}, permanent(ProviderWebhook, "invalid payload: payload is not JSON")
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	req, err := http.NewRequest(http.MethodPost, p.URL, bytes.NewReader(body))
	if err != nil {
		return Response{}, permanent(ProviderWebhook, "invalid payload: url: %q", redactURL(p.URL))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", ua)
	req.Header.Set("webhook-id", p.IdempotencyKey)
	req.Header.Set("webhook-timestamp", ts)
	sigs := make([]string, len(keys))
	for i, key := range keys {
		sigs[i] = sign(key, p.IdempotencyKey, ts, body)
	}
	req.Header.Set("webhook-signature", strings.Join(sigs, " "))
	r, err := do(ctx, c.Egress.clientOr(c.HTTP), req, ProviderWebhook, secrets...)
	if err != nil {
		return Response{}, err
	}
	return httpResult(ProviderWebhook, r, now, secrets...)
}

// Sign returns the Standard Webhooks signature header value
// "v1,<base64 of HMAC-SHA256(key, "{id}.{unix seconds}.{body}")>", where key is
// the base64-decoded part of secret after "whsec_". The error says why a secret
// is malformed (missing prefix, bad base64, not 24–64 bytes) without showing it.
func Sign(secret, id string, ts time.Time, body []byte) (string, error) {
	key, err := decodeSecret(secret)
	if err != nil {
		return "", err
	}
	return sign(key, id, strconv.FormatInt(ts.Unix(), 10), body), nil
}

func sign(key []byte, id, ts string, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, id, ts, body))
}

func mac(key []byte, id, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(id))
	h.Write([]byte{'.'})
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// endpointName is an endpoint's name as errors show it: quoted, at most 64
// bytes, and only scheme and host when it is a URL (`sluice send` names
// endpoints by their URL, whose query or path may hold a token).
func endpointName(e string) string {
	if strings.Contains(e, "://") {
		e = redactURL(e)
	}
	return fmt.Sprintf("%.64q", e)
}

// CheckSecret reports whether secret is a well-formed Standard Webhooks
// signing secret: "whsec_" and the standard base64 of 24–64 bytes. The error
// says what is wrong without showing the secret. Check it at start-up: a
// malformed secret would otherwise archive every delivery.
func CheckSecret(secret string) error {
	_, err := decodeSecret(secret)
	return err
}

// SecretKey is the HMAC key a secret signs with, for telling whether two
// secrets sign alike: the decoded bytes without trailing zero bytes (HMAC
// pads a key shorter than its block, 64 bytes for SHA-256, with zeros, so
// "k" and "k\x00" sign alike). Its error is CheckSecret's.
func SecretKey(secret string) (string, error) {
	key, err := decodeSecret(secret)
	if err != nil {
		return "", err
	}
	return string(bytes.TrimRight(key, "\x00")), nil
}

// decodeSecret returns the key bytes of "whsec_<base64>".
func decodeSecret(secret string) ([]byte, error) {
	enc, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, errors.New("webhook secret: want whsec_<base64>, prefix missing")
	}
	if strings.ContainsFunc(enc, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		// (base64 decoding skips line breaks: a secret read from a file
		// with its newline would be the same key as one without)
		return nil, errors.New("webhook secret: holds white space or a line break (a file's trailing newline?)")
	}
	key, err := base64.StdEncoding.Strict().DecodeString(enc)
	if err != nil {
		return nil, errors.New("webhook secret: part after whsec_ is not standard base64 (padded, unused bits zero)")
	}
	if len(key) < minSecretBytes || len(key) > maxSecretBytes {
		return nil, fmt.Errorf("webhook secret: want %d–%d bytes decoded, got %d", minSecretBytes, maxSecretBytes, len(key))
	}
	return key, nil
}

// Verify checks a received webhook the way Standard Webhooks receivers do:
// the webhook-id, webhook-timestamp and webhook-signature headers must be
// present; the timestamp (Unix seconds) must be within tolerance of now, in
// either direction (tolerance <= 0 means DefaultTolerance), which limits
// replays; and at least one of the space-separated "v1,<base64>" signatures
// must equal the HMAC of "{id}.{timestamp}.{body}" (compared in constant time;
// other versions are ignored). Failures wrap ErrVerification; a malformed
// secret returns the Sign error.
func Verify(secret string, h http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	key, err := decodeSecret(secret)
	if err != nil {
		return err
	}
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return fmt.Errorf("%w: missing webhook-id, webhook-timestamp or webhook-signature header", ErrVerification)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: webhook-timestamp: want Unix seconds, got %q", ErrVerification, ts)
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	tol, n := int64(tolerance/time.Second), now.Unix()
	if sec < n-tol || sec > n+tol { // no subtraction involving sec: it cannot overflow
		return fmt.Errorf("%w: webhook-timestamp %d is more than %v from now", ErrVerification, sec, tolerance)
	}
	want := mac(key, id, ts, body)
	for _, s := range strings.Fields(sigs) {
		version, enc, ok := strings.Cut(s, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.Strict().DecodeString(enc)
		if err != nil {
			continue
		}
		if hmac.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("%w: no matching v1 signature", ErrVerification)
}

// validEndpointURL accepts absolute http(s) URLs with a host.
func validEndpointURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("want an absolute http(s) URL, got %q", redactURL(raw))
	}
	return nil
}

// httpResult classifies a webhook or HTTP call response:
//
//   - 2xx (and 304 for HTTP calls, which only follows a conditional request
//     the caller made): success;
//   - 429, 503, and for webhooks 502 and 504: Throttled, ScopeSender (host-wide),
//     RetryAfter from Retry-After;
//   - 408 and other 5xx: Transient;
//   - 3xx: Permanent, redirects are not followed;
//   - 410: Permanent, the endpoint is gone;
//   - other 4xx (and anything else): Permanent.
func httpResult(provider string, r *reply, now time.Time, secrets ...string) (Response, error) {
	resp := Response{Status: r.status, Incomplete: r.incomplete}
	s := r.status
	if s >= 200 && s < 300 || provider == ProviderHTTP && s == http.StatusNotModified {
		return resp, nil
	}
	secrets = r.redactions(secrets)
	e := &Error{Provider: provider, HTTPStatus: s, RetryAfter: ParseRetryAfter(r.header, now)}
	switch {
	case s == http.StatusTooManyRequests || s == http.StatusServiceUnavailable,
		provider == ProviderWebhook && (s == http.StatusBadGateway || s == http.StatusGatewayTimeout):
		e.Class, e.Scope = Throttled, ScopeSender
	case s == http.StatusRequestTimeout || s >= 500:
		e.Class = Transient
	case s >= 300 && s < 400:
		e.Class = Permanent
		e.Message = "redirects are not followed"
		if loc := r.header.Get("Location"); loc != "" {
			e.Message += " (Location: " + cleanMessage(redactURL(loc), secrets) + ")"
		}
		return resp, e
	case s == http.StatusGone:
		e.Class = Permanent
		e.Message = "endpoint is gone (410 Gone): disable it"
		if m := cleanMessage(string(r.body), secrets); m != "" {
			e.Message += ": " + m
		}
		return resp, e
	default:
		e.Class = Permanent
	}
	e.Message = bodyMessage(r, secrets)
	return resp, e
}
