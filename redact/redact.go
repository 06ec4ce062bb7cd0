// Package redact keeps credentials out of error messages, log lines and
// archive reasons. A URL may carry a password (redis://:pw@host), a token in
// its path (Slack and Discord webhook URLs) or a signature in its query
// (?sig=…); an error from a URL parser may quote the URL whole.
package redact

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
)

// URL reduces raw to "scheme://host[:port]": no user info, path, query or
// fragment. A URL that does not parse is reduced by its text: the part after
// "://" up to the last '@' is dropped, and so is everything from the first
// '/', '?' or '#' after the host; text without "://" becomes "[not a URL]".
// The result never contains any of raw's user info.
func URL(raw string) string {
	if Ambiguous(raw) {
		// A '/', '?' or '#' in the user info would make the parser read part
		// of the password as the host: take the host after the last '@'.
		return byText(raw)
	}
	if u, err := url.Parse(raw); err == nil && u.Scheme != "" && u.Host != "" {
		return u.Scheme + "://" + u.Host
	}
	return byText(raw)
}

// Ambiguous reports whether raw has an '@' after the first '/', '?' or '#'
// that follows "://": either the user info holds one of those characters
// unescaped (the parser would cut the password there and read its first
// part as the host), or the path or query holds an '@'. A URL parser's
// errors and results are not safe to show for such a URL.
func Ambiguous(raw string) bool {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return false
	}
	at := strings.LastIndexByte(rest, '@')
	cut := strings.IndexAny(rest, "/?#")
	return at >= 0 && cut >= 0 && cut < at
}

// byText reduces raw to scheme and host by its text alone; see URL.
func byText(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || !isScheme(scheme) {
		return "[not a URL]"
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		rest = rest[at+1:]
	}
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		rest = rest[:end]
	}
	if strings.ContainsAny(rest, "%: \t\r\n") && !strings.HasPrefix(rest, "[") {
		// Not a plausible host[:port] (a password with '@' or '/' in it?):
		// show nothing of it.
		if h, port, found := strings.Cut(rest, ":"); !found || !isPort(port) || strings.ContainsAny(h, "% \t\r\n") {
			rest = "[unparsable host]"
		}
	}
	return scheme + "://" + rest
}

// ParseError returns the text of err, an error from parsing raw as a URL
// (url.Parse, or a client's ParseURL that wraps it), with raw shown only as
// URL(raw): "parse redis://127.0.0.1: invalid port ...". Percent-escape
// errors are replaced by a fixed text, since url.EscapeError quotes three
// bytes of the input, which may be in the password; so is every error for an
// Ambiguous URL, whose "host" may be part of the password (err may then be
// nil).
func ParseError(err error, raw string) string {
	if Ambiguous(raw) {
		return "an '@' follows a '/', '?' or '#': percent-encode '/' (%2F), '?' (%3F), '#' (%23) and '@' (%40) in the user name and password"
	}
	var esc url.EscapeError
	if errors.As(err, &esc) {
		return "invalid percent-escape: a % must start %XX with two hex digits (write a literal % in a password as %25)"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return Text(ue.Err.Error(), raw)
	}
	return Text(err.Error(), raw)
}

// Text replaces every occurrence in s of raw, of raw as Go quotes it, and of
// raw's password or user info when it has them, by URL(raw).
func Text(s, raw string) string {
	if raw == "" {
		return s
	}
	safe := URL(raw)
	s = strings.ReplaceAll(s, strconv.Quote(raw), strconv.Quote(safe))
	s = strings.ReplaceAll(s, raw, safe)
	if scheme, rest, ok := strings.Cut(raw, "://"); ok && isScheme(scheme) {
		if at := strings.LastIndexByte(rest, '@'); at > 0 {
			user := rest[:at]
			if _, pw, ok := strings.Cut(user, ":"); ok && pw != "" {
				s = strings.ReplaceAll(s, pw, "[REDACTED]")
			}
			s = strings.ReplaceAll(s, user, "[REDACTED]")
		}
	}
	return s
}

func isScheme(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range []byte(s) {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (i == 0 || !(c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return true
}

func isPort(s string) bool {
	if s == "" || len(s) > 5 {
		return false
	}
	_, err := strconv.Atoi(s)
	return err == nil && !strings.ContainsAny(s, "+-")
}
