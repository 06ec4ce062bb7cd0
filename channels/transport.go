package channels

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/redact"
)

// MaxBodyBytes is how much of any response body the clients read (64 KiB).
const MaxBodyBytes = 64 << 10

// DefaultTimeout is the timeout of the default HTTP client (Standard Webhooks
// recommends 15–30 s).
const DefaultTimeout = 15 * time.Second

// DefaultUserAgent is sent when no other User-Agent is configured. Its shape
// "name/x.y.z" matches the User-Agent pattern of Meta's WhatsApp spec.
const DefaultUserAgent = "sluice/0.1.0"

// maxMessage bounds Error.Message (bytes).
const maxMessage = 512

// defaultHTTP is shared by all clients whose HTTP field is nil, so that
// connections are pooled.
var defaultHTTP = sync.OnceValue(func() *http.Client { return NewHTTPClient() })

// MaxIdleConnsPerHost is how many idle connections the default client keeps
// to each provider host. net/http's default, 2, is far under a paced
// channel's concurrency (80 sends/s of ~100ms each is 8 in flight): every
// send past it dialled, with TLS, a new connection, and a send delayed by a
// handshake that the next one, on a warm connection, did not wait for
// arrives less than an interval before it: a throttle from a provider that
// counts any 1-second span.
const MaxIdleConnsPerHost = 128

// NewHTTPClient returns the client the channels use when their HTTP field is
// nil: DefaultTimeout, a clone of http.DefaultTransport keeping
// MaxIdleConnsPerHost idle connections per host, and redirects not followed
// (CheckRedirect returns http.ErrUseLastResponse, so a 3xx is returned as is;
// Standard Webhooks: "redirects are not followed").
func NewHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = MaxIdleConnsPerHost
	t.MaxIdleConns = 4 * MaxIdleConnsPerHost
	return &http.Client{
		Transport: t,
		Timeout:   DefaultTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

func httpClient(c *http.Client) *http.Client {
	if c != nil {
		return c
	}
	return defaultHTTP()
}

func clock(now func() time.Time) time.Time {
	if now != nil {
		return now()
	}
	return time.Now()
}

// reply is a response with its (bounded) body read.
type reply struct {
	status int
	header http.Header
	body   []byte
	// incomplete: a 2xx whose body could not be read to the end (timeout,
	// reset); body holds what arrived.
	incomplete bool
	// req is the request sent, whose parts must not come back in an error
	// message when a receiver echoes it: see redactions.
	req *http.Request
}

// redactions returns secrets plus what of r's request must be redacted from
// messages built from its body (requestSecrets). Called only on the failure
// paths: a delivered send builds no message.
func (r *reply) redactions(secrets []string) []string {
	if r.req == nil {
		return secrets
	}
	return append(secrets, requestSecrets(r.req)...)
}

// minRedact is the shortest request value requestSecrets redacts: shorter
// ones ("1", "en") would garble messages and give nothing away.
const minRedact = 4

// requestSecrets returns the parts of req that an echoing receiver could put
// in a response body and that must not reach an archive reason or a log: the
// value of every header Sluice sets except Content-Type, Content-Length,
// Accept and User-Agent (signatures, tokens, caller headers); the URL's query
// as a whole, each "k=v" and each value as sent, and each value decoded and
// re-escaped; the escaped path, and each path segment of 16 bytes or more
// (webhook URLs such as Slack's carry tokens in the path). Each also in the
// forms a JSON echo gives it. Values shorter than minRedact are left alone.
func requestSecrets(req *http.Request) []string {
	var out []string
	add := func(v string) {
		if len(v) < minRedact {
			return
		}
		out = append(out, v)
		// As a JSON echo may spell it: Go escapes <, > and & as \u003c…;
		// PHP and others escape '/' as \/.
		if b, err := json.Marshal(v); err == nil {
			if j := string(b[1 : len(b)-1]); j != v {
				out = append(out, j)
			}
		}
		if j := strings.ReplaceAll(v, "/", `\/`); j != v {
			out = append(out, j)
		}
	}
	for name, vs := range req.Header {
		switch name {
		case "Content-Type", "Content-Length", "Accept", "User-Agent":
			continue
		}
		for _, v := range vs {
			add(v)
			for _, c := range credentials(v)[1:] {
				add(c)
			}
		}
	}
	u := req.URL
	if u.RawQuery != "" {
		add(u.RawQuery)
		for _, part := range strings.Split(u.RawQuery, "&") { // as sent, undecoded
			add(part)
			if _, v, ok := strings.Cut(part, "="); ok {
				add(v)
			}
		}
		for _, vs := range u.Query() {
			for _, v := range vs {
				add(v)
				add(url.QueryEscape(v))
			}
		}
	}
	if p := u.EscapedPath(); len(p) > 1 {
		add(p)
		for _, seg := range strings.Split(p, "/") {
			if len(seg) >= 16 {
				add(seg)
			}
		}
	}
	// Longest first, so a value is never half-replaced by one it contains.
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// do sends req and reads at most MaxBodyBytes of the body. A 2xx is returned
// as a reply even when its body fails to arrive (reply.incomplete): the
// request was accepted, whatever happens to the body afterwards. A nil reply
// comes with a non-nil error: the caller's cancellation (wrapping ctx.Err(), not an
// *Error) or a Transient *Error for network errors and timeouts. secrets are
// redacted from error text.
func do(ctx context.Context, c *http.Client, req *http.Request, provider string, secrets ...string) (*reply, error) {
	resp, err := httpClient(c).Do(req.WithContext(ctx))
	if err != nil {
		if ee, ok := egressError(err); ok {
			return nil, refuseTarget(provider, ee)
		}
		return nil, networkError(ctx, provider, err, secrets)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes))
	if err != nil && resp.StatusCode >= 200 && resp.StatusCode < 300 {
		// The status line says the provider accepted the request. A body that
		// then trickles past the timeout, or breaks off, cannot undo that, and
		// a retry would deliver twice: keep what arrived and report success.
		return &reply{status: resp.StatusCode, header: resp.Header, body: body, incomplete: true, req: req}, nil
	}
	if err != nil {
		if cerr := cancelled(ctx, provider); cerr != nil {
			return nil, cerr
		}
		// The status line arrived, but the body did not: the outcome is unknown,
		// so retry (the Idempotency-Key makes that safe where honoured).
		err = networkError(ctx, provider, err, secrets)
		var e *Error
		if errors.As(err, &e) {
			e.HTTPStatus = resp.StatusCode
			e.Message = "reading response body"
		}
		return nil, err
	}
	return &reply{status: resp.StatusCode, header: resp.Header, body: body, req: req}, nil
}

// cancelled returns the wrapped ctx error if the caller cancelled ctx
// (context.Canceled, not a deadline).
func cancelled(ctx context.Context, provider string) error {
	err := ctx.Err()
	if err == nil || !errors.Is(err, context.Canceled) {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("%s: %w: %w", provider, err, cause)
	}
	return fmt.Errorf("%s: %w", provider, err)
}

// networkError classifies a failed round trip: the caller's cancellation is
// returned wrapped as is; anything else (refused, reset, DNS, client timeout,
// context deadline) is Transient with Err set. URLs inside the error lose their
// query and user info, since these may carry credentials.
func networkError(ctx context.Context, provider string, err error, secrets []string) error {
	if cerr := cancelled(ctx, provider); cerr != nil {
		return cerr
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = &url.Error{Op: ue.Op, URL: redactURL(ue.URL), Err: redactErr(ue.Err, secrets)}
	} else {
		err = redactErr(err, secrets)
	}
	return &Error{Class: Transient, Provider: provider, Err: err}
}

// redactedError keeps the chain of an error whose text had secrets removed.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// Timeout keeps url.Error.Timeout working through the redaction.
func (e *redactedError) Timeout() bool {
	var t interface{ Timeout() bool }
	return errors.As(e.err, &t) && t.Timeout()
}

func redactErr(err error, secrets []string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	red := scrub(msg, secrets)
	if red == msg {
		return err
	}
	return &redactedError{msg: red, err: err}
}

// scrub replaces every non-empty secret in s.
func scrub(s string, secrets []string) string {
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "[REDACTED]")
		}
	}
	return s
}

// redactURL keeps only the scheme and host of raw ("https://example.com"):
// user info, path, query and fragment may all carry credentials (Slack and
// Discord webhook URLs hold their token in the path). See redact.URL.
func redactURL(raw string) string { return redact.URL(raw) }

// cleanMessage makes a provider message fit for Error.Message: valid UTF-8,
// control characters replaced by spaces, secrets redacted, at most maxMessage
// bytes.
func cleanMessage(s string, secrets []string) string {
	s = scrub(strings.ToValidUTF8(s, "\uFFFD"), secrets)
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if len(s) > maxMessage {
		cut := maxMessage
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// bodyMessage is the message for a response without a parsable provider error:
// the body's text, or the status text if the body is empty.
func bodyMessage(r *reply, secrets []string) string {
	if m := cleanMessage(string(bytes.TrimSpace(r.body)), secrets); m != "" {
		return m
	}
	return http.StatusText(r.status)
}

// validHeaderValue reports whether v can be sent as a header value: no control
// characters (which the transport rejects, and which would split headers).
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// permanent is the *Error for a request that cannot be built (invalid payload or
// configuration): retrying cannot help.
func permanent(provider, format string, args ...any) *Error {
	return &Error{Class: Permanent, Provider: provider, Message: fmt.Sprintf(format, args...)}
}
