package cli

import (
	"strings"
	"testing"
)

// TestRedisPasswordNeverPrinted runs every command that connects to Redis
// with URLs that do not parse, and checks that neither stdout nor stderr
// shows the password (issue 7: `serve --redis 'redis://:Secret4pw@[::1'`
// printed it in the parse error).
func TestRedisPasswordNeverPrinted(t *testing.T) {
	csvPath := writeFile(t, "c.csv", "to,name\n+12025550123,Ann\n")
	commands := map[string][]string{
		"serve":   {"serve"},
		"enqueue": {"enqueue", "sms", "--from", "+12025550100", "--to", "+12025550123", "--body", "hi"},
		"send":    {"send", "--channel", "sms", "--csv", csvPath, "--from", "+12025550100", "--body", "Hi {name}"},
		"events":  {"events", "tail"},
		"limits":  {"limits", "list"},
		"demo":    {"demo"},
	}
	urls := map[string][]string{ // URL → the strings that must not be printed
		"redis://:Secret4pw@[::1":                           {"Secret4pw"},
		"redis://:Se%zzcret@127.0.0.1:1":                    {"zzcret", "Se%zz", "%zz"},
		"redis://user:Secret4pw@host:notaport/0":            {"Secret4pw"},
		"redis://:Secret4pw@127.0.0.1:1/notadb":             {"Secret4pw"},
		"rediss://:Secret4pw@127.0.0.1:1/0?dial_timeout=zz": {"Secret4pw"},
	}
	for name, args := range commands {
		for url, secrets := range urls {
			r := run(t, append(args, "--redis", url)...)
			if r.code == 0 {
				t.Errorf("%s --redis %q: exit 0, want an error", name, url)
			}
			for _, s := range secrets {
				if strings.Contains(r.stdout, s) || strings.Contains(r.stderr, s) {
					t.Errorf("%s --redis %q printed %q:\nstdout: %s\nstderr: %s", name, url, s, r.stdout, r.stderr)
				}
			}
		}
	}
	// The same URL from the environment (REDIS_URL, redis.url_env).
	t.Setenv("REDIS_URL", "redis://:Secret4pw@[::1")
	for name, args := range commands {
		r := run(t, args...)
		if strings.Contains(r.stdout+r.stderr, "Secret4pw") {
			t.Errorf("%s with REDIS_URL printed the password:\n%s%s", name, r.stdout, r.stderr)
		}
	}
}
