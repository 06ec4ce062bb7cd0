// Package httplimit is net/http middleware that rate-limits requests with a
// throttle.Limiter: for APIs in front of Sluice and for users' own services.
//
// # What is limited
//
// Each request is limited as a subject chosen by a KeyFunc: the client IP
// (ByIP, the default), the user (ByUser; anonymous requests fall back to the
// client IP) or the user at an IP (ByUserAndIP). The client IP is the direct
// peer unless the peer is a trusted proxy; see Middleware.ClientIP.
//
// A request is charged one unit of every policy (throttle.Limit) in
// Config.Limits, in one Limiter.Consume call, so "100/1m and 1000/1h" either
// both take the request or neither does. The key of policy "minute" for
// subject "user:alice" is "http:minute:user:alice": Config.Scope, the policy
// name, the subject. A client IP in one of Config.Allowlists is limited by
// that list's policies instead, under keys of their own
// ("http:minute@internal:ip:10.1.2.3"), so they never share counters with
// the defaults. Requests for which Config.Bypass returns true are not limited
// at all: no limiter call and no rate-limit header fields.
//
// # Response header fields
//
// Every limited response carries the conventional fields of the binding
// policy (throttle.Decision.Binding: the blocking one on a 429, otherwise
// the one with the fewest units remaining) and the fields of the IETF draft
// "RateLimit header fields for HTTP", draft-ietf-httpapi-ratelimit-headers-10
// (https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/10/),
// in its named-policy form:
//
//	X-RateLimit-Limit: 100          binding policy's capacity (throttle.LimitDecision.Limit)
//	X-RateLimit-Remaining: 42       its units left after this request
//	X-RateLimit-Reset: 17           whole seconds until it is full again, rounded up
//	RateLimit-Policy: "minute";q=100;w=60, "hour";q=1000;w=3600
//	RateLimit: "minute";r=42;t=17
//
// RateLimit-Policy (draft §3) is a Structured Fields List (RFC 9651 §3.1) of
// one Item per policy, in Config order: the policy name as a String, q the
// quota (Rate.Limit per window for GCRA and the windowed algorithms, 1 for
// MinInterval, Max for Concurrency), w the window in whole seconds rounded
// up (Limit.Window; omitted for Concurrency, which carries
// qu="concurrent-requests" instead). RateLimit (draft §4) is a List of one
// Item, the binding policy: r its remaining units, t the same seconds as
// X-RateLimit-Reset. (net/http writes names in canonical case, e.g.
// "Ratelimit-Policy"; field names are case-insensitive.)
//
// A blocked request gets 429 Too Many Requests with, besides those fields,
//
//	Retry-After: 17
//	Content-Type: application/json
//
//	{"error":{"code":"RATE_LIMITED","message":"rate limit exceeded: 100 requests per 1m; retry in 17s","retryAfter":17}}
//
// where Retry-After and retryAfter are Decision.RetryAfter (when every
// blocked policy has room) in whole seconds rounded up, at least 1. On a 429,
// t and X-RateLimit-Reset equal Retry-After, so that Retry-After never points
// earlier than the reset parameter (draft §6).
//
// # When the limiter fails
//
// Each Consume runs with Config.Timeout (default 50ms), enforced by the
// middleware even if the Limiter ignores its context (a go-redis client
// without ContextTimeoutEnabled waits for its own ReadTimeout). On an error
// or timeout the middleware logs (at most once a second), increments
// sluice_httplimit_backend_errors_total{mode} and then either serves the
// request without rate-limit fields (fail-open, the default) or, with
// Config.FailClosed, answers 503 Service Unavailable, Retry-After: 1 and
//
//	{"error":{"code":"RATE_LIMIT_UNAVAILABLE","message":"rate limiting is temporarily unavailable; retry in 1s"}}
package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/throttle"
)

// DefaultScope is the first segment of every key when Config.Scope is empty.
const DefaultScope = "http"

// DefaultTimeout bounds each limiter call when Config.Timeout is zero.
const DefaultTimeout = 50 * time.Millisecond

// Error codes of the JSON error bodies.
const (
	CodeRateLimited = "RATE_LIMITED"           // 429
	CodeUnavailable = "RATE_LIMIT_UNAVAILABLE" // 503, fail-closed
)

// Config configures a Middleware. Only Limits is required.
type Config struct {
	// Limits are the default policies: every limited request takes one unit
	// of each. Names must be unique, 1-64 of [A-Za-z0-9_.-] (they appear in
	// keys and, quoted, in RateLimit-Policy). Any algorithm but Distinct;
	// a Concurrency lease is held while the handler runs.
	Limits []throttle.Limit
	// Key picks the subject a request is limited as; nil means ByIP().
	Key KeyFunc
	// Scope is the first segment of every key, the throttle scope (one
	// atomic decision per scope); empty means DefaultScope. No ':', '{' or
	// '}', and not starting with '_'.
	Scope string
	// TrustedProxies are the addresses ("192.0.2.1") and CIDR prefixes
	// ("10.0.0.0/8", "2001:db8::/32") of proxies whose X-Forwarded-For is
	// believed. Empty means the client is always the direct peer.
	TrustedProxies []string
	// TrustXRealIP, when the direct peer is a trusted proxy and sent no
	// X-Forwarded-For, takes the client from X-Real-IP.
	TrustXRealIP bool
	// Allowlists give clients in their CIDRs their own policies in place of
	// Limits. The first list containing the client IP applies.
	Allowlists []Allowlist
	// Bypass, when it returns true, lets a request through unlimited: the
	// limiter is not called and no rate-limit fields are set. For admin or
	// system roles, health checks, CORS preflights. It runs after the client
	// IP is resolved, so it may call ClientIP.
	Bypass func(*http.Request) bool
	// FailClosed answers 503 when the limiter fails or times out; the
	// default (false) serves the request unlimited.
	FailClosed bool
	// Timeout bounds each limiter call; zero means DefaultTimeout.
	Timeout time.Duration
	// Logger receives limiter failures; nil means slog.Default().
	Logger *slog.Logger
	// Registerer, when set, registers sluice_httplimit_backend_errors_total.
	// Several Middlewares may share one Registerer: they share the counter.
	Registerer prometheus.Registerer
}

// Allowlist is a set of client networks with policies of their own.
type Allowlist struct {
	// Name separates the list's keys from the defaults' and other lists'
	// ("http:minute@internal:…"); empty means "allowlist<index>". Same
	// characters as a limit name.
	Name string
	// CIDRs are prefixes ("10.0.0.0/8") or single addresses.
	CIDRs []string
	// Limits replace Config.Limits for these clients; at least one (use
	// Config.Bypass to exempt clients entirely).
	Limits []throttle.Limit
}

// Middleware rate-limits requests; build one with New. It is safe for
// concurrent use.
type Middleware struct {
	lim        throttle.Limiter
	key        KeyFunc
	trusted    []netip.Prefix
	realIP     bool
	bypass     func(*http.Request) bool
	defaults   *policySet
	allowlists []allowlist
	failClosed bool
	timeout    time.Duration
	logger     *slog.Logger

	errCounter prometheus.Counter
	errCount   atomic.Int64
	logEvery   time.Duration
	now        func() time.Time
	nextLog    atomic.Int64 // unix ns before which failures are not logged
	suppressed atomic.Int64 // failures not logged since the last line
}

type allowlist struct {
	prefixes []netip.Prefix
	set      *policySet
}

// policySet is a list of policies with their keys and header value.
type policySet struct {
	limits []throttle.Limit
	keys   []string // per limit: "http:minute:" or "http:minute@internal:"
	header string   // RateLimit-Policy
}

// New validates cfg and returns the middleware over lim. Errors name the
// field and value: `httplimit: Allowlists[0].CIDRs[1] "10.0.0.0/33": …`.
func New(lim throttle.Limiter, cfg Config) (*Middleware, error) {
	if lim == nil {
		return nil, errors.New("httplimit: nil Limiter")
	}
	scope := cfg.Scope
	if scope == "" {
		scope = DefaultScope
	}
	if strings.ContainsAny(scope, ":{}") || scope[0] == '_' {
		return nil, fmt.Errorf("httplimit: Scope %q: want no ':', '{' or '}' and no leading '_'", cfg.Scope)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("httplimit: Timeout %v: want >= 0", cfg.Timeout)
	}
	m := &Middleware{
		lim:        lim,
		key:        cfg.Key,
		realIP:     cfg.TrustXRealIP,
		bypass:     cfg.Bypass,
		failClosed: cfg.FailClosed,
		timeout:    cfg.Timeout,
		logger:     cfg.Logger,
		logEvery:   time.Second,
		now:        time.Now,
	}
	if m.key == nil {
		m.key = ByIP()
	}
	if m.timeout == 0 {
		m.timeout = DefaultTimeout
	}
	if m.logger == nil {
		m.logger = slog.Default()
	}
	var err error
	if m.trusted, err = parsePrefixes("TrustedProxies", cfg.TrustedProxies); err != nil {
		return nil, err
	}
	if m.defaults, err = newPolicySet("Limits", scope, "", cfg.Limits); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for i, al := range cfg.Allowlists {
		field := fmt.Sprintf("Allowlists[%d]", i)
		name := al.Name
		if name == "" {
			name = "allowlist" + strconv.Itoa(i)
		}
		if !validName(name) {
			return nil, fmt.Errorf("httplimit: %s.Name %q: want 1-64 of A-Z a-z 0-9 _ . -", field, al.Name)
		}
		if seen[name] {
			return nil, fmt.Errorf("httplimit: %s.Name %q: used by an earlier allowlist", field, name)
		}
		seen[name] = true
		if len(al.CIDRs) == 0 {
			return nil, fmt.Errorf("httplimit: %s.CIDRs: empty", field)
		}
		prefixes, err := parsePrefixes(field+".CIDRs", al.CIDRs)
		if err != nil {
			return nil, err
		}
		if len(al.Limits) == 0 {
			return nil, fmt.Errorf("httplimit: %s.Limits: empty (use Config.Bypass to exempt clients)", field)
		}
		set, err := newPolicySet(field+".Limits", scope, "@"+name, al.Limits)
		if err != nil {
			return nil, err
		}
		m.allowlists = append(m.allowlists, allowlist{prefixes, set})
	}
	mode := m.mode()
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_httplimit_backend_errors_total",
		Help: "Rate limiter calls of the HTTP middleware that failed or timed out, by failure mode (open: served unlimited; closed: answered 503).",
	}, []string{"mode"})
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(vec); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, fmt.Errorf("httplimit: Registerer: %w", err)
			}
			existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
			if !ok {
				return nil, fmt.Errorf("httplimit: Registerer: %w", err)
			}
			vec = existing // another Middleware's: share it
		}
	}
	m.errCounter = vec.WithLabelValues(mode)
	return m, nil
}

func newPolicySet(field, scope, suffix string, limits []throttle.Limit) (*policySet, error) {
	if len(limits) == 0 {
		return nil, fmt.Errorf("httplimit: %s: empty", field)
	}
	s := &policySet{limits: slices.Clone(limits), keys: make([]string, len(limits))}
	var header strings.Builder
	seen := map[string]bool{}
	for i, l := range limits {
		if !validName(l.Name) {
			return nil, fmt.Errorf("httplimit: %s[%d].Name %q: want 1-64 of A-Z a-z 0-9 _ . -", field, i, l.Name)
		}
		if seen[l.Name] {
			return nil, fmt.Errorf("httplimit: %s[%d].Name %q: used by an earlier limit", field, i, l.Name)
		}
		seen[l.Name] = true
		if err := l.Validate(); err != nil {
			return nil, fmt.Errorf("httplimit: %s[%d]: %w", field, i, err)
		}
		if l.Algorithm == throttle.Distinct {
			return nil, fmt.Errorf("httplimit: %s[%d] %q: algorithm distinct is not supported (it counts members, not requests)", field, i, l.Name)
		}
		s.keys[i] = scope + ":" + l.Name + suffix + ":"
		if i > 0 {
			header.WriteString(", ")
		}
		header.WriteString(policyItem(l))
	}
	s.header = header.String()
	return s, nil
}

// policyItem renders one RateLimit-Policy item: "minute";q=100;w=60.
func policyItem(l throttle.Limit) string {
	var q int64
	switch l.Algorithm {
	case throttle.MinInterval:
		q = 1
	case throttle.Concurrency:
		return fmt.Sprintf(`%s;q=%d;qu="concurrent-requests"`, sfString(l.Name), l.Max)
	default:
		q = l.Rate.Limit
	}
	return fmt.Sprintf(`%s;q=%d;w=%d`, sfString(l.Name), q, max(ceilSeconds(l.Window()), 1))
}

// sfString serializes s as a Structured Fields String (RFC 9651 §4.1.6):
// quoted, '"' and '\' escaped. Characters outside printable ASCII, which a
// String cannot hold, become '?' (validated names have none).
func sfString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// validName reports whether s may name a limit or allowlist: it then needs
// no escaping in a key segment or a Structured Fields String.
func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

func (m *Middleware) mode() string {
	if m.failClosed {
		return "closed"
	}
	return "open"
}

// BackendErrors returns how many limiter calls of this middleware failed or
// timed out (the middleware's share of
// sluice_httplimit_backend_errors_total).
func (m *Middleware) BackendErrors() int64 { return m.errCount.Load() }

// Handler returns next wrapped by the middleware: see the package
// documentation for the responses it writes. A request whose context ends
// (the client went away) while the limiter is asked gets no response and
// is not counted as a limiter failure.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, next)
	})
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	ip := m.ClientIP(r)
	r = r.WithContext(context.WithValue(r.Context(), clientIPKey{}, ip))
	if m.bypass != nil && m.bypass(r) {
		next.ServeHTTP(w, r)
		return
	}
	set := m.policiesFor(ip)
	subject := m.key(r, ip)
	if subject == "" {
		subject = IPSubject(ip)
	}
	reqs := make([]throttle.Request, len(set.limits))
	for i, l := range set.limits {
		reqs[i] = throttle.Request{Key: set.keys[i] + subject, Limit: l}
	}
	d, err := m.consume(r.Context(), reqs)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client is gone; not the backend's fault
		}
		m.backendFailed(r, err)
		if m.failClosed {
			h := w.Header()
			h.Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, errorBody{Code: CodeUnavailable, Message: "rate limiting is temporarily unavailable; retry in 1s"})
			return
		}
		next.ServeHTTP(w, r)
		return
	}
	b, ok := d.Binding()
	if !ok {
		// A Limiter that returned no per-limit decisions: nothing to show.
		if !d.Allowed {
			retry := retrySeconds(d.RetryAfter)
			w.Header().Set("Retry-After", strconv.FormatInt(retry, 10))
			writeError(w, http.StatusTooManyRequests, errorBody{Code: CodeRateLimited, Message: fmt.Sprintf("rate limit exceeded; retry in %ds", retry), RetryAfter: &retry})
			return
		}
		next.ServeHTTP(w, r)
		return
	}
	now := d.Now
	if now.IsZero() {
		now = m.now()
	}
	reset := ceilSeconds(b.Reset.Sub(now))
	var retry int64
	if !d.Allowed {
		retry = retrySeconds(d.RetryAfter)
		reset = retry
	}
	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.FormatInt(b.Limit, 10))
	h.Set("X-RateLimit-Remaining", strconv.FormatInt(max(b.Remaining, 0), 10))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(reset, 10))
	h.Set("RateLimit-Policy", set.header)
	h.Set("RateLimit", sfString(b.Name)+";r="+strconv.FormatInt(max(b.Remaining, 0), 10)+";t="+strconv.FormatInt(reset, 10))
	if !d.Allowed {
		h.Set("Retry-After", strconv.FormatInt(retry, 10))
		msg := "rate limit exceeded: " + describe(set.limit(b.Name)) + "; retry in " + strconv.FormatInt(retry, 10) + "s"
		writeError(w, http.StatusTooManyRequests, errorBody{Code: CodeRateLimited, Message: msg, RetryAfter: &retry})
		return
	}
	if len(d.Leases) > 0 {
		// Released before the handler's response completes, so a client
		// that waits for it may send the next request at once.
		defer m.release(r.Context(), d.Leases)
	}
	next.ServeHTTP(w, r)
}

func (s *policySet) limit(name string) (throttle.Limit, bool) {
	for _, l := range s.limits {
		if l.Name == name {
			return l, true
		}
	}
	return throttle.Limit{}, false
}

func (m *Middleware) policiesFor(ip netip.Addr) *policySet {
	if ip.IsValid() {
		for _, al := range m.allowlists {
			if contains(al.prefixes, ip) {
				return al.set
			}
		}
	}
	return m.defaults
}

type result struct {
	d   throttle.Decision
	err error
}

// consume calls the limiter within m.timeout, even if it ignores ctx.
func (m *Middleware) consume(parent context.Context, reqs []throttle.Request) (throttle.Decision, error) {
	ctx, cancel := context.WithTimeout(parent, m.timeout)
	defer cancel()
	ch := make(chan result, 1)
	go func() {
		d, err := m.lim.Consume(ctx, reqs...)
		ch <- result{d, err}
	}()
	select {
	case res := <-ch:
		return res.d, res.err
	case <-ctx.Done():
		select {
		case res := <-ch:
			return res.d, res.err
		default:
		}
		// A late answer may still hold Concurrency leases: give them back.
		go func() {
			if res := <-ch; res.err == nil && len(res.d.Leases) > 0 {
				m.release(parent, res.d.Leases)
			}
		}()
		return throttle.Decision{}, fmt.Errorf("httplimit: limiter gave no answer within %v: %w", m.timeout, context.Cause(ctx))
	}
}

func (m *Middleware) release(parent context.Context, leases []throttle.Lease) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), m.timeout)
	defer cancel()
	if err := m.lim.Release(ctx, leases); err != nil {
		m.logger.LogAttrs(ctx, slog.LevelWarn, "httplimit: releasing concurrency leases failed; they expire on their own",
			slog.Int("leases", len(leases)), slog.Any("error", err))
	}
}

// backendFailed counts a failure and logs it, at most once per logEvery.
func (m *Middleware) backendFailed(r *http.Request, err error) {
	m.errCount.Add(1)
	m.errCounter.Inc()
	now := m.now().UnixNano()
	next := m.nextLog.Load()
	if now < next || !m.nextLog.CompareAndSwap(next, now+int64(m.logEvery)) {
		m.suppressed.Add(1)
		return
	}
	msg := "httplimit: rate limiter failed; serving the request unlimited"
	if m.failClosed {
		msg = "httplimit: rate limiter failed; answering 503"
	}
	m.logger.LogAttrs(r.Context(), slog.LevelError, msg,
		slog.String("mode", m.mode()),
		slog.Any("error", err),
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Int64("suppressed", m.suppressed.Swap(0)))
}

// errorBody is the "error" member of the JSON error responses.
type errorBody struct {
	Code       string `json:"code"`
	Message    string `json:"message"`
	RetryAfter *int64 `json:"retryAfter,omitempty"`
}

func writeError(w http.ResponseWriter, status int, e errorBody) {
	body, _ := json.Marshal(struct {
		Error errorBody `json:"error"`
	}{e}) // cannot fail: strings and an integer
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// describe renders a limit for the 429 message: "100 requests per 1m".
func describe(l throttle.Limit, ok bool) string {
	if !ok {
		return "too many requests"
	}
	switch l.Algorithm {
	case throttle.Concurrency:
		return plural(l.Max, "concurrent request")
	case throttle.MinInterval:
		return "1 request per " + period(l.Interval)
	}
	return plural(l.Rate.Limit, "request") + " per " + period(l.Rate.Period)
}

func plural(n int64, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return strconv.FormatInt(n, 10) + " " + unit + "s"
}

// period renders a duration as throttle.FormatPeriod does, with an explicit
// count: "1m", "6s", "1500ms".
func period(d time.Duration) string {
	s := throttle.FormatPeriod(d)
	if s != "" && (s[0] < '0' || s[0] > '9') {
		return "1" + s
	}
	return s
}

// ceilSeconds is d in whole seconds rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// retrySeconds is the Retry-After value for d: ceilSeconds, at least 1.
func retrySeconds(d time.Duration) int64 { return max(ceilSeconds(d), 1) }
