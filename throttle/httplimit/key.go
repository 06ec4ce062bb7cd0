package httplimit

import (
	"net/http"
	"net/netip"
	"strings"
)

// UserFunc returns the user a request is made by, typically read from the
// request context where the application's authentication middleware put
// it. ok false, or an empty user, means the request is anonymous.
type UserFunc func(r *http.Request) (user string, ok bool)

// KeyFunc returns the subject a request is limited as, the last part of its
// keys: "ip:203.0.113.7", "user:alice". ip is the client address
// (Middleware.ClientIP). An empty subject means IPSubject(ip).
type KeyFunc func(r *http.Request, ip netip.Addr) string

// ByIP limits each client address: IPSubject(ip).
func ByIP() KeyFunc {
	return func(_ *http.Request, ip netip.Addr) string { return IPSubject(ip) }
}

// ByUser limits each user, UserSubject(user), wherever they connect from;
// anonymous requests are limited by client address, IPSubject(ip).
func ByUser(user UserFunc) KeyFunc {
	if user == nil {
		panic("httplimit: ByUser(nil)")
	}
	return func(r *http.Request, ip netip.Addr) string {
		if u, ok := user(r); ok && u != "" {
			return UserSubject(u)
		}
		return IPSubject(ip)
	}
}

// ByUserAndIP limits each user at each client address separately:
// "user:alice:ip:203.0.113.7". Anonymous requests are limited by client
// address, IPSubject(ip).
func ByUserAndIP(user UserFunc) KeyFunc {
	if user == nil {
		panic("httplimit: ByUserAndIP(nil)")
	}
	return func(r *http.Request, ip netip.Addr) string {
		if u, ok := user(r); ok && u != "" {
			return UserSubject(u) + ":" + IPSubject(ip)
		}
		return IPSubject(ip)
	}
}

// IPSubject is the subject of a client address: "ip:203.0.113.7". An IPv6
// address stands for its /64, "ip:2001:db8:1:2::/64", the smallest network
// normally assigned to one subscriber, so that a client cannot get a fresh
// limit per address of its network. The zero Addr is "ip:unknown".
func IPSubject(ip netip.Addr) string {
	ip = ip.Unmap().WithZone("")
	switch {
	case !ip.IsValid():
		return "ip:unknown"
	case ip.Is6():
		p, _ := ip.Prefix(64) // cannot fail: a valid IPv6 address
		return "ip:" + p.String()
	}
	return "ip:" + ip.String()
}

// UserSubject is the subject of a user: "user:" and the user with '%', ':',
// '{' and '}' percent-encoded, so that no user can name another subject
// ("alice:ip:…") and keys stay valid throttle keys (no braces).
func UserSubject(user string) string {
	return "user:" + userEscaper.Replace(user)
}

var userEscaper = strings.NewReplacer("%", "%25", ":", "%3A", "{", "%7B", "}", "%7D")
