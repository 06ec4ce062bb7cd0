package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

type clientIPKey struct{}

// ClientIP returns the client address of a request that passed through a
// Middleware (in a Bypass func, a KeyFunc or any handler behind it), as
// resolved by Middleware.ClientIP. For any other request it returns the
// address of r.RemoteAddr, never believing forwarding headers. The zero Addr
// means RemoteAddr holds no IP address (a Unix socket, say).
func ClientIP(r *http.Request) netip.Addr {
	if ip, ok := r.Context().Value(clientIPKey{}).(netip.Addr); ok {
		return ip
	}
	ip, _ := parseAddr(r.RemoteAddr)
	return ip
}

// ClientIP resolves the client address of r:
//
//   - The direct peer (r.RemoteAddr) when it is not in Config.TrustedProxies:
//     then X-Forwarded-For and X-Real-IP are ignored, whatever they say.
//   - Otherwise X-Forwarded-For (all its field lines, in order) is walked
//     from the right, the end each proxy appends to, skipping trusted
//     proxies: the first untrusted address is the client. Entries to its
//     left were written by the client and are never believed.
//   - An entry that is not an IP address ("unknown", "", a hostname) ends
//     the walk: no trusted proxy wrote it, so neither it nor anything to its
//     left is believed, and the client is the last trusted hop reached.
//     Every address walked being trusted also gives the last (left-most) one.
//   - A trusted peer that sent no X-Forwarded-For: X-Real-IP when
//     Config.TrustXRealIP is set and it holds an IP address, else the peer.
//
// Entries may carry a port ("203.0.113.7:4711", "[2001:db8::1]:443");
// IPv4-mapped IPv6 addresses are unmapped and zones dropped. The Forwarded
// field (RFC 7239) is not read. The zero Addr means RemoteAddr holds no IP.
func (m *Middleware) ClientIP(r *http.Request) netip.Addr {
	peer, ok := parseAddr(r.RemoteAddr)
	if !ok || !contains(m.trusted, peer) {
		return peer
	}
	values := r.Header.Values("X-Forwarded-For")
	if len(values) == 0 {
		if m.realIP {
			if ip, ok := parseAddr(strings.TrimSpace(r.Header.Get("X-Real-IP"))); ok {
				return ip
			}
		}
		return peer
	}
	client := peer
	for i := len(values) - 1; i >= 0; i-- {
		v := values[i]
		for {
			j := strings.LastIndexByte(v, ',')
			ip, ok := parseAddr(strings.TrimSpace(v[j+1:]))
			if !ok {
				return client
			}
			if !contains(m.trusted, ip) {
				return ip
			}
			client = ip
			if j < 0 {
				break
			}
			v = v[:j]
		}
	}
	return client
}

// parseAddr reads "203.0.113.7", "203.0.113.7:80", "2001:db8::1" or
// "[2001:db8::1]:443", unmapping IPv4-mapped addresses and dropping zones.
func parseAddr(s string) (netip.Addr, bool) {
	var ip netip.Addr
	if ap, err := netip.ParseAddrPort(s); err == nil {
		ip = ap.Addr()
	} else if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		a, err := netip.ParseAddr(s[1 : len(s)-1])
		if err != nil || !a.Is6() {
			return netip.Addr{}, false
		}
		ip = a
	} else if a, err := netip.ParseAddr(s); err == nil {
		ip = a
	} else {
		return netip.Addr{}, false
	}
	return ip.Unmap().WithZone(""), true
}

// parsePrefixes reads CIDR prefixes or single addresses; errors name
// field[i] and the value.
func parsePrefixes(field string, in []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(in))
	for i, s := range in {
		t := strings.TrimSpace(s)
		var p netip.Prefix
		var err error
		if strings.Contains(t, "/") {
			p, err = netip.ParsePrefix(t)
		} else {
			var a netip.Addr
			if a, err = netip.ParseAddr(t); err == nil {
				if a.Zone() != "" {
					err = fmt.Errorf("zones are not allowed")
				} else {
					p = netip.PrefixFrom(a, a.BitLen())
				}
			}
		}
		if err != nil {
			return nil, fmt.Errorf("httplimit: %s[%d] %q: want an IP address or CIDR prefix such as 10.0.0.0/8: %w", field, i, s, err)
		}
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func contains(prefixes []netip.Prefix, ip netip.Addr) bool {
	for _, p := range prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
