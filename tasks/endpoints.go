package tasks

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
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
// rawURL. While any endpoint is listed, rawURL must be in canonical form
// (CheckCanonicalURL), or the error wraps ErrEndpointURL; then:
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
// token, and a tenant's key need not learn the configured names). They do
// tell a caller who may enqueue webhooks whether a name is listed and
// whether a URL is under a listed endpoint's urls: a prefix must hold no
// secret.
func (m WebhookEndpoints) Check(endpoint, rawURL string) error {
	if len(m) == 0 {
		return nil
	}
	u, err := parseCanonical(rawURL)
	if err != nil {
		return &NotCanonicalError{Reason: err}
	}
	if endpoint == "" {
		for _, prefixes := range m {
			for _, p := range prefixes {
				if under(u, p) {
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
		if under(u, p) {
			return nil
		}
	}
	return fmt.Errorf("%w: the url is not under the endpoint's urls (channels.webhook.endpoints.<name>.urls), so its secret may not sign for it", ErrEndpointURL)
}

// NotCanonicalError is WebhookEndpoints.Check's error for a URL not in
// canonical form (CheckCanonicalURL); it wraps ErrEndpointURL, and Reason
// says what is wrong, naming no part of the URL.
type NotCanonicalError struct{ Reason error }

func (e *NotCanonicalError) Error() string {
	return ErrEndpointURL.Error() + ": while endpoints are listed a webhook's url must be in canonical form: " + e.Reason.Error()
}

func (e *NotCanonicalError) Unwrap() error { return ErrEndpointURL }

// CheckEndpointURLPrefix reports whether prefix may bind an endpoint
// (channels.webhook.endpoints.<name>.urls): an absolute http or https URL
// in canonical form (checkCanonical) with no query or fragment. The error
// says what is wrong.
func CheckEndpointURLPrefix(prefix string) error {
	_, err := parsePrefix(prefix)
	return err
}

// parsePrefix is CheckEndpointURLPrefix, returning the parsed prefix.
func parsePrefix(prefix string) (*url.URL, error) {
	u, err := parseCanonical(prefix)
	switch {
	case err != nil:
		return nil, err
	case u.RawQuery != "" || u.ForceQuery:
		return nil, errors.New("must not hold a query: the prefix is matched on scheme, host and path")
	case strings.Contains(prefix, "#"):
		return nil, errors.New("must not hold a fragment")
	}
	return u, nil
}

// CheckCanonicalURL reports whether rawURL is in the canonical form that
// URLUnder compares (checkCanonical). While endpoints are listed every
// webhook's URL must be, so that a URL's target has one reading: a URL
// spelt otherwise (":443", a host's trailing dot, "//", "%2e%2e") could
// reach an endpoint's receiver without being under its prefix.
func CheckCanonicalURL(rawURL string) error {
	_, err := parseCanonical(rawURL)
	return err
}

// parseCanonical is CheckCanonicalURL, returning the parsed URL.
func parseCanonical(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, errors.New("not a URL")
	}
	if err := checkCanonical(u); err != nil {
		return nil, err
	}
	return u, nil
}

// checkCanonical holds u to one reading of its target:
//
//   - scheme http or https, a host, no user info, no fragment;
//   - the host in ASCII (an internationalized name in its xn-- form), no
//     IPv6 zone, no trailing dot; a port, if any, in digits without a
//     leading zero and not the scheme's default (":443", ":0443", ":"
//     are refused);
//   - the path compared decoded (so "%62illing" is "billing", and any
//     escaping of an ordinary character is taken): no escaped "/" (%2F),
//     and decoded it is valid UTF-8 without control characters, "%",
//     backslash, "?" or "#", with no empty segment ("//") and no segment
//     that is dots and spaces only once Unicode-compatibility folded
//     (NFKC: "..", "...", ".. ", "．．", "‥"; before a ";" too, "..;");
//   - a query of printable ASCII without spaces.
//
// A receiver that decodes twice, trims, folds Unicode or resolves dot
// segments then finds the path Sluice compared.
func checkCanonical(u *url.URL) error {
	host, port := u.Hostname(), u.Port()
	switch {
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.Opaque != "":
		return errors.New("want an absolute http or https URL such as https://hooks.example.com/billing/")
	case u.User != nil:
		return errors.New("must not hold user info")
	case u.Fragment != "":
		return errors.New("must not hold a fragment")
	case strings.ContainsFunc(u.Host, func(r rune) bool { return r > 0x7e || r <= ' ' }):
		return errors.New("its host must be ASCII: write an internationalized name in its xn-- form")
	case strings.Contains(u.Host, "%"):
		return errors.New("its host must not hold an IPv6 zone")
	case strings.HasSuffix(host, "."):
		return errors.New("its host must not end in a dot")
	case strings.HasSuffix(u.Host, ":") || port != "" && (port[0] == '0' || strings.Trim(port, "0123456789") != ""):
		return errors.New("its port must be digits without a leading zero")
	case port == "443" && u.Scheme == "https" || port == "80" && u.Scheme == "http":
		return fmt.Errorf("leave out the port %s, the scheme's default", port)
	case strings.Contains(strings.ToUpper(u.EscapedPath()), "%2F"):
		return errors.New(`its path must not hold an escaped "/" (%2F)`)
	case !utf8.ValidString(u.Path):
		return errors.New("its path, decoded, must be valid UTF-8")
	case strings.ContainsFunc(u.Path, func(r rune) bool { return unicode.IsControl(r) || strings.ContainsRune(`%\?#`, r) }):
		return errors.New("its path, decoded, must hold no control character, '%', backslash, '?' or '#'")
	case strings.ContainsFunc(u.RawQuery, func(r rune) bool { return r <= ' ' || r >= 0x7f }):
		return errors.New("its query must be printable ASCII without spaces (escape the rest)")
	}
	segs := strings.Split(u.Path, "/")
	for i, seg := range segs {
		if i == 0 {
			continue // before the leading '/'
		}
		name, _, _ := strings.Cut(seg, ";")
		switch {
		case seg == "" && i != len(segs)-1:
			return errors.New(`its path must not hold an empty segment ("//")`)
		case seg != "" && strings.Trim(norm.NFKC.String(name), ". ") == "":
			return errors.New(`its path must not hold a segment of dots and spaces only, such as ".."`)
		}
	}
	return nil
}

// URLUnder reports whether rawURL is under prefix: both in canonical form
// (CheckEndpointURLPrefix, CheckCanonicalURL), the same scheme and host
// (ASCII, case aside; the port as written), and a decoded path that is the
// prefix's or continues it after a "/" (a prefix ending in "/" is
// continued by anything: "https://h/hooks" covers "https://h/hooks" and
// "https://h/hooks/a", not "https://h/hooksX"). A query in rawURL is
// allowed. A URL or prefix not in canonical form is under nothing.
func URLUnder(rawURL, prefix string) bool {
	u, err := parseCanonical(rawURL)
	return err == nil && under(u, prefix)
}

// under is URLUnder for a URL parsed and found canonical.
func under(u *url.URL, prefix string) bool {
	p, err := parsePrefix(prefix)
	if err != nil {
		return false
	}
	if !strings.EqualFold(u.Scheme, p.Scheme) || !asciiEqualFold(u.Host, p.Host) {
		return false
	}
	pp, up := p.Path, u.Path
	if pp == "" || pp == "/" {
		return true
	}
	if !strings.HasPrefix(up, pp) {
		return false
	}
	return len(up) == len(pp) || strings.HasSuffix(pp, "/") || up[len(pp)] == '/'
}

// asciiEqualFold is strings.EqualFold for ASCII text only: Unicode folding
// (K for "K", "ſ" for "s") must not make two hosts one.
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
