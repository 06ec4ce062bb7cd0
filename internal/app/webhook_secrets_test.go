package app

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/producer"
	"github.com/sluice-dev/sluice/tasks"
)

// Webhook secrets, as a receiver checks them with the Standard Webhooks
// reference library: an endpoint listed in channels.webhook.endpoints is
// signed with its own secret only; during a rotation (previous_secret_env)
// with both, the current first; a delivery naming no endpoint with the
// default secret; an endpoint not listed, or named for a URL outside its
// urls, is refused at enqueue and, if it reaches a worker, archived
// (Permanent), never signed with another's secret or for another's URL.
func TestWebhookEndpointsSignWithTheirOwnSecrets(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"WEBHOOK_SECRET":     "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		"BILLING_SECRET":     "whsec_QmlsbGluZ1NlY3JldEJpbGxpbmdTZWNyZXQx",
		"CRM_SECRET":         "whsec_Q3JtTmV3U2VjcmV0Q3JtTmV3U2VjcmV0MTIz",
		"CRM_SECRET_OLD":     "whsec_Q3JtT2xkU2VjcmV0Q3JtT2xkU2VjcmV0MTIz",
		"WEBHOOK_SECRET_OLD": "whsec_T2xkRGVmYXVsdFNlY3JldE9sZERlZmF1bHQx",
	}
	secrets := func(name string) (string, error) {
		if v, ok := env[name]; ok {
			return v, nil
		}
		return "", errors.New("env " + name + " is not set")
	}
	type got struct {
		header http.Header
		body   []byte
	}
	reqs := make(chan got, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		reqs <- got{r.Header.Clone(), b}
	}))
	t.Cleanup(srv.Close)
	cfg, err := config.Parse("sluice.yaml", []byte(strings.Join([]string{
		"channels:",
		"  webhook:",
		"    endpoints:",
		"      billing: {secret_env: BILLING_SECRET, urls: ['" + srv.URL + "/billing/']}",
		"      crm: {secret_env: CRM_SECRET, previous_secret_env: CRM_SECRET_OLD, urls: ['" + srv.URL + "/crm']}",
	}, "\n")))
	require.NoError(t, err)
	loopback := channels.Egress{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	ch, err := buildChannel(cfg.Channels["webhook"], loopback, secrets, srv.Client(), "")
	require.NoError(t, err)

	deliver := func(endpoint, path string) (got, error) {
		t.Helper()
		task, err := tasks.NewWebhookDeliverTask(tasks.WebhookDeliver{URL: srv.URL + path, EventType: "invoice.paid",
			Payload: json.RawMessage(`{"id":"inv_1"}`), Endpoint: endpoint, IdempotencyKey: "msg_" + endpoint})
		require.NoError(t, err)
		p, err := ch.Prepare(task.Payload())
		require.NoError(t, err)
		if _, err := p.Send(context.Background()); err != nil {
			return got{}, err
		}
		return <-reqs, nil
	}
	verifies := func(g got, secret string) bool {
		wh, err := standardwebhooks.NewWebhook(secret)
		require.NoError(t, err)
		return wh.Verify(g.body, g.header) == nil
	}

	billing, err := deliver("billing", "/billing/invoices")
	require.NoError(t, err)
	require.True(t, verifies(billing, env["BILLING_SECRET"]), "billing verifies with its own secret")
	for _, other := range []string{"WEBHOOK_SECRET", "CRM_SECRET", "CRM_SECRET_OLD"} {
		require.False(t, verifies(billing, env[other]), "billing must not verify with %s", other)
	}
	require.Len(t, strings.Fields(billing.header.Get("webhook-signature")), 1)

	crm, err := deliver("crm", "/crm")
	require.NoError(t, err)
	require.True(t, verifies(crm, env["CRM_SECRET"]), "crm verifies with its new secret")
	require.True(t, verifies(crm, env["CRM_SECRET_OLD"]), "and, during the rotation, with its old one")
	require.False(t, verifies(crm, env["BILLING_SECRET"]))
	require.False(t, verifies(crm, env["WEBHOOK_SECRET"]))
	sigs := strings.Fields(crm.header.Get("webhook-signature"))
	require.Len(t, sigs, 2)
	first, err := channels.Sign(env["CRM_SECRET"], "msg_crm", timeOf(t, crm.header), crm.body)
	require.NoError(t, err)
	require.Equal(t, first, sigs[0], "the current secret's signature comes first")

	def, err := deliver("", "/hook")
	require.NoError(t, err)
	require.True(t, verifies(def, env["WEBHOOK_SECRET"]), "no endpoint: the default secret")
	require.False(t, verifies(def, env["BILLING_SECRET"]))

	_, err = deliver("marketing", "/hook")
	var ce *channels.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, channels.Permanent, ce.Class, "an endpoint with no secret is a configuration error: archived, not retried")
	require.ErrorIs(t, err, channels.ErrUnknownEndpoint)
	require.Empty(t, reqs, "nothing was sent for it")

	// A delivery's URL and body are the caller's: billing's secret signs
	// for billing's URLs only, or a caller could have it sign a body of
	// theirs, sent to them, and replay it to billing. Nor does crm's URL
	// take billing's secret, nor a "../" climb out of billing's prefix,
	// nor billing's URL the default secret (billing would not verify it).
	for _, c := range []struct{ endpoint, path string }{
		{"billing", "/collect"}, {"billing", "/crm"}, {"billing", "/billing/../crm"}, {"billing", "/billingX"}, {"", "/billing/invoices"},
	} {
		_, err = deliver(c.endpoint, c.path)
		require.ErrorAs(t, err, &ce, "%+v", c)
		require.Equal(t, channels.Permanent, ce.Class, "%+v", c)
		require.ErrorIs(t, err, channels.ErrEndpointURL, "%+v", c)
		require.Empty(t, reqs, "nothing signed or sent for %+v", c)
	}

	prod, err := NewProducer(cfg, nil, nil, nil)
	require.NoError(t, err)
	task, err := tasks.NewWebhookDeliverTask(tasks.WebhookDeliver{URL: "https://hooks.example.com/", EventType: "e",
		Payload: json.RawMessage(`{}`), Endpoint: "marketing", IdempotencyKey: "k"})
	require.NoError(t, err)
	res := prod.Check([]producer.Item{{Task: task}})
	require.ErrorContains(t, res[0].Err, "endpoint: not one of channels.webhook.endpoints")
	require.NotContains(t, res[0].Err.Error(), "billing", "the configured names are not shown to a caller")
	for endpoint, want := range map[string]string{
		"billing": "url: not under the urls of the endpoint named",
		"":        "url: under the urls of one of channels.webhook.endpoints",
	} {
		url := "https://attacker.example/collect?t=tok"
		if endpoint == "" {
			url = srv.URL + "/billing/x"
		}
		task, err := tasks.NewWebhookDeliverTask(tasks.WebhookDeliver{URL: url, EventType: "e",
			Payload: json.RawMessage(`{}`), Endpoint: endpoint, IdempotencyKey: "k"})
		require.NoError(t, err)
		res := prod.Check([]producer.Item{{Task: task}})
		require.ErrorContains(t, res[0].Err, want, "refused at enqueue")
		require.NotContains(t, res[0].Err.Error(), "attacker")
		require.NotContains(t, res[0].Err.Error(), "billing")
	}

	// Rotating the default secret signs the deliveries that name no
	// endpoint with both.
	rot, err := config.Parse("sluice.yaml", []byte("channels:\n  webhook:\n    previous_signing_secret_env: WEBHOOK_SECRET_OLD\n"))
	require.NoError(t, err)
	ch, err = buildChannel(rot.Channels["webhook"], loopback, secrets, srv.Client(), "")
	require.NoError(t, err)
	def, err = deliver("any-name", "/hook")
	require.NoError(t, err)
	require.True(t, verifies(def, env["WEBHOOK_SECRET"]))
	require.True(t, verifies(def, env["WEBHOOK_SECRET_OLD"]), "no endpoints listed: every name takes the default pair")

	// One secret under two bindings would sign for both's URLs: the start
	// stops, naming the two variables (never the value).
	env["CRM_SECRET_OLD"] = env["WEBHOOK_SECRET"]
	_, err = buildChannel(cfg.Channels["webhook"], loopback, secrets, srv.Client(), "")
	require.ErrorContains(t, err, "channels.webhook.endpoints.crm: env CRM_SECRET_OLD holds the same secret as env WEBHOOK_SECRET (the default secret)")
	require.NotContains(t, err.Error(), env["WEBHOOK_SECRET"])
	// the same key spelt otherwise: a zero byte more signs alike (HMAC
	// pads keys with zeros); a trailing newline is refused outright
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(env["WEBHOOK_SECRET"], "whsec_"))
	require.NoError(t, err)
	env["CRM_SECRET_OLD"] = "whsec_" + base64.StdEncoding.EncodeToString(append(key, 0))
	_, err = buildChannel(cfg.Channels["webhook"], loopback, secrets, srv.Client(), "")
	require.ErrorContains(t, err, "env CRM_SECRET_OLD holds the same secret as env WEBHOOK_SECRET (the default secret)")
	env["CRM_SECRET_OLD"] = env["WEBHOOK_SECRET"] + "\n"
	_, err = buildChannel(cfg.Channels["webhook"], loopback, secrets, srv.Client(), "")
	require.ErrorContains(t, err, "env CRM_SECRET_OLD: webhook secret: holds white space or a line break")
	env["CRM_SECRET_OLD"] = env["BILLING_SECRET"]
	_, err = buildChannel(cfg.Channels["webhook"], loopback, secrets, srv.Client(), "")
	require.ErrorContains(t, err, "channels.webhook.endpoints.crm: env CRM_SECRET_OLD holds the same secret as env BILLING_SECRET (endpoint billing)")

	// A listed endpoint whose variable is unset stops the start, naming it.
	delete(env, "CRM_SECRET_OLD")
	_, err = buildChannel(cfg.Channels["webhook"], loopback, secrets, srv.Client(), "")
	require.ErrorContains(t, err, "channels.webhook.endpoints.crm: env CRM_SECRET_OLD is not set")
}

// timeOf is the webhook-timestamp of h.
func timeOf(t *testing.T, h http.Header) time.Time {
	t.Helper()
	sec, err := strconv.ParseInt(h.Get("webhook-timestamp"), 10, 64)
	require.NoError(t, err)
	return time.Unix(sec, 0)
}
