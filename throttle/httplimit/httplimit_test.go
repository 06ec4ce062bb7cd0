package httplimit

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/throttle"
)

// t0 is 43s past a UTC midnight: a 1m fixed window resets in 17s, a 1h one
// in 3557s.
var t0 = time.Date(2026, 11, 20, 0, 0, 43, 0, time.UTC)

// newRedis returns a limiter over a private miniredis whose time is the
// returned clock, starting at t0.
func newRedis(t *testing.T) (*throttle.Redis, *testutil.Clock) {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	clk := testutil.NewClock(t0)
	return throttle.NewRedis(rdb, throttle.Options{Prefix: "t", Clock: clk.Now, Events: throttle.EventOptions{Disabled: true}}), clk
}

// mustNew builds a middleware; Redis-backed tests get a generous timeout so
// a slow (race-instrumented) run never fails open.
func mustNew(t *testing.T, lim throttle.Limiter, cfg Config) *Middleware {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m, err := New(lim, cfg)
	require.NoError(t, err)
	return m
}

func fixed(name string, n int64, period time.Duration) throttle.Limit {
	return throttle.Limit{Name: name, Algorithm: throttle.FixedWindow, Rate: throttle.Rate{Limit: n, Period: period}}
}

// ok is the wrapped handler: 200 "ok", counting its calls.
type okHandler struct {
	mu    sync.Mutex
	calls int
}

func (h *okHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.calls++
	h.mu.Unlock()
	_, _ = io.WriteString(w, "ok")
}

func (h *okHandler) Calls() int { h.mu.Lock(); defer h.mu.Unlock(); return h.calls }

// userHeader is the test's "authentication": the X-User request header.
func userHeader(r *http.Request) (string, bool) {
	u := r.Header.Get("X-User")
	return u, u != ""
}

// req is one request: its peer and header fields (name, value pairs).
func req(remote string, kv ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/v1/messages", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(kv); i += 2 {
		r.Header.Add(kv[i], kv[i+1])
	}
	return r
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

var limitHeaders = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit", "Retry-After"}

// headers returns the rate-limit fields of a response ("" when absent).
func headers(w *httptest.ResponseRecorder) map[string]string {
	out := map[string]string{}
	for _, k := range limitHeaders {
		if v := w.Header().Values(k); len(v) > 0 {
			out[k] = strings.Join(v, " | ")
		}
	}
	return out
}

func TestHeaders(t *testing.T) {
	lim, clk := newRedis(t)
	next := &okHandler{}
	h := mustNew(t, lim, Config{Limits: []throttle.Limit{fixed("minute", 3, time.Minute), fixed("hour", 4, time.Hour)}}).Handler(next)
	const policy = `"minute";q=3;w=60, "hour";q=4;w=3600`
	steps := []struct {
		at     time.Duration // since t0
		status int
		want   map[string]string
		body   string // checked when not empty
	}{
		{0, 200, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "17", "RateLimit-Policy": policy, "RateLimit": `"minute";r=2;t=17`}, "ok"},
		{0, 200, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "17", "RateLimit-Policy": policy, "RateLimit": `"minute";r=1;t=17`}, ""},
		{0, 200, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "17", "RateLimit-Policy": policy, "RateLimit": `"minute";r=0;t=17`}, ""},
		{0, 429, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "17", "RateLimit-Policy": policy, "RateLimit": `"minute";r=0;t=17`, "Retry-After": "17"},
			`{"error":{"code":"RATE_LIMITED","message":"rate limit exceeded: 3 requests per 1m; retry in 17s","retryAfter":17}}`},
		// 0.999s before the minute ends: rounded up to 1.
		{16*time.Second + time.Millisecond, 429, map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1", "RateLimit-Policy": policy, "RateLimit": `"minute";r=0;t=1`, "Retry-After": "1"},
			`{"error":{"code":"RATE_LIMITED","message":"rate limit exceeded: 3 requests per 1m; retry in 1s","retryAfter":1}}`},
		// A new minute: the hour, with 1 unit left against the minute's 3, binds.
		{17 * time.Second, 200, map[string]string{"X-RateLimit-Limit": "4", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "3540", "RateLimit-Policy": policy, "RateLimit": `"hour";r=0;t=3540`}, "ok"},
		{17 * time.Second, 429, map[string]string{"X-RateLimit-Limit": "4", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "3540", "RateLimit-Policy": policy, "RateLimit": `"hour";r=0;t=3540`, "Retry-After": "3540"},
			`{"error":{"code":"RATE_LIMITED","message":"rate limit exceeded: 4 requests per 1h; retry in 3540s","retryAfter":3540}}`},
	}
	for i, s := range steps {
		clk.Set(t0.Add(s.at))
		w := serve(h, req("203.0.113.7:4711"))
		require.Equal(t, s.status, w.Code, "step %d", i)
		require.Equal(t, s.want, headers(w), "step %d", i)
		if s.body != "" {
			require.Equal(t, s.body, w.Body.String(), "step %d", i)
		}
		if s.status == 429 {
			require.Equal(t, "application/json", w.Header().Get("Content-Type"), "step %d", i)
		}
	}
	require.Equal(t, 4, next.Calls())
}

// TestRetryAfterRounding: sub-second waits round up, to at least 1s.
func TestRetryAfterRounding(t *testing.T) {
	lim, clk := newRedis(t)
	slow := throttle.Limit{Name: "slow", Algorithm: throttle.GCRA, Rate: throttle.Rate{Limit: 1, Period: 1500 * time.Millisecond}}
	h := mustNew(t, lim, Config{Limits: []throttle.Limit{slow}}).Handler(&okHandler{})
	steps := []struct {
		at     time.Duration
		status int
		retry  string // Retry-After
		reset  string // X-RateLimit-Reset, = t
		body   string
	}{
		{0, 200, "", "2", ""},
		{0, 429, "2", "2", `{"error":{"code":"RATE_LIMITED","message":"rate limit exceeded: 1 request per 1500ms; retry in 2s","retryAfter":2}}`},
		{1000 * time.Millisecond, 429, "1", "1", `{"error":{"code":"RATE_LIMITED","message":"rate limit exceeded: 1 request per 1500ms; retry in 1s","retryAfter":1}}`},
		{1499 * time.Millisecond, 429, "1", "1", ""},
		{1500 * time.Millisecond, 200, "", "2", ""},
	}
	for i, s := range steps {
		clk.Set(t0.Add(s.at))
		w := serve(h, req("203.0.113.7:4711"))
		require.Equal(t, s.status, w.Code, "step %d", i)
		require.Equal(t, s.retry, w.Header().Get("Retry-After"), "step %d", i)
		require.Equal(t, s.reset, w.Header().Get("X-RateLimit-Reset"), "step %d", i)
		require.Equal(t, `"slow";r=0;t=`+s.reset, w.Header().Get("RateLimit"), "step %d", i)
		require.Equal(t, `"slow";q=1;w=2`, w.Header().Get("RateLimit-Policy"), "step %d", i)
		if s.body != "" {
			require.Equal(t, s.body, w.Body.String(), "step %d", i)
		}
	}
}

func TestSeconds(t *testing.T) {
	for _, c := range []struct {
		d           time.Duration
		ceil, retry int64
	}{
		{-time.Second, 0, 1},
		{0, 0, 1},
		{time.Nanosecond, 1, 1},
		{999 * time.Millisecond, 1, 1},
		{time.Second, 1, 1},
		{time.Second + time.Nanosecond, 2, 2},
		{17 * time.Second, 17, 17},
		{16*time.Second + time.Microsecond, 17, 17},
	} {
		assert.Equal(t, c.ceil, ceilSeconds(c.d), "ceilSeconds(%v)", c.d)
		assert.Equal(t, c.retry, retrySeconds(c.d), "retrySeconds(%v)", c.d)
	}
}

func TestPolicyHeader(t *testing.T) {
	for _, c := range []struct {
		limit throttle.Limit
		want  string
	}{
		{fixed("minute", 100, time.Minute), `"minute";q=100;w=60`},
		{fixed("day", 10000, 24*time.Hour), `"day";q=10000;w=86400`},
		{throttle.Limit{Name: "burst", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(10), Burst: 20}, `"burst";q=10;w=1`},
		{throttle.Limit{Name: "fast", Algorithm: throttle.GCRA, Rate: throttle.Rate{Limit: 5, Period: 100 * time.Millisecond}}, `"fast";q=5;w=1`},
		{throttle.Limit{Name: "gap", Algorithm: throttle.MinInterval, Interval: 6 * time.Second}, `"gap";q=1;w=6`},
		{throttle.Limit{Name: "inflight", Algorithm: throttle.Concurrency, Max: 8}, `"inflight";q=8;qu="concurrent-requests"`},
		{throttle.Limit{Name: "log", Algorithm: throttle.SlidingWindowLog, Rate: throttle.PerHour(1000)}, `"log";q=1000;w=3600`},
	} {
		assert.Equal(t, c.want, policyItem(c.limit))
	}
	assert.Equal(t, `"a\"b\\c?"`, sfString("a\"b\\c\n"))
}

// fakeLimiter records calls; consume decides (nil: every limit allowed).
type fakeLimiter struct {
	consume func(ctx context.Context, reqs []throttle.Request) (throttle.Decision, error)

	mu       sync.Mutex
	calls    [][]throttle.Request
	released chan []throttle.Lease
}

func (f *fakeLimiter) Consume(ctx context.Context, reqs ...throttle.Request) (throttle.Decision, error) {
	f.mu.Lock()
	f.calls = append(f.calls, reqs)
	f.mu.Unlock()
	if f.consume != nil {
		return f.consume(ctx, reqs)
	}
	return allow(reqs), nil
}

func allow(reqs []throttle.Request) throttle.Decision {
	d := throttle.Decision{Allowed: true, Now: t0}
	for _, r := range reqs {
		d.Limits = append(d.Limits, throttle.LimitDecision{Name: r.Limit.Name, Key: r.Key, Allowed: true, Limit: r.Limit.Capacity(), Remaining: r.Limit.Capacity() - 1, Reset: t0.Add(time.Minute), Taken: 1, Window: r.Limit.Window()})
	}
	return d
}

func (f *fakeLimiter) keys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		for _, r := range c {
			out = append(out, r.Key)
		}
	}
	return out
}

func (f *fakeLimiter) Calls() int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.calls) }

func (f *fakeLimiter) Check(context.Context, ...throttle.Request) (throttle.Decision, error) {
	return throttle.Decision{}, errors.New("unused")
}
func (f *fakeLimiter) Status(context.Context, ...throttle.Request) (throttle.Decision, error) {
	return throttle.Decision{}, errors.New("unused")
}
func (f *fakeLimiter) Release(_ context.Context, leases []throttle.Lease) error {
	if f.released != nil {
		f.released <- leases
	}
	return nil
}
func (f *fakeLimiter) Reset(context.Context, ...string) (int64, error)    { return 0, nil }
func (f *fakeLimiter) ResetPrefix(context.Context, string) (int64, error) { return 0, nil }
func (f *fakeLimiter) List(context.Context, string, uint64, int64) ([]string, uint64, error) {
	return nil, 0, nil
}

func TestKeys(t *testing.T) {
	minute := []throttle.Limit{fixed("minute", 100, time.Minute)}
	trusted := []string{"10.0.0.0/8"}
	cases := []struct {
		name string
		cfg  Config
		r    *http.Request
		want []string
	}{
		{"ip", Config{}, req("203.0.113.7:4711"), []string{"http:minute:ip:203.0.113.7"}},
		{"ip default key", Config{Key: nil}, req("203.0.113.7:4711", "X-User", "alice"), []string{"http:minute:ip:203.0.113.7"}},
		{"ip via trusted proxy", Config{TrustedProxies: trusted}, req("10.0.0.1:80", "X-Forwarded-For", "6.6.6.6, 198.51.100.9"), []string{"http:minute:ip:198.51.100.9"}},
		{"ip, untrusted peer's XFF ignored", Config{TrustedProxies: trusted}, req("203.0.113.7:4711", "X-Forwarded-For", "198.51.100.9"), []string{"http:minute:ip:203.0.113.7"}},
		{"ipv6 /64", Config{}, req("[2001:db8:1:2:3:4:5:6]:443"), []string{"http:minute:ip:2001:db8:1:2::/64"}},
		{"ipv4-mapped", Config{}, req("[::ffff:203.0.113.7]:443"), []string{"http:minute:ip:203.0.113.7"}},
		{"no ip", Config{}, req("@"), []string{"http:minute:ip:unknown"}},
		{"user", Config{Key: ByUser(userHeader)}, req("203.0.113.7:4711", "X-User", "alice"), []string{"http:minute:user:alice"}},
		{"anonymous user falls back to ip", Config{Key: ByUser(userHeader)}, req("203.0.113.7:4711"), []string{"http:minute:ip:203.0.113.7"}},
		{"user escaped", Config{Key: ByUser(userHeader)}, req("203.0.113.7:4711", "X-User", "a:ip:1.2.3.4{x}%"), []string{"http:minute:user:a%3Aip%3A1.2.3.4%7Bx%7D%25"}},
		{"user and ip", Config{Key: ByUserAndIP(userHeader)}, req("203.0.113.7:4711", "X-User", "alice"), []string{"http:minute:user:alice:ip:203.0.113.7"}},
		{"user and ip via proxy", Config{Key: ByUserAndIP(userHeader), TrustedProxies: trusted}, req("10.0.0.1:80", "X-User", "alice", "X-Forwarded-For", "198.51.100.9"), []string{"http:minute:user:alice:ip:198.51.100.9"}},
		{"user and ip, anonymous", Config{Key: ByUserAndIP(userHeader)}, req("203.0.113.7:4711"), []string{"http:minute:ip:203.0.113.7"}},
		{"custom key, empty means ip", Config{Key: func(*http.Request, netip.Addr) string { return "" }}, req("203.0.113.7:4711"), []string{"http:minute:ip:203.0.113.7"}},
		{"custom key", Config{Key: func(r *http.Request, _ netip.Addr) string { return "tenant:" + r.Header.Get("X-Tenant") }}, req("203.0.113.7:4711", "X-Tenant", "acme"), []string{"http:minute:tenant:acme"}},
		{"scope", Config{Scope: "api"}, req("203.0.113.7:4711"), []string{"api:minute:ip:203.0.113.7"}},
		{"two policies", Config{Limits: []throttle.Limit{fixed("minute", 100, time.Minute), fixed("hour", 1000, time.Hour)}}, req("203.0.113.7:4711"),
			[]string{"http:minute:ip:203.0.113.7", "http:hour:ip:203.0.113.7"}},
		{"allowlist", Config{Allowlists: []Allowlist{{Name: "internal", CIDRs: []string{"192.168.0.0/16"}, Limits: []throttle.Limit{fixed("minute", 1000, time.Minute)}}}}, req("192.168.1.2:5000"),
			[]string{"http:minute@internal:ip:192.168.1.2"}},
		{"allowlist default name", Config{Allowlists: []Allowlist{{CIDRs: []string{"192.0.2.1"}, Limits: minute}, {CIDRs: []string{"192.168.0.0/16"}, Limits: minute}}}, req("192.168.1.2:5000"),
			[]string{"http:minute@allowlist1:ip:192.168.1.2"}},
		{"allowlist, client via proxy", Config{TrustedProxies: trusted, Allowlists: []Allowlist{{Name: "office", CIDRs: []string{"198.51.100.0/24"}, Limits: minute}}}, req("10.0.0.1:80", "X-Forwarded-For", "198.51.100.9"),
			[]string{"http:minute@office:ip:198.51.100.9"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeLimiter{}
			if c.cfg.Limits == nil {
				c.cfg.Limits = minute
			}
			w := serve(mustNew(t, f, c.cfg).Handler(&okHandler{}), c.r)
			require.Equal(t, 200, w.Code)
			require.Equal(t, c.want, f.keys())
		})
	}
}

// TestTrustedProxyCounters: behind a trusted proxy, clients are counted by
// the address the proxy saw, whatever they put in X-Forwarded-For; an
// untrusted peer is counted by its own address.
func TestTrustedProxyCounters(t *testing.T) {
	lim, _ := newRedis(t)
	h := mustNew(t, lim, Config{Limits: []throttle.Limit{fixed("minute", 1, time.Minute)}, TrustedProxies: []string{"10.0.0.0/8"}}).Handler(&okHandler{})
	steps := []struct {
		name   string
		r      *http.Request
		status int
	}{
		{"client via proxy", req("10.0.0.1:80", "X-Forwarded-For", "203.0.113.7"), 200},
		{"same client, spoofed left entry", req("10.0.0.1:80", "X-Forwarded-For", "1.1.1.1, 203.0.113.7"), 429},
		{"same client, two proxies", req("10.0.0.2:80", "X-Forwarded-For", "2.2.2.2, 203.0.113.7, 10.0.0.1"), 429},
		{"same client, split field lines", req("10.0.0.2:80", "X-Forwarded-For", "3.3.3.3", "X-Forwarded-For", "203.0.113.7, 10.0.0.1"), 429},
		{"other client via proxy", req("10.0.0.1:80", "X-Forwarded-For", "198.51.100.9"), 200},
		{"untrusted peer", req("192.0.2.50:4711", "X-Forwarded-For", "203.0.113.99"), 200},
		{"untrusted peer, other XFF", req("192.0.2.50:4711", "X-Forwarded-For", "203.0.113.100"), 429},
		{"untrusted peer claiming a limited client", req("192.0.2.51:4711", "X-Forwarded-For", "198.51.100.9"), 200},
	}
	for _, s := range steps {
		w := serve(h, s.r)
		require.Equal(t, s.status, w.Code, s.name)
	}
}

func TestBypass(t *testing.T) {
	f := &fakeLimiter{}
	next := &okHandler{}
	var bypassIP netip.Addr
	m := mustNew(t, f, Config{
		Limits:         []throttle.Limit{fixed("minute", 100, time.Minute)},
		TrustedProxies: []string{"10.0.0.0/8"},
		Bypass: func(r *http.Request) bool {
			bypassIP = ClientIP(r)
			return r.Header.Get("X-Role") == "admin"
		},
	})
	h := m.Handler(next)

	w := serve(h, req("10.0.0.1:80", "X-Role", "admin", "X-Forwarded-For", "203.0.113.7"))
	require.Equal(t, 200, w.Code)
	require.Equal(t, "ok", w.Body.String())
	require.Empty(t, headers(w))
	require.Equal(t, 0, f.Calls())
	require.Equal(t, 1, next.Calls())
	require.Equal(t, netip.MustParseAddr("203.0.113.7"), bypassIP)

	w = serve(h, req("10.0.0.1:80", "X-Role", "user", "X-Forwarded-For", "203.0.113.7"))
	require.Equal(t, 200, w.Code)
	require.Equal(t, "100", w.Header().Get("X-RateLimit-Limit"))
	require.Equal(t, 1, f.Calls())
	require.Equal(t, 2, next.Calls())
}

// TestAllowlist: clients in an allowlist get its higher limit, on counters
// of their own.
func TestAllowlist(t *testing.T) {
	lim, _ := newRedis(t)
	h := mustNew(t, lim, Config{
		Limits: []throttle.Limit{fixed("minute", 1, time.Minute)},
		Key:    ByUser(userHeader),
		Allowlists: []Allowlist{{
			Name:   "internal",
			CIDRs:  []string{"192.168.0.0/16", "fd00::/8"},
			Limits: []throttle.Limit{fixed("minute", 3, time.Minute)},
		}},
	}).Handler(&okHandler{})
	steps := []struct {
		name      string
		r         *http.Request
		status    int
		limit     string
		remaining string
	}{
		{"alice internal 1", req("192.168.1.2:5000", "X-User", "alice"), 200, "3", "2"},
		{"alice internal 2", req("192.168.1.2:5000", "X-User", "alice"), 200, "3", "1"},
		{"alice public: the default counter is untouched", req("203.0.113.7:4711", "X-User", "alice"), 200, "1", "0"},
		{"alice public again", req("203.0.113.7:4711", "X-User", "alice"), 429, "1", "0"},
		{"alice internal 3: not charged for the public requests", req("[fd00::1]:5000", "X-User", "alice"), 200, "3", "0"},
		{"alice internal 4", req("192.168.1.2:5000", "X-User", "alice"), 429, "3", "0"},
		{"bob internal", req("192.168.1.2:5000", "X-User", "bob"), 200, "3", "2"},
		{"anonymous internal", req("192.168.1.2:5000"), 200, "3", "2"},
		{"anonymous public", req("203.0.113.7:4711"), 200, "1", "0"},
	}
	for _, s := range steps {
		w := serve(h, s.r)
		require.Equal(t, s.status, w.Code, s.name)
		require.Equal(t, s.limit, w.Header().Get("X-RateLimit-Limit"), s.name)
		require.Equal(t, s.remaining, w.Header().Get("X-RateLimit-Remaining"), s.name)
	}
	w := serve(h, req("192.168.1.2:5000", "X-User", "carol"))
	require.Equal(t, `"minute";q=3;w=60`, w.Header().Get("RateLimit-Policy"))
	w = serve(h, req("203.0.113.8:4711", "X-User", "carol"))
	require.Equal(t, `"minute";q=1;w=60`, w.Header().Get("RateLimit-Policy"))
}

// TestConcurrency: a Concurrency lease is held while the handler runs and
// released when it returns.
func TestConcurrency(t *testing.T) {
	lim, _ := newRedis(t)
	var h http.Handler
	var inner *httptest.ResponseRecorder
	h = mustNew(t, lim, Config{Limits: []throttle.Limit{{Name: "inflight", Algorithm: throttle.Concurrency, Max: 1}}}).
		Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Nested") == "" {
				inner = serve(h, req("203.0.113.7:4711", "X-Nested", "1"))
			}
			_, _ = io.WriteString(w, "ok")
		}))
	w := serve(h, req("203.0.113.7:4711"))
	require.Equal(t, 200, w.Code)
	require.Equal(t, `"inflight";q=1;qu="concurrent-requests"`, w.Header().Get("RateLimit-Policy"))
	require.Equal(t, "0", w.Header().Get("X-RateLimit-Remaining"))
	require.NotNil(t, inner)
	require.Equal(t, 429, inner.Code, "a second request while the first runs")
	require.Equal(t, `{"error":{"code":"RATE_LIMITED","message":"rate limit exceeded: 1 concurrent request; retry in 1s","retryAfter":1}}`, inner.Body.String())
	// The clock stands still, so only a release frees the slot.
	require.Equal(t, 200, serve(h, req("203.0.113.7:4711", "X-Nested", "1")).Code)
}

func blockUntilDone(ctx context.Context, _ []throttle.Request) (throttle.Decision, error) {
	<-ctx.Done()
	return throttle.Decision{}, ctx.Err()
}

// backendErrors reads sluice_httplimit_backend_errors_total from g: its
// value per mode label.
func backendErrors(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_httplimit_backend_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			require.Len(t, m.GetLabel(), 1)
			require.Equal(t, "mode", m.GetLabel()[0].GetName())
			out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	return out
}

func TestFailOpen(t *testing.T) {
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	cases := []struct {
		name    string
		consume func(context.Context, []throttle.Request) (throttle.Decision, error)
	}{
		{"error", func(context.Context, []throttle.Request) (throttle.Decision, error) {
			return throttle.Decision{}, errors.New("dial tcp 10.0.0.9:6379: connect: connection refused")
		}},
		{"times out", blockUntilDone},
		// A limiter deaf to its context (go-redis without
		// ContextTimeoutEnabled) is cut off by the middleware's own timer.
		{"ignores its context", func(context.Context, []throttle.Request) (throttle.Decision, error) {
			<-stuck
			return throttle.Decision{}, errors.New("too late")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			var logs bytes.Buffer
			next := &okHandler{}
			m := mustNew(t, &fakeLimiter{consume: c.consume}, Config{
				Limits:     []throttle.Limit{fixed("minute", 100, time.Minute)},
				Timeout:    20 * time.Millisecond,
				Registerer: reg,
				Logger:     slog.New(slog.NewTextHandler(&logs, nil)),
			})
			start := time.Now()
			w := serve(m.Handler(next), req("203.0.113.7:4711"))
			elapsed := time.Since(start)
			require.Equal(t, 200, w.Code)
			require.Equal(t, "ok", w.Body.String())
			require.Empty(t, headers(w), "no rate-limit fields when failing open")
			require.Equal(t, 1, next.Calls())
			require.Less(t, elapsed, 5*time.Second, "bounded by the 20ms timeout, not by the limiter")
			require.EqualValues(t, 1, m.BackendErrors())
			require.Equal(t, map[string]float64{"open": 1}, backendErrors(t, reg))
			require.Contains(t, logs.String(), "level=ERROR")
			require.Contains(t, logs.String(), "mode=open")
		})
	}
}

func TestFailClosed(t *testing.T) {
	for _, consume := range []func(context.Context, []throttle.Request) (throttle.Decision, error){
		func(context.Context, []throttle.Request) (throttle.Decision, error) {
			return throttle.Decision{}, errors.New("connection refused")
		},
		blockUntilDone,
	} {
		reg := prometheus.NewPedanticRegistry()
		next := &okHandler{}
		m := mustNew(t, &fakeLimiter{consume: consume}, Config{
			Limits:     []throttle.Limit{fixed("minute", 100, time.Minute)},
			FailClosed: true,
			Timeout:    20 * time.Millisecond,
			Registerer: reg,
		})
		w := serve(m.Handler(next), req("203.0.113.7:4711"))
		require.Equal(t, 503, w.Code)
		require.Equal(t, `{"error":{"code":"RATE_LIMIT_UNAVAILABLE","message":"rate limiting is temporarily unavailable; retry in 1s"}}`, w.Body.String())
		require.Equal(t, "application/json", w.Header().Get("Content-Type"))
		require.Equal(t, map[string]string{"Retry-After": "1"}, headers(w))
		require.Equal(t, 0, next.Calls())
		require.EqualValues(t, 1, m.BackendErrors())
		require.Equal(t, map[string]float64{"closed": 1}, backendErrors(t, reg))
	}
}

// TestClientGone: a request whose client went away is not a backend error.
func TestClientGone(t *testing.T) {
	next := &okHandler{}
	m := mustNew(t, &fakeLimiter{consume: blockUntilDone}, Config{Limits: []throttle.Limit{fixed("minute", 100, time.Minute)}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w := serve(m.Handler(next), req("203.0.113.7:4711").WithContext(ctx))
	require.Equal(t, 0, next.Calls())
	require.Empty(t, headers(w))
	require.EqualValues(t, 0, m.BackendErrors())
}

// TestLateLeasesReleased: leases of an answer that came after the timeout
// are released, not held until they expire.
func TestLateLeasesReleased(t *testing.T) {
	answer := make(chan struct{})
	f := &fakeLimiter{released: make(chan []throttle.Lease, 1)}
	f.consume = func(ctx context.Context, reqs []throttle.Request) (throttle.Decision, error) {
		<-answer
		d := allow(reqs)
		d.Leases = []throttle.Lease{{Key: reqs[0].Key, ID: "late"}}
		return d, nil
	}
	m := mustNew(t, f, Config{Limits: []throttle.Limit{{Name: "inflight", Algorithm: throttle.Concurrency, Max: 4}}, Timeout: 10 * time.Millisecond})
	w := serve(m.Handler(&okHandler{}), req("203.0.113.7:4711"))
	require.Equal(t, 200, w.Code, "failed open")
	close(answer)
	require.Equal(t, []throttle.Lease{{Key: "http:inflight:ip:203.0.113.7", ID: "late"}}, <-f.released)
}

// TestLogThrottled: a dead backend logs once per second, not per request.
func TestLogThrottled(t *testing.T) {
	var logs bytes.Buffer
	m := mustNew(t, &fakeLimiter{consume: func(context.Context, []throttle.Request) (throttle.Decision, error) {
		return throttle.Decision{}, errors.New("down")
	}}, Config{Limits: []throttle.Limit{fixed("minute", 100, time.Minute)}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	clk := testutil.NewClock(t0)
	m.now = clk.Now
	h := m.Handler(&okHandler{})
	for range 3 {
		serve(h, req("203.0.113.7:4711"))
	}
	clk.Advance(time.Second)
	serve(h, req("203.0.113.7:4711"))
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 2)
	require.Contains(t, lines[0], "suppressed=0")
	require.Contains(t, lines[1], "suppressed=2")
	require.EqualValues(t, 4, m.BackendErrors())
}

func TestSharedRegisterer(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	down := &fakeLimiter{consume: func(context.Context, []throttle.Request) (throttle.Decision, error) {
		return throttle.Decision{}, errors.New("down")
	}}
	cfg := Config{Limits: []throttle.Limit{fixed("minute", 100, time.Minute)}, Registerer: reg}
	a, b := mustNew(t, down, cfg), mustNew(t, down, cfg)
	serve(a.Handler(&okHandler{}), req("203.0.113.7:4711"))
	serve(b.Handler(&okHandler{}), req("203.0.113.7:4711"))
	require.Equal(t, map[string]float64{"open": 2}, backendErrors(t, reg))

	clash := prometheus.NewRegistry()
	clash.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_httplimit_backend_errors_total", Help: "x"}))
	_, err := New(down, Config{Limits: cfg.Limits, Registerer: clash})
	require.ErrorContains(t, err, "httplimit: Registerer")
}

func TestNewErrors(t *testing.T) {
	minute := []throttle.Limit{fixed("minute", 100, time.Minute)}
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no limits", Config{}, "httplimit: Limits: empty"},
		{"bad trusted CIDR", Config{Limits: minute, TrustedProxies: []string{"10.0.0.0/8", "10.0.0.0/33"}}, `httplimit: TrustedProxies[1] "10.0.0.0/33": want an IP address or CIDR prefix`},
		{"trusted hostname", Config{Limits: minute, TrustedProxies: []string{"proxy.internal"}}, `httplimit: TrustedProxies[0] "proxy.internal"`},
		{"bad allowlist CIDR", Config{Limits: minute, Allowlists: []Allowlist{{CIDRs: []string{"10.0.0.0/8", "300.0.0.0/8"}, Limits: minute}}}, `httplimit: Allowlists[0].CIDRs[1] "300.0.0.0/8"`},
		{"allowlist without CIDRs", Config{Limits: minute, Allowlists: []Allowlist{{Limits: minute}}}, "httplimit: Allowlists[0].CIDRs: empty"},
		{"allowlist without limits", Config{Limits: minute, Allowlists: []Allowlist{{CIDRs: []string{"10.0.0.0/8"}}}}, "httplimit: Allowlists[0].Limits: empty"},
		{"allowlist bad limit", Config{Limits: minute, Allowlists: []Allowlist{{CIDRs: []string{"10.0.0.0/8"}, Limits: []throttle.Limit{fixed("m", 100, 7*time.Second)}}}}, `httplimit: Allowlists[0].Limits[0]: limit "m": rate 100/7s`},
		{"allowlist names clash", Config{Limits: minute, Allowlists: []Allowlist{{Name: "a", CIDRs: []string{"10.0.0.0/8"}, Limits: minute}, {Name: "a", CIDRs: []string{"192.168.0.0/16"}, Limits: minute}}}, `httplimit: Allowlists[1].Name "a": used by an earlier allowlist`},
		{"allowlist bad name", Config{Limits: minute, Allowlists: []Allowlist{{Name: "a b", CIDRs: []string{"10.0.0.0/8"}, Limits: minute}}}, `httplimit: Allowlists[0].Name "a b"`},
		{"duplicate limit names", Config{Limits: []throttle.Limit{fixed("m", 1, time.Minute), fixed("m", 10, time.Hour)}}, `httplimit: Limits[1].Name "m": used by an earlier limit`},
		{"limit name with quote", Config{Limits: []throttle.Limit{fixed(`m"`, 1, time.Minute)}}, `httplimit: Limits[0].Name "m\""`},
		{"unnamed limit", Config{Limits: []throttle.Limit{fixed("", 1, time.Minute)}}, `httplimit: Limits[0].Name ""`},
		{"invalid limit", Config{Limits: []throttle.Limit{{Name: "g", Algorithm: throttle.GCRA}}}, `httplimit: Limits[0]: limit "g": rate`},
		{"distinct", Config{Limits: []throttle.Limit{{Name: "d", Algorithm: throttle.Distinct, Rate: throttle.PerDay(10)}}}, `httplimit: Limits[0] "d": algorithm distinct is not supported`},
		{"bad scope", Config{Limits: minute, Scope: "a:b"}, `httplimit: Scope "a:b"`},
		{"reserved scope", Config{Limits: minute, Scope: "_x"}, `httplimit: Scope "_x"`},
		{"negative timeout", Config{Limits: minute, Timeout: -time.Second}, "httplimit: Timeout -1s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(&fakeLimiter{}, c.cfg)
			require.ErrorContains(t, err, c.want)
		})
	}
	_, err := New(nil, Config{Limits: minute})
	require.ErrorContains(t, err, "nil Limiter")
	require.Panics(t, func() { ByUser(nil) })
}
