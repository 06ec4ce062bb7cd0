package channels

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/sluice-dev/sluice/internal/dnstest"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"
)

// failingDNS is a resolver whose every answer is rcode with no records,
// served in process (dnstest).
func failingDNS(rcode dnsmessage.RCode) *net.Resolver {
	return dnstest.Server{RCode: rcode}.Resolver()
}

// CheckTarget resolves a name at enqueue and checks what it resolves to,
// so a name for a refused address is refused before it is queued (issue
// 20: a name for 127.0.0.1 in /etc/hosts was accepted and failed at dial
// time). The resolver is injected: nothing depends on /etc/hosts or a DNS
// server.
func TestCheckTargetResolvesNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const target = "http://localhost-alias.test:8080/hook?sig=s3cr3t"
	var lookups atomic.Int64
	loopback := fakeDNS(netip.MustParseAddr("127.0.0.1"), &lookups)

	require.NoError(t, Egress{Resolver: loopback}.CheckURL(target), "the name alone passes the URL check")
	err := Egress{Resolver: loopback}.CheckTarget(ctx, target)
	var ee *EgressError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, netip.MustParseAddr("127.0.0.1"), ee.Addr)
	require.Contains(t, err.Error(), "target localhost-alias.test (127.0.0.1) refused: loopback")
	require.NotContains(t, err.Error(), "s3cr3t")
	require.Positive(t, lookups.Load(), "the injected resolver answered")

	mapped := fakeDNS(netip.MustParseAddr("::ffff:169.254.169.254"), &lookups)
	require.ErrorContains(t, Egress{Resolver: mapped}.CheckTarget(ctx, target), "link-local")

	allow := Egress{Resolver: loopback, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	require.NoError(t, allow.CheckTarget(ctx, target), "admitted by Allow")
	public := fakeDNS(netip.MustParseAddr("93.184.215.14"), &lookups)
	require.NoError(t, Egress{Resolver: public}.CheckTarget(ctx, target))

	err = Egress{Resolver: failingDNS(dnsmessage.RCodeNameError)}.CheckTarget(ctx, target)
	require.EqualError(t, err, "target localhost-alias.test: no such host (DNS has no address for the name)")
	// A DNS fault is no answer: the target is admitted at enqueue, and the
	// dial-time check decides on each send.
	require.NoError(t, Egress{Resolver: failingDNS(dnsmessage.RCodeServerFailure)}.CheckTarget(ctx, target))

	// What CheckURL refuses is refused without a lookup; a literal address
	// needs none.
	before := lookups.Load()
	require.ErrorContains(t, Egress{Resolver: public}.CheckTarget(ctx, "http://10.0.0.5/"), "private (10.0.0.0/8")
	require.ErrorContains(t, Egress{Resolver: public}.CheckTarget(ctx, "http://localhost/"), "loopback name")
	require.NoError(t, Egress{Resolver: public}.CheckTarget(ctx, "http://93.184.215.14/"))
	require.Equal(t, before, lookups.Load())
}
