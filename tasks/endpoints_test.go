package tasks

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestURLUnder(t *testing.T) {
	const prefix = "https://hooks.example.com/billing"
	for url, want := range map[string]bool{
		"https://hooks.example.com/billing":              true,
		"https://hooks.example.com/billing/":             true,
		"https://hooks.example.com/billing/invoices?x=1": true,
		"HTTPS://Hooks.Example.COM/billing/a":            true,
		"https://hooks.example.com/billingX":             false, // not at a "/"
		"https://hooks.example.com/Billing":              false, // paths are case-sensitive
		"http://hooks.example.com/billing":               false, // another scheme
		"https://hooks.example.com:8443/billing":         false, // another port
		"https://evil.example/billing":                   false,
		"https://hooks.example.com.evil/billing":         false,
		"https://user@hooks.example.com/billing":         false,
		"https://hooks.example.com/billing/../admin":     false,
		"https://hooks.example.com/billing/%2e%2e/admin": false,
		"https://hooks.example.com/billing/..;/admin":    false,
		"https://hooks.example.com/billing/.%2E/admin":   false,
		`https://hooks.example.com/billing/..\admin`:     false,
		"https://hooks.example.com/billing/..%5cadmin":   false,
		"https://hooks.example.com/billing%2F..%2Fadmin": false,
		"https://hooks.example.com/billing/./x":          false,
		"https://hooks.example.com/billing/..x":          true, // a name, not a dot segment
		// spellings a receiver could resolve out of the prefix, or that
		// net/http would send to another host
		"https://hooks.example.com/billing/%252e%252e/admin":   false,
		"https://hooks.example.com/billing/..%00/admin":        false,
		"https://hooks.example.com/billing/..%20/admin":        false,
		"https://hooks.example.com/billing/.../admin":          false,
		"https://hooks.example.com/billing/%c0%ae%c0%ae/admin": false,
		"https://hooks.example.com/billing/\uff0e\uff0e/admin": false,
		"https://hooks.example.com/%62illing/x":                true, // paths compare decoded
		"https://hooks.example.com/billing//x":                 false,
		"https://hooks.example.com./billing/x":                 false,
		"https://hooks.example.com:443/billing/x":              false,
		"https://hoo\u212as.example.com/billing/x":             false, // KELVIN SIGN folds to k
		"https://[fe80::1%25eth0]/billing/x":                   false,
		"https://hooks.example.com/billing/a%20b":              true,
		"https://hooks.example.com/billing/..%3Fx":             false, // "..?x": cut at '?' by a hop that decodes and parses again
		"https://hooks.example.com/billing/..%23x":             false,
		"https://hooks.example.com/billing/\u2025/x":           false, // TWO DOT LEADER, ".." under NFKC
		"https://hooks.example.com:/billing/x":                 false,
		"https://hooks.example.com:0443/billing/x":             false,
		"https://hooks.example.com/billing/x?a /admin":         false,
		"https://hooks.example.com/billing/(a)!*'~+@:;=,$&":    true,
		"https://hooks.example.com/billing/%40%3A%2B%7E%5b%5D": true,
		"https://hooks.example.com/billing/caf%C3%A9":          true,
		"https://hooks.example.com/billing/caf\u00e9?q=%25":    true,
		"/billing": false,
		"":         false,
		"::":       false,
	} {
		assert.Equal(t, want, URLUnder(url, prefix), url)
	}
	assert.True(t, URLUnder("https://h.example/anything", "https://h.example"))
	assert.True(t, URLUnder("https://h.example/", "https://h.example/"))
	assert.True(t, URLUnder("https://h.example/a/b", "https://h.example/a/"))
	assert.False(t, URLUnder("https://h.example/a", "https://h.example/a/"))
	assert.False(t, URLUnder("https://h.example/a", "https://h.example/a?x=1"), "a refused prefix covers nothing")
	assert.False(t, URLUnder("https://STRA\u1e9eE.example/hooks/x", "https://stra\u00dfe.example/hooks/"), "no Unicode folding of hosts")
	assert.True(t, URLUnder("https://XN--STRAE-OQA.example/hooks/x", "https://xn--strae-oqa.example/hooks/"))
}

func TestCheckEndpointURLPrefix(t *testing.T) {
	require.NoError(t, CheckEndpointURLPrefix("https://hooks.example.com/billing/"))
	require.NoError(t, CheckEndpointURLPrefix("http://10.0.0.7:8080"))
	for prefix, want := range map[string]string{
		"hooks.example.com/billing":         "absolute http or https",
		"ftp://hooks.example.com/":          "absolute http or https",
		"https:///billing":                  "absolute http or https",
		"https://u:p@hooks.example.com/":    "user info",
		"https://hooks.example.com/?a=1":    "query",
		"https://hooks.example.com/?":       "query",
		"https://hooks.example.com/#x":      "fragment",
		"https://hooks.example.com/a/../b":  `".."`,
		"https://hooks.example.com/a/%2e/b": `".."`,
		`https://hooks.example.com/a\b`:     "backslash",
		"https://hooks.example.com/%zz":     "not a URL",
		"https://stra\u00dfe.example/":      "xn-- form",
		"https://hooks.example.com./":       "end in a dot",
		"https://hooks.example.com:443/":    "leave out the port 443",
		"https://hooks.example.com/a//b":    "empty segment",
		"https://hooks.example.com/a%2Fb":   `escaped "/"`,
		"https://hooks.example.com/a%25b":   "no control character, '%'",
		"https://hooks.example.com:0443/":   "without a leading zero",
	} {
		err := CheckEndpointURLPrefix(prefix)
		if assert.Error(t, err, prefix) {
			assert.Contains(t, err.Error(), want, prefix)
		}
	}
}

func TestWebhookEndpointsCheck(t *testing.T) {
	eps := WebhookEndpoints{
		"billing": {"https://billing.example.com/hooks/"},
		"crm":     {"https://crm.example.com/in", "https://crm-eu.example.com/in"},
	}
	require.NoError(t, eps.Check("billing", "https://billing.example.com/hooks/paid"))
	require.NoError(t, eps.Check("crm", "https://crm-eu.example.com/in/x"))
	require.NoError(t, eps.Check("", "https://other.example.com/hook"), "the default secret signs for URLs no endpoint holds")
	require.NoError(t, WebhookEndpoints(nil).Check("anything", "https://evil.example/"), "no endpoints listed: no binding")

	// the hole this closes: billing's secret signing for the caller's URL
	err := eps.Check("billing", "https://attacker.example/collect")
	require.ErrorIs(t, err, ErrEndpointURL)
	assert.NotContains(t, err.Error(), "attacker")
	assert.NotContains(t, err.Error(), "billing")
	require.ErrorIs(t, eps.Check("billing", "https://crm.example.com/in"), ErrEndpointURL)
	require.ErrorIs(t, eps.Check("billing", "https://billing.example.com/hooks/../admin"), ErrEndpointURL)

	err = eps.Check("shop", "https://billing.example.com/hooks/")
	require.ErrorIs(t, err, ErrUnknownEndpoint)
	assert.NotContains(t, err.Error(), "shop")

	require.ErrorIs(t, eps.Check("", "https://billing.example.com/hooks/paid"), ErrEndpointURL,
		"billing's receiver verifies billing's secret only")
	for _, spelt := range []string{"https://billing.example.com:443/hooks/paid", "https://billing.example.com./hooks/paid",
		"https://billing.example.com/%68ooks/paid", "https://billing.example.com//hooks/paid"} {
		err := eps.Check("", spelt)
		require.ErrorIs(t, err, ErrEndpointURL, "billing's URL spelt otherwise: %s", spelt)
	}
}
