package app

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/dnstest"
	"github.com/sluice-dev/sluice/producer"
	"github.com/sluice-dev/sluice/tasks"
)

// A target whose name resolves to a refused address is refused when the
// task is built (API, `sluice enqueue`, `sluice send`), not only when the
// worker dials it (issue 20: a name for 127.0.0.1 in /etc/hosts was
// accepted). A name DNS does not know is an error too. The fake DNS
// stands in for /etc/hosts.
func TestProducerResolvesTheTarget(t *testing.T) {
	Resolver = dnstest.Resolver(map[string]netip.Addr{
		"localhost-alias.test": netip.MustParseAddr("127.0.0.1"),
		"metadata.test":        netip.MustParseAddr("169.254.169.254"),
		"nowhere.test":         {},
	}, dnstest.Public)
	t.Cleanup(func() { Resolver = nil })
	cfg := config.Default()
	cfg.Channels["http"].Enabled = true
	prod, err := NewProducer(cfg, nil, nil, nil)
	require.NoError(t, err)
	check := func(task *asynq.Task) error { return prod.Check([]producer.Item{{Task: task}})[0].Err }
	hook := func(url string) error {
		task, err := tasks.NewWebhookDeliverTask(tasks.WebhookDeliver{URL: url, EventType: "e", Payload: []byte(`{}`), IdempotencyKey: "k"})
		require.NoError(t, err)
		return check(task)
	}
	call := func(url string) error {
		task, err := tasks.NewHTTPCallTask(tasks.HTTPCall{Method: "GET", URL: url})
		require.NoError(t, err)
		return check(task)
	}

	err = hook("http://localhost-alias.test:8080/h?sig=s3cr3t")
	require.EqualError(t, err, "url http://localhost-alias.test:8080: target localhost-alias.test (127.0.0.1) refused: loopback (127.0.0.0/8); "+
		"outbound requests may not reach this host's own or private networks unless egress.allow_cidrs admits the address")
	var ee *channels.EgressError
	require.ErrorAs(t, err, &ee)
	require.ErrorIs(t, err, producer.ErrInvalid)
	require.ErrorContains(t, call("https://metadata.test/latest/meta-data/"), "target metadata.test (169.254.169.254) refused: link-local")
	err = call("https://nowhere.test/x")
	require.EqualError(t, err, "url https://nowhere.test: target nowhere.test: no such host (DNS has no address for the name)")
	require.True(t, errors.Is(err, channels.ErrNoSuchHost))
	require.NoError(t, hook("https://hooks.example.com/h"), "a name for a public address")
	require.ErrorContains(t, CheckTarget(cfg.Egress.AllowCIDRs, "--url", "http://localhost-alias.test/"), "--url http://localhost-alias.test: target localhost-alias.test (127.0.0.1) refused")

	allow, err := config.Parse("allow.yaml", []byte("egress:\n  allow_cidrs: [127.0.0.0/8]\n"))
	require.NoError(t, err)
	require.NoError(t, CheckTarget(allow.Egress.AllowCIDRs, "url", "http://localhost-alias.test:8080/h"), "egress.allow_cidrs admits it")
}
