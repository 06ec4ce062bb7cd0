package httplimit

import (
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/throttle"
)

func TestClientIP(t *testing.T) {
	trusted := []string{"10.0.0.0/8", "192.0.2.1", "2001:db8:ffff::/48"}
	cases := []struct {
		name    string
		trusted []string
		realIP  bool
		r       *http.Request
		want    string // "" = the zero Addr
	}{
		{"peer", trusted, false, req("203.0.113.7:4711"), "203.0.113.7"},
		{"peer without port", trusted, false, req("203.0.113.7"), "203.0.113.7"},
		{"ipv6 peer", trusted, false, req("[2001:db8::7]:4711"), "2001:db8::7"},
		{"ipv4-mapped peer", trusted, false, req("[::ffff:203.0.113.7]:4711"), "203.0.113.7"},
		{"peer with zone", trusted, false, req("[fe80::1%eth0]:4711"), "fe80::1"},
		{"no ip in RemoteAddr", trusted, false, req("@"), ""},
		{"untrusted peer's XFF ignored", trusted, false, req("203.0.113.7:4711", "X-Forwarded-For", "198.51.100.9"), "203.0.113.7"},
		{"untrusted peer's X-Real-IP ignored", trusted, true, req("203.0.113.7:4711", "X-Real-IP", "198.51.100.9"), "203.0.113.7"},
		{"no trusted proxies: XFF ignored", nil, false, req("10.0.0.1:80", "X-Forwarded-For", "198.51.100.9"), "10.0.0.1"},
		{"trusted peer, one hop", trusted, false, req("10.0.0.1:80", "X-Forwarded-For", "198.51.100.9"), "198.51.100.9"},
		{"trusted single address", trusted, false, req("192.0.2.1:80", "X-Forwarded-For", "198.51.100.9"), "198.51.100.9"},
		{"spoofed left entries ignored", trusted, false, req("10.0.0.1:80", "X-Forwarded-For", "1.1.1.1, 2.2.2.2,198.51.100.9"), "198.51.100.9"},
		{"trusted hops skipped", trusted, false, req("10.0.0.1:80", "X-Forwarded-For", "1.1.1.1, 198.51.100.9, 10.0.0.3, 10.0.0.2"), "198.51.100.9"},
		{"several field lines, in order", trusted, false, req("10.0.0.1:80", "X-Forwarded-For", "1.1.1.1, 198.51.100.9", "X-Forwarded-For", "10.0.0.3,10.0.0.2"), "198.51.100.9"},
		{"client in the last line", trusted, false, req("10.0.0.1:80", "X-Forwarded-For", "10.0.0.9", "X-Forwarded-For", "198.51.100.9"), "198.51.100.9"},
		{"entries with ports", trusted, false, req("10.0.0.1:80", "X-Forwarded-For", "1.1.1.1, 198.51.100.9:5555, 10.0.0.2:80"), "198.51.100.9"},
		{"ipv6 entries", trusted, false, req("[2001:db8:ffff::1]:443", "X-Forwarded-For", "2001:db8::bad, [2001:db8:1::9]:443, 2001:db8:ffff::2"), "2001:db8:1::9"},
		{"ipv4-mapped entry", trusted, false, req("10.0.0.1:80", "X-Forwarded-For", "::ffff:198.51.100.9"), "198.51.100.9"},
		{"ipv4-mapped trusted hop", trusted, false, req("10.0.0.1:80", "X-Forwarded-For", "198.51.100.9, ::ffff:10.0.0.2"), "198.51.100.9"},
		{"junk left of the client ignored", trusted, false, req("10.0.0.1:80", "X-Forwarded-For", "<script>, unknown, 198.51.100.9"), "198.51.100.9"},
		{"junk ends the walk at the last trusted hop", trusted, false, req("10.0.0.1:80", "X-Forwarded-For", "198.51.100.9, unknown, 10.0.0.2"), "10.0.0.2"},
		{"junk right after the peer: the peer", trusted, false, req("10.0.0.1:80", "X-Forwarded-For", "198.51.100.9, unknown"), "10.0.0.1"},
		{"empty entry ends the walk", trusted, false, req("10.0.0.1:80", "X-Forwarded-For", "198.51.100.9,"), "10.0.0.1"},
		{"hostname is junk", trusted, false, req("10.0.0.1:80", "X-Forwarded-For", "198.51.100.9, proxy.example"), "10.0.0.1"},
		{"bracketed ipv4 is junk", trusted, false, req("10.0.0.1:80", "X-Forwarded-For", "198.51.100.9, [203.0.113.7]"), "10.0.0.1"},
		{"all hops trusted: the left-most", trusted, false, req("10.0.0.1:80", "X-Forwarded-For", "10.0.0.3, 10.0.0.2"), "10.0.0.3"},
		{"trusted peer, no XFF", trusted, false, req("10.0.0.1:80"), "10.0.0.1"},
		{"X-Real-IP off", trusted, false, req("10.0.0.1:80", "X-Real-IP", "198.51.100.9"), "10.0.0.1"},
		{"X-Real-IP from a trusted peer", trusted, true, req("10.0.0.1:80", "X-Real-IP", " 198.51.100.9 "), "198.51.100.9"},
		{"X-Real-IP junk", trusted, true, req("10.0.0.1:80", "X-Real-IP", "unknown"), "10.0.0.1"},
		{"XFF wins over X-Real-IP", trusted, true, req("10.0.0.1:80", "X-Real-IP", "1.1.1.1", "X-Forwarded-For", "198.51.100.9"), "198.51.100.9"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := mustNew(t, &fakeLimiter{}, Config{Limits: []throttle.Limit{fixed("minute", 1, time.Minute)}, TrustedProxies: c.trusted, TrustXRealIP: c.realIP})
			var want netip.Addr
			if c.want != "" {
				want = netip.MustParseAddr(c.want)
			}
			require.Equal(t, want, m.ClientIP(c.r))

			// Handlers behind the middleware see the same address.
			var seen netip.Addr
			m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = ClientIP(r) })).ServeHTTP(nopWriter{}, c.r)
			require.Equal(t, want, seen)
		})
	}
}

// TestClientIPWithoutMiddleware: outside a Middleware, ClientIP is the peer.
func TestClientIPWithoutMiddleware(t *testing.T) {
	r := req("10.0.0.1:80", "X-Forwarded-For", "198.51.100.9", "X-Real-IP", "198.51.100.9")
	require.Equal(t, netip.MustParseAddr("10.0.0.1"), ClientIP(r))
	require.False(t, ClientIP(req("not an address")).IsValid())
}

func TestParsePrefixes(t *testing.T) {
	got, err := parsePrefixes("X", []string{"10.1.2.3/8", " 192.0.2.1 ", "2001:db8::/32", "::ffff:172.16.0.0/108", "2001:db8::1"})
	require.NoError(t, err)
	want := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("192.0.2.1/32"),
		netip.MustParsePrefix("2001:db8::/32"),
		netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("2001:db8::1/128"),
	}
	require.Equal(t, want, got)
	for _, bad := range []string{"", "10.0.0.0/33", "10.0.0/8", "fe80::1%eth0", "example.com", "10.0.0.0/8,192.0.2.0/24"} {
		_, err := parsePrefixes("X", []string{bad})
		require.Error(t, err, "%q", bad)
		require.Contains(t, err.Error(), "X[0]")
	}
}

type nopWriter struct{}

func (nopWriter) Header() http.Header         { return http.Header{} }
func (nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (nopWriter) WriteHeader(int)             {}
