package channels

import (
	"context"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/tasks"
)

// HTTPCaller makes one request to a third-party API per tasks.HTTPCall. Safe for
// concurrent use.
type HTTPCaller struct {
	// HTTP is the client to use; nil = NewEgressHTTPClient(Egress) (15 s
	// timeout, no redirects, every dialled address checked by Egress). A client
	// given here is used as is: only the URL's literal host is checked.
	HTTP *http.Client
	// Egress is where calls may go; the zero value refuses loopback, private,
	// link-local and the other ranges Egress lists.
	Egress Egress
	// Now is the clock for Retry-After dates; nil = time.Now.
	Now func() time.Time
}

// httpMethods are the methods tasks.HTTPCall allows.
var httpMethods = map[string]bool{
	http.MethodGet: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true,
}

// Call sends p.Method to p.URL with p.Headers and p.Body. p.IdempotencyKey is
// sent as Idempotency-Key (IETF httpapi draft) unless p.Headers sets that
// header (in any case). A "Host" entry in p.Headers sets the request's Host.
//
// A target that c.Egress refuses (before the request, or at dial time) is
// Permanent, with an *EgressError as Err naming the refused range.
//
// Classification: 2xx and 304 success; 429 and 503 Throttled with ScopeSender
// (the whole host) and RetryAfter from Retry-After; 408 and other 5xx
// Transient; 3xx Permanent (redirects are not followed by the default client);
// 410 Permanent (gone); other 4xx Permanent. Network errors and timeouts are
// Transient; if ctx is cancelled the error wraps context.Canceled and is not an
// *Error. Header values and the URL's query never appear in errors.
func (c *HTTPCaller) Call(ctx context.Context, p tasks.HTTPCall) (Response, error) {
	method := strings.ToUpper(p.Method)
	if !httpMethods[method] {
		return Response{}, permanent(ProviderHTTP, "invalid payload: method: want GET, POST, PUT, PATCH or DELETE, got %q", p.Method)
	}
	if err := validEndpointURL(p.URL); err != nil {
		return Response{}, permanent(ProviderHTTP, "invalid payload: url: %v", err)
	}
	if err := c.Egress.CheckURL(p.URL); err != nil {
		return Response{}, targetError(ProviderHTTP, err)
	}
	var body io.Reader
	if p.Body != "" {
		body = strings.NewReader(p.Body)
	}
	req, err := http.NewRequest(method, p.URL, body)
	if err != nil {
		return Response{}, permanent(ProviderHTTP, "invalid payload: url: %q", redactURL(p.URL))
	}
	var secrets []string
	for k, v := range p.Headers {
		if !validHeaderName(k) || !validHeaderValue(v) {
			return Response{}, permanent(ProviderHTTP, "invalid payload: headers: bad header %q", k)
		}
		if strings.EqualFold(k, "Host") {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
		if sensitiveHeader(k) {
			secrets = append(secrets, credentials(v)...)
		}
	}
	if _, set := req.Header["Idempotency-Key"]; p.IdempotencyKey != "" && !set {
		if !validHeaderValue(p.IdempotencyKey) {
			return Response{}, permanent(ProviderHTTP, "invalid payload: idempotency_key contains control characters")
		}
		req.Header.Set("Idempotency-Key", p.IdempotencyKey)
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", DefaultUserAgent)
	}
	r, err := do(ctx, c.Egress.clientOr(c.HTTP), req, ProviderHTTP, secrets...)
	if err != nil {
		return Response{}, err
	}
	return httpResult(ProviderHTTP, r, clock(c.Now), secrets...)
}

// sensitiveHeader reports whether a header probably carries a credential, so
// its value is redacted from error messages.
func sensitiveHeader(name string) bool {
	n := strings.ToLower(name)
	for _, s := range []string{"auth", "key", "token", "secret", "cookie", "signature", "password", "session"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// credentials returns the strings to redact for a sensitive header value: the
// value, and for "<scheme> <credentials>" values also the credentials alone.
func credentials(v string) []string {
	out := []string{v}
	if _, cred, ok := strings.Cut(strings.TrimSpace(v), " "); ok {
		if cred = strings.TrimSpace(cred); len(cred) >= 4 {
			out = append(out, cred)
		}
	}
	return out
}

// validHeaderName reports whether k is a non-empty HTTP token.
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}
