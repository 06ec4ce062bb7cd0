package channels

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluice-dev/sluice/internal/dnstest"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/tasks"
)

// counting is a receiver that counts the requests that reach it.
func counting(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { n.Add(1) }))
	t.Cleanup(srv.Close)
	return srv, &n
}

// The targets of issue 7 and their siblings: every one must be refused by
// the zero Egress before any connection, webhook and HTTP call alike.
var refusedTargets = []string{
	"http://127.0.0.1/", "http://localhost/", "http://[::1]/", "http://0.0.0.0/",
	"http://10.0.0.1/", "http://169.254.169.254/latest/meta-data/", "http://192.168.1.1/",
	"http://[fd00::1]/", "http://[::ffff:169.254.169.254]/", "http://[::ffff:127.0.0.1]:8080/",
	"http://100.64.0.1/", "http://172.16.5.4/", "http://224.0.0.1/", "http://255.255.255.255/",
	"http://[fe80::1%25eth0]/", "http://[ff02::1]/", "http://[::]/", "http://[fec0::1]/",
	"http://[64:ff9b::a9fe:a9fe]/", "http://[2002:7f00:1::1]/", "http://[::127.0.0.1]/",
	"http://2130706433/", "http://0x7f000001/", "http://127.1/", "http://0177.0.0.1/", "http://127.0.0.1./",
	"http://LOCALHOST/", "http://api.localhost/", "http://localhost./",
}

func TestEgressRefusesPrivateTargets(t *testing.T) {
	ctx := context.Background()
	for _, target := range refusedTargets {
		wh := &Webhook{Secrets: func(string) ([]string, error) { return []string{testSecret}, nil }}
		_, err := wh.Deliver(ctx, tasks.WebhookDeliver{URL: target, EventType: "e", Payload: json.RawMessage(`{}`), IdempotencyKey: "k"})
		requireRefused(t, target, err)
		_, err = (&HTTPCaller{}).Call(ctx, tasks.HTTPCall{Method: "GET", URL: target})
		requireRefused(t, target, err)
	}
	// Allow admits exactly what it names, the IPv4-mapped form included.
	allow := Egress{Allow: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("169.254.169.254/32")}}
	for _, ok := range []string{"http://10.1.2.3/", "http://[::ffff:10.1.2.3]/", "http://169.254.169.254/", "http://example.com/", "https://93.184.216.34/"} {
		require.NoError(t, allow.CheckURL(ok), ok)
	}
	for _, no := range []string{"http://10.2.0.1/", "http://169.254.169.253/", "http://localhost/"} {
		require.Error(t, allow.CheckURL(no), no)
	}
}

func requireRefused(t *testing.T, target string, err error) {
	t.Helper()
	var e *Error
	require.ErrorAs(t, err, &e, target)
	require.Equal(t, Permanent, e.Class, "%s: %v", target, err)
	var ee *EgressError
	require.ErrorAs(t, err, &ee, target)
	require.Contains(t, err.Error(), "refused: ", target)
}

// fakeDNS is a resolver whose every A or AAAA answer is addr, served in
// process (dnstest): the test reaches no DNS server.
func fakeDNS(addr netip.Addr, lookups *atomic.Int64) *net.Resolver {
	return dnstest.Server{Fallback: addr, Lookups: lookups}.Resolver()
}

// TestEgressChecksTheDialledAddress: a name passes CheckURL (it is not an
// address), so what stops it is the check at dial time, on the address the
// resolver answered. The name resolves to the loopback receiver: refused
// with the zero Egress, delivered when Allow admits loopback.
func TestEgressChecksTheDialledAddress(t *testing.T) {
	srv, hits := counting(t)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	target := "http://rebind.example.com:" + strconv.Itoa(port) + "/hook"
	var lookups atomic.Int64
	res := fakeDNS(netip.MustParseAddr("127.0.0.1"), &lookups)
	ctx := context.Background()

	refuse := Egress{Resolver: res}
	require.NoError(t, refuse.CheckURL(target), "a name passes the URL check; the dial decides")
	_, err := (&HTTPCaller{Egress: refuse}).Call(ctx, tasks.HTTPCall{Method: "GET", URL: target})
	requireRefused(t, target, err)
	require.Contains(t, err.Error(), "rebind.example.com (127.0.0.1) refused: loopback")
	wh := &Webhook{Egress: refuse, Secrets: func(string) ([]string, error) { return []string{testSecret}, nil }}
	_, err = wh.Deliver(ctx, tasks.WebhookDeliver{URL: target, EventType: "e", Payload: json.RawMessage(`{}`), IdempotencyKey: "k"})
	requireRefused(t, target, err)
	require.Zero(t, hits.Load(), "no request may reach the receiver")
	require.Positive(t, lookups.Load(), "the fake resolver answered")

	allow := Egress{Resolver: res, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	_, err = (&HTTPCaller{Egress: allow}).Call(ctx, tasks.HTTPCall{Method: "GET", URL: target})
	require.NoError(t, err)
	require.EqualValues(t, 1, hits.Load())
}

// TestEgressErrorIsBounded: a refused host is shown at most 64 bytes long,
// whatever the payload allowed.
func TestEgressErrorIsBounded(t *testing.T) {
	for _, host := range []string{strings.Repeat("1", 1<<20), strings.Repeat("a", 1<<20) + ".localhost"} {
		err := Egress{}.CheckURL("http://" + host + "/")
		require.Error(t, err)
		require.Less(t, len(err.Error()), 400, "the error does not repeat a 1 MB host")
	}
}

// TestEgressClientRefusesWithoutURLCheck: NewEgressHTTPClient on its own
// (as a library user would pass it in HTTP) refuses at dial time.
func TestEgressClientRefusesWithoutURLCheck(t *testing.T) {
	srv, hits := counting(t)
	resp, err := NewEgressHTTPClient(Egress{}).Get(srv.URL)
	if resp != nil {
		resp.Body.Close()
	}
	var ee *EgressError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, netip.MustParseAddr("127.0.0.1"), ee.Addr)
	require.Zero(t, hits.Load())
}

// stdlibRefuses is an oracle written from net/netip's own predicates, not
// from Egress's table: every address it names must be refused.
func stdlibRefuses(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() ||
		netip.MustParsePrefix("100.64.0.0/10").Contains(a) || netip.MustParsePrefix("0.0.0.0/8").Contains(a)
}

func FuzzEgressCheckAddr(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "::ffff:169.254.169.254", "fd00::1", "8.8.8.8", "2606:4700::1111", "64:ff9b::a00:1", "2002:c0a8:101::"} {
		f.Add(netip.MustParseAddr(s).AsSlice())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a, ok := netip.AddrFromSlice(b)
		if !ok {
			return
		}
		err := Egress{}.CheckAddr(a)
		if stdlibRefuses(a) && err == nil {
			t.Fatalf("CheckAddr(%v) = nil; net/netip calls it loopback, private, link-local, multicast or unspecified", a)
		}
		if err != nil && !errors.As(err, new(*EgressError)) {
			t.Fatalf("CheckAddr(%v) = %v, not an *EgressError", a, err)
		}
	})
}

func FuzzEgressCheckURL(f *testing.F) {
	for _, s := range refusedTargets {
		f.Add(s)
	}
	f.Add("https://example.com/x?y=z")
	f.Add("http://[2001:db8::1]:80/")
	f.Fuzz(func(t *testing.T, raw string) {
		err := Egress{}.CheckURL(raw)
		if err != nil {
			if strings.Contains(raw, "?") && strings.Contains(err.Error(), raw[strings.Index(raw, "?"):]) && len(raw)-strings.Index(raw, "?") > 8 {
				t.Fatalf("CheckURL(%q) error shows the query: %v", raw, err)
			}
			return
		}
		// Accepted: the host is a name (checked when dialled) or an address
		// the oracle does not refuse.
		host := raw[strings.Index(raw, "://")+3:]
		if i := strings.IndexAny(host, "/?#"); i >= 0 {
			host = host[:i]
		}
		if i := strings.LastIndexByte(host, '@'); i >= 0 {
			host = host[i+1:]
		}
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil && stdlibRefuses(a) {
			t.Fatalf("CheckURL(%q) = nil for %v", raw, a)
		}
	})
}
