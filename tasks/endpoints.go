package tasks

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// ErrUnknownEndpoint is wrapped by WebhookEndpoints.Check for a delivery
// naming an endpoint that is not listed (channels.webhook.endpoints).
var ErrUnknownEndpoint = errors.New("no signing secret for this endpoint")

// ErrEndpointURL is wrapped by WebhookEndpoints.Check for a delivery whose
// URL is not under the URL prefixes of the endpoint it names, or that names
// none while its URL is under a listed endpoint's.
var ErrEndpointURL = errors.New("url is not the endpoint's")

// WebhookEndpoints binds each named webhook endpoint
// (channels.webhook.endpoints.<name>.urls) to the URL prefixes its signing
// secret may sign for. Without the binding a delivery's url and payload,
// both the caller's, would let anyone who may enqueue webhooks have an
// endpoint's secret sign a body of theirs, sent to a URL of theirs, and
// replay it to the endpoint within its timestamp tolerance. Nil or empty:
// no endpoint is listed and every delivery is signed with the default
// secret, wherever it goes.
type WebhookEndpoints map[string][]string

// Check reports whether a delivery naming endpoint ("" for none) may go to
// rawURL:
//
//   - endpoint listed: rawURL must be under one of its prefixes
//     (URLUnder); otherwise an error wrapping ErrEndpointURL;
//   - endpoint not listed, while any is: an error wrapping
//     ErrUnknownEndpoint;
//   - no endpoint named: rawURL must be under no listed endpoint's prefix
//     (its receiver verifies with that endpoint's secret only, so a
//     delivery signed with the default secret would fail there); otherwise
//     an error wrapping ErrEndpointURL.
//
// The errors name neither the endpoint nor the URL (a URL may carry a
// token, and a tenant's key need not learn the configured names).
func (m WebhookEndpoints) Check(endpoint, rawURL string) error {
	if len(m) == 0 {
		return nil
	}
	if endpoint == "" {
		for _, prefixes := range m {
			for _, p := range prefixes {
				if URLUnder(rawURL, p) {
					return fmt.Errorf("%w: the url is under a listed endpoint's urls, whose receiver verifies that endpoint's secret only; name the endpoint", ErrEndpointURL)
				}
			}
		}
		return nil
	}
	prefixes, ok := m[endpoint]
	if !ok {
		return fmt.Errorf("%w: not one of channels.webhook.endpoints; name one of them, or none for the default secret", ErrUnknownEndpoint)
	}
	for _, p := range prefixes {
		if URLUnder(rawURL, p) {
			return nil
		}
	}
	return fmt.Errorf("%w: the url is not under the endpoint's urls (channels.webhook.endpoints.<name>.urls), so its secret may not sign for it", ErrEndpointURL)
}

// CheckEndpointURLPrefix reports whether prefix may bind an endpoint
// (channels.webhook.endpoints.<name>.urls): an absolute http or https URL
// with a host, and no user info, query, fragment, dot segment ("." or
// ".." between slashes) or backslash in its path. The error says which.
func CheckEndpointURLPrefix(prefix string) error {
	u, err := url.Parse(prefix)
	switch {
	case err != nil:
		return errors.New("not a URL")
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.Opaque != "":
		return errors.New("want an absolute http or https URL such as https://hooks.example.com/billing/")
	case u.User != nil:
		return errors.New("must not hold user info")
	case u.RawQuery != "" || u.ForceQuery:
		return errors.New("must not hold a query: the prefix is matched on scheme, host and path")
	case u.Fragment != "" || strings.Contains(prefix, "#"):
		return errors.New("must not hold a fragment")
	case !cleanPath(u):
		return errors.New(`its path must not hold "." or ".." segments or backslashes`)
	}
	return nil
}

// URLUnder reports whether rawURL is under prefix (see
// CheckEndpointURLPrefix): the same scheme and host (case-insensitive, the
// port included as written), and a path that is the prefix's path or
// continues it after a "/" (a prefix ending in "/" is continued by anything:
// "https://h/hooks" covers "https://h/hooks" and "https://h/hooks/a", not
// "https://h/hooksX"). The paths are compared as escaped, and rawURL must
// have no user info and a path with no dot segment (decoded, so "%2e%2e"
// counts) or backslash, which a receiver could resolve out of the prefix.
// A query in rawURL is allowed. A prefix that CheckEndpointURLPrefix
// refuses covers nothing.
func URLUnder(rawURL, prefix string) bool {
	if CheckEndpointURLPrefix(prefix) != nil {
		return false
	}
	p, _ := url.Parse(prefix)
	u, err := url.Parse(rawURL)
	if err != nil || u.User != nil || u.Opaque != "" || !cleanPath(u) ||
		!strings.EqualFold(u.Scheme, p.Scheme) || !strings.EqualFold(u.Host, p.Host) {
		return false
	}
	pp, up := p.EscapedPath(), u.EscapedPath()
	if pp == "" || pp == "/" {
		return true
	}
	if !strings.HasPrefix(up, pp) {
		return false
	}
	return len(up) == len(pp) || strings.HasSuffix(pp, "/") || up[len(pp)] == '/'
}

// cleanPath reports whether u's path, decoded and as written, holds no
// "." or ".." segment and no backslash.
func cleanPath(u *url.URL) bool {
	for _, path := range []string{u.Path, u.RawPath} {
		if strings.Contains(path, `\`) || strings.Contains(strings.ToLower(path), "%5c") {
			return false
		}
		for seg := range strings.SplitSeq(path, "/") {
			// ("..;" is ".." to servers that strip path parameters)
			if name, _, _ := strings.Cut(seg, ";"); name == "." || name == ".." {
				return false
			}
		}
	}
	return true
}
