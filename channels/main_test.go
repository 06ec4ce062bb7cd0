package channels

import "net/netip"

// loopback admits the httptest servers the tests talk to.
var loopback = Egress{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}
