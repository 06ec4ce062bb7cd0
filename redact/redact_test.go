package redact

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestURLKeepsOnlySchemeAndHost(t *testing.T) {
	tests := map[string]string{
		"redis://:Secret4pw@127.0.0.1:6379/0":              "redis://127.0.0.1:6379",
		"redis://user:Secret4pw@[::1]:6379":                "redis://[::1]:6379",
		"redis://:Secret4pw@[::1":                          "redis://[::1",
		"redis://:Sec%zzret@127.0.0.1:1":                   "redis://127.0.0.1:1",
		"redis://:pw@host:1/p@th@x":                        "redis://x", // ambiguous: refused by ConnectURL
		"https://hooks.slack.com/services/T0/B0/XXXXXXXX":  "https://hooks.slack.com",
		"https://api.example.com/v1?sig=abcdef&token=zzzz": "https://api.example.com",
		"https://example.com#frag":                         "https://example.com",
		"redis://user:Secret4pw@host:notaport/0":           "redis://[unparsable host]",
		"redis://admin:7731#Zq@host:6379":                  "redis://host:6379",
		"redis://:Secr/et4pw@host:6379/0":                  "redis://host:6379",
		"not a url":                                        "[not a URL]",
		"":                                                 "[not a URL]",
		"unix:///run/redis.sock":                           "unix://",
	}
	for raw, want := range tests {
		if got := URL(raw); got != want {
			t.Errorf("URL(%q) = %q, want %q", raw, got, want)
		}
	}
}

func TestParseErrorNeverShowsThePassword(t *testing.T) {
	for _, raw := range []string{
		"redis://:Secret4pw@[::1",
		"redis://:Sec%zzret@127.0.0.1:1",
		"redis://:Secret4pw@127.0.0.1:1/abc",
		"redis://:Secret4pw@127.0.0.1:1/0?dial_timeout=zz",
		"redis://:Secret4pw@127.0.0.1:1/0?Secret4pw=1",
		"redis://:Secret4pw@host:notaport/0",
		"redis://Secret4pw@[::1]:x",
		"redis://:Secr/et4pw@host:6379",
		"redis://admin:4821/Secret4pw@redis.internal:6379/0",
		"redis://admin:Secret4pw#Zq@host:6379",
		"redis://admin:Secret4pw?x@host:6379",
	} {
		_, err := redis.ParseURL(raw)
		if err == nil && !Ambiguous(raw) {
			t.Fatalf("redis.ParseURL(%q) = nil error; the case tests nothing", raw)
		}
		msg := ParseError(err, raw) + " " + URL(raw)
		for _, leak := range []string{"Secret4pw", "zzret", "%zz", "Secr", "4821", "admin"} {
			if strings.Contains(msg, leak) {
				t.Errorf("ParseError(%q) = %q shows %q", raw, msg, leak)
			}
		}
	}
	var esc url.EscapeError = "%zz"
	if got := ParseError(&url.Error{Op: "parse", URL: "x", Err: esc}, "x"); strings.Contains(got, "zz") {
		t.Errorf("escape error shown: %q", got)
	}
	if got := ParseError(errors.New("plain"), "redis://h"); got != "plain" {
		t.Errorf("ParseError(plain) = %q", got)
	}
}

// FuzzURL checks that no password survives URL or Text, whatever surrounds it.
func FuzzURL(f *testing.F) {
	f.Add("redis", "Secret4pw", "[::1", "/0")
	f.Add("redis", "Sec%zzret", "127.0.0.1:1", "")
	f.Add("https", "p@ss/w:rd", "example.com", "/a?b=c")
	f.Add("rediss", "pw", "h", "#x")
	f.Fuzz(func(t *testing.T, scheme, password, host, tail string) {
		if len(password) < 6 || strings.Contains(scheme+host+tail, password) || strings.Contains("[REDACTED][unparsable host][not a URL]", password) {
			t.Skip() // a password also found elsewhere in the URL is not a secret of it
		}
		raw := scheme + "://:" + password + "@" + host + tail
		if got := URL(raw); strings.Contains(got, password) {
			t.Fatalf("URL(%q) = %q shows the password", raw, got)
		}
		msg := `parse "` + raw + `": error ` + raw
		if got := Text(msg, raw); strings.Contains(got, password) {
			t.Fatalf("Text(%q) = %q shows the password", msg, got)
		}
	})
}
