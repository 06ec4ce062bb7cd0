package channels

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
)

// Egress says which addresses webhook deliveries and HTTP calls may connect
// to. Their target URLs come from tasks, that is from whoever can enqueue, so
// a target must not reach the worker's own host, its network or the cloud
// metadata service (server-side request forgery, OWASP SSRF Prevention Cheat
// Sheet).
//
// The zero value refuses every address in these ranges, each named with its
// RFC in the error: loopback, private (RFC 1918), carrier-grade NAT (RFC 6598), link-local
// (169.254.0.0/16 holds the metadata service, fe80::/10), unique-local
// (fc00::/7), multicast, unspecified, reserved and documentation ranges, and
// IPv6 forms that embed an IPv4 address (IPv4-mapped ::ffff:0:0/96, NAT64
// 64:ff9b::/96, 6to4 2002::/16) when the embedded address is refused.
// Allow admits chosen CIDRs on top.
//
// The check runs three times: CheckTarget at enqueue, on the URL's literal
// host and on the addresses its name resolves to, for an early error;
// CheckURL on the literal host before a request; and the dialer of
// NewEgressHTTPClient on the address actually dialled, after name
// resolution. The last is what counts: a DNS answer that changes between
// enqueue and the dial (DNS rebinding) is refused there.
type Egress struct {
	// Allow lists CIDRs that may be reached even though a refused range holds
	// them: "127.0.0.0/8" for a receiver on the same host, "10.1.2.0/24" for
	// an internal service. An IPv4 prefix also admits the address's
	// IPv4-mapped IPv6 form. Empty: nothing is admitted.
	Allow []netip.Prefix
	// Resolver looks up target names for CheckTarget and for
	// NewEgressHTTPClient's dialer; nil means net.DefaultResolver. Whatever
	// it answers, the dialled address is checked.
	Resolver *net.Resolver
}

// EgressError is the error for a refused target. Deliver and Call return it
// inside a Permanent *Error, so the task is archived with this text as the
// reason.
type EgressError struct {
	// Host is the target's host name or address as the URL gives it, without
	// port or brackets ("10.0.0.1", "metadata.internal", "::1").
	Host string
	// Addr is the refused address: the literal, or the address the host
	// resolved to; invalid when the host name itself is refused (localhost,
	// a numeric form such as 2130706433).
	Addr netip.Addr
	// Range names what the address is: "loopback (127.0.0.0/8)".
	Range string
}

// maxShownHost bounds the host an EgressError shows (a URL's host can be
// as long as the payload allows).
const maxShownHost = 64

func (e *EgressError) Error() string {
	var b strings.Builder
	b.WriteString("target ")
	if len(e.Host) > maxShownHost {
		fmt.Fprintf(&b, "%.*q…", maxShownHost, e.Host)
	} else {
		b.WriteString(e.Host)
	}
	if e.Addr.IsValid() && e.Addr.String() != e.Host {
		b.WriteString(" (")
		b.WriteString(e.Addr.String())
		b.WriteString(")")
	}
	b.WriteString(" refused: ")
	b.WriteString(e.Range)
	b.WriteString("; outbound requests may not reach this host's own or private networks unless egress.allow_cidrs admits the address")
	return b.String()
}

// refusedRange is one range CheckAddr refuses.
type refusedRange struct {
	prefix netip.Prefix
	name   string
}

// refused is the table of refused ranges, most specific first within a family.
// Sources: IANA IPv4 and IPv6 Special-Purpose Address Registries (RFC 6890).
var refused = func() []refusedRange {
	rows := []struct{ cidr, name string }{
		{"0.0.0.0/8", "unspecified or \"this network\" (0.0.0.0/8, RFC 1122)"},
		{"10.0.0.0/8", "private (10.0.0.0/8, RFC 1918)"},
		{"100.64.0.0/10", "carrier-grade NAT (100.64.0.0/10, RFC 6598)"},
		{"127.0.0.0/8", "loopback (127.0.0.0/8)"},
		{"169.254.0.0/16", "link-local, holds cloud metadata services (169.254.0.0/16, RFC 3927)"},
		{"172.16.0.0/12", "private (172.16.0.0/12, RFC 1918)"},
		{"192.0.0.0/24", "IETF protocol assignments (192.0.0.0/24, RFC 6890)"},
		{"192.0.2.0/24", "documentation (192.0.2.0/24, RFC 5737)"},
		{"192.88.99.0/24", "6to4 relay anycast (192.88.99.0/24, RFC 7526)"},
		{"192.168.0.0/16", "private (192.168.0.0/16, RFC 1918)"},
		{"198.18.0.0/15", "benchmarking (198.18.0.0/15, RFC 2544)"},
		{"198.51.100.0/24", "documentation (198.51.100.0/24, RFC 5737)"},
		{"203.0.113.0/24", "documentation (203.0.113.0/24, RFC 5737)"},
		{"224.0.0.0/4", "multicast (224.0.0.0/4)"},
		{"240.0.0.0/4", "reserved or broadcast (240.0.0.0/4)"},
		{"::/128", "unspecified (::)"},
		{"::1/128", "loopback (::1)"},
		{"::/96", "IPv4-compatible, deprecated (::/96, RFC 4291)"},
		{"64:ff9b:1::/48", "local-use NAT64 (64:ff9b:1::/48, RFC 8215)"},
		{"100::/64", "discard-only (100::/64, RFC 6666)"},
		{"2001::/32", "Teredo, embeds an IPv4 address (2001::/32, RFC 4380)"},
		{"2001:db8::/32", "documentation (2001:db8::/32, RFC 3849)"},
		{"fc00::/7", "unique-local (fc00::/7, RFC 4193)"},
		{"fe80::/10", "link-local (fe80::/10)"},
		{"fec0::/10", "site-local, deprecated (fec0::/10, RFC 3879)"},
		{"ff00::/8", "multicast (ff00::/8)"},
	}
	out := make([]refusedRange, len(rows))
	for i, r := range rows {
		out[i] = refusedRange{netip.MustParsePrefix(r.cidr), r.name}
	}
	return out
}()

// IPv6 prefixes whose addresses embed an IPv4 address that is checked in
// turn.
var (
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96") // RFC 6052: the last 32 bits
	sixToFour   = netip.MustParsePrefix("2002::/16")    // RFC 3056: bits 16–47
)

// CheckAddr returns nil if a may be connected to, or an *EgressError naming
// the refused range. IPv4-mapped IPv6 addresses are checked as the IPv4
// address they map; NAT64 and 6to4 addresses as the IPv4 address they embed.
// An IPv6 zone ("fe80::1%eth0") is ignored.
func (e Egress) CheckAddr(a netip.Addr) error {
	if r := e.refusal(a); r != "" {
		return &EgressError{Host: a.String(), Addr: a, Range: r}
	}
	return nil
}

// refusal returns the name of the refused range holding a, or "".
func (e Egress) refusal(a netip.Addr) string {
	if !a.IsValid() {
		return "not an IP address"
	}
	a = a.WithZone("")
	if e.allowed(a) {
		return ""
	}
	if a.Is4In6() {
		if r := e.refusal(a.Unmap()); r != "" {
			return r + ", as IPv4-mapped IPv6"
		}
		return ""
	}
	if a.Is6() {
		b := a.As16()
		switch {
		case nat64Prefix.Contains(a):
			if r := e.refusal(netip.AddrFrom4([4]byte(b[12:16]))); r != "" {
				return r + ", embedded in NAT64 64:ff9b::/96"
			}
			return ""
		case sixToFour.Contains(a):
			if r := e.refusal(netip.AddrFrom4([4]byte(b[2:6]))); r != "" {
				return r + ", embedded in 6to4 2002::/16"
			}
			return ""
		}
	}
	for _, r := range refused {
		if r.prefix.Contains(a) {
			return r.name
		}
	}
	return ""
}

func (e Egress) allowed(a netip.Addr) bool {
	for _, p := range e.Allow {
		if p.Contains(a) || a.Is4In6() && p.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}

// CheckURL checks a target URL before any request: an IP-literal host with
// CheckAddr; the names "localhost" and "*.localhost" (RFC 6761: they always
// resolve to loopback) as loopback, unless Allow admits 127.0.0.1 or ::1;
// hosts that are neither an address nor a name (stray brackets, spaces,
// escapes) and hosts in a numeric form other than dotted-quad IPv4 ("2130706433",
// "0x7f.1", "127.1", "0177.0.0.1"), which some resolvers read as IPv4
// addresses, are refused outright. Other names pass: their addresses are
// checked when dialled. A URL that does not parse or has no host is an error
// too. Errors never quote the URL's path or query.
func (e Egress) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return errors.New("target is not an absolute URL with a host")
	}
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil {
		if r := e.refusal(a); r != "" {
			return &EgressError{Host: host, Addr: a, Range: r}
		}
		return nil
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if !hostName(name) {
		return &EgressError{Host: host, Range: "not an IP address or a host name (letters, digits, '-', '.' and '_' only)"}
	}
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		if e.allowed(netip.MustParseAddr("127.0.0.1")) || e.allowed(netip.IPv6Loopback()) {
			return nil
		}
		return &EgressError{Host: host, Range: "loopback name (localhost, RFC 6761)"}
	}
	if numericHost(name) {
		return &EgressError{Host: host, Range: "numeric host in a form other than dotted-quad IPv4, read by some resolvers as an address"}
	}
	return nil
}

// ErrNoSuchHost is wrapped by CheckTarget's error for a name DNS has no
// address for (NXDOMAIN, or no A or AAAA record).
var ErrNoSuchHost = errors.New("no such host")

// DefaultLookupTimeout bounds CheckTarget's name lookup when ctx has no
// deadline.
const DefaultLookupTimeout = 5 * time.Second

// CheckTarget is CheckURL, and for a host name also a lookup with Resolver
// (net.DefaultResolver when nil) and CheckAddr on every address it
// answers: a name that resolves to a refused address ("localhost-alias"
// in /etc/hosts, a public name pointing at 10.0.0.5) is refused now, with
// an *EgressError naming the name and the address, not only when dialled.
// The dial-time check still runs (NewEgressHTTPClient): an answer that
// changes in between is caught there. Any refused address refuses the
// target, since the dialer may try any of them.
//
// A name that does not resolve is an error too when DNS says the name does
// not exist (NXDOMAIN, or no A or AAAA record): "no such host". A lookup
// that fails (a timeout, SERVFAIL) admits the target: a passing DNS fault
// must not turn a send away (an API client takes a 4xx as final), and the
// dial-time check refuses a forbidden address on every send. Errors show the host only,
// never the URL's path or query. Without a deadline on ctx the lookup gets
// DefaultLookupTimeout.
func (e Egress) CheckTarget(ctx context.Context, raw string) error {
	if err := e.CheckURL(raw); err != nil {
		return err
	}
	u, _ := url.Parse(raw) // CheckURL parsed it
	host := u.Hostname()
	if _, err := netip.ParseAddr(host); err == nil {
		return nil // an address: CheckURL checked it
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return nil // CheckURL admitted loopback
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultLookupTimeout)
		defer cancel()
	}
	res := e.Resolver
	if res == nil {
		res = net.DefaultResolver
	}
	addrs, err := res.LookupNetIP(ctx, "ip", host)
	shown := host
	if len(shown) > maxShownHost {
		shown = fmt.Sprintf("%.*q…", maxShownHost, host)
	}
	var de *net.DNSError
	switch {
	case err != nil && errors.As(err, &de) && de.IsNotFound, err == nil && len(addrs) == 0:
		return fmt.Errorf("target %s: %w (DNS has no address for the name)", shown, ErrNoSuchHost)
	case err != nil:
		return nil // a DNS fault, not an answer: the dial-time check decides
	}
	for _, a := range addrs {
		if r := e.refusal(a); r != "" {
			return &EgressError{Host: host, Addr: a.WithZone(""), Range: r}
		}
	}
	return nil
}

// hostName reports whether name can be a DNS host name: non-empty, made of
// letters (IDNs included), digits, '-', '_' and '.'. Anything else
// ("127.0.0.1]", "a b", "x%00") is no host a resolver should be asked about.
func hostName(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// numericHost reports whether the last label of a host name is all digits or
// a 0x hex number: no top-level domain is, and inet_aton-style resolvers read
// such names ("2130706433", "127.1", "0x7f000001") as IPv4 addresses.
func numericHost(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	if last == "" {
		return false
	}
	if h, ok := strings.CutPrefix(last, "0x"); ok {
		last = h
		for _, c := range []byte(last) {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
		return true
	}
	for _, c := range []byte(last) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// control is the net.Dialer Control hook: it runs after name resolution, on
// the address about to be connected to.
func (e Egress) control(host string) func(network, address string, _ syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return &EgressError{Host: host, Range: "unparsable dial address"}
		}
		if r := e.refusal(ap.Addr()); r != "" {
			return &EgressError{Host: host, Addr: ap.Addr(), Range: r}
		}
		return nil
	}
}

// NewEgressHTTPClient is NewHTTPClient whose connections are checked by e at
// dial time: every address the dialer connects to, after name resolution,
// must pass e.CheckAddr, else the request fails with an error wrapping an
// *EgressError. The transport uses no proxy (HTTP_PROXY and friends are
// ignored): through a proxy the dialled address would be the proxy's, and the
// target would go unchecked.
func NewEgressHTTPClient(e Egress) *http.Client {
	c := NewHTTPClient()
	t := c.Transport.(*http.Transport)
	t.Proxy = nil
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, _ := net.SplitHostPort(addr)
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Resolver: e.Resolver, Control: e.control(host)}
		return d.DialContext(ctx, network, addr)
	}
	c.Transport = t
	return c
}

// egressError returns the *EgressError inside err, if any.
func egressError(err error) (*EgressError, bool) {
	var ee *EgressError
	ok := errors.As(err, &ee)
	return ee, ok
}

// targetError is the Permanent *Error for a target CheckURL refused.
func targetError(provider string, err error) *Error {
	if ee, ok := egressError(err); ok {
		return refuseTarget(provider, ee)
	}
	return permanent(provider, "invalid payload: url: %v", err)
}

// refuseTarget returns the Permanent *Error for a refused target.
func refuseTarget(provider string, ee *EgressError) *Error {
	return &Error{Class: Permanent, Provider: provider, Err: ee}
}

// egressClients pools one guarded client per allowlist, for Webhook and
// HTTPCaller values whose HTTP field is nil.
var egressClients sync.Map // Allow and the Resolver pointer → *http.Client

// clientOr returns hc if set, else the pooled NewEgressHTTPClient(e).
func (e Egress) clientOr(hc *http.Client) *http.Client {
	if hc != nil {
		return hc
	}
	return e.client()
}

// client returns the pooled NewEgressHTTPClient(e).
func (e Egress) client() *http.Client {
	key := fmt.Sprintf("%v %p", e.Allow, e.Resolver)
	if c, ok := egressClients.Load(key); ok {
		return c.(*http.Client)
	}
	c, _ := egressClients.LoadOrStore(key, NewEgressHTTPClient(e))
	return c.(*http.Client)
}
