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
		"redis://:Secr/et4pw@127.0.0.1:6379":                {"Secr", "et4pw"},
		"redis://admin:7731#Zq@127.0.0.1:1":                 {"7731", "Zq", "admin"},
		"redis://admin:4821/xK9q@127.0.0.1:1/0":             {"4821", "xK9q", "admin"},
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

// TestPrivateTargetsRefusedAtEnqueue: enqueue and send refuse webhook and
// HTTP-call targets a worker would refuse (issue 7: enqueue accepted
// 10.0.0.1, 169.254.169.254, 192.168.1.1, [fd00::1] and
// [::ffff:169.254.169.254]); egress.allow_cidrs admits them. A name is
// held to the addresses it resolves to (issue 20: a name for 127.0.0.1 in
// /etc/hosts was accepted; TestMain's fake DNS stands in for it), and a
// name DNS does not know is refused. Nothing reaches Redis: the --redis
// URL points at a closed port.
func TestPrivateTargetsRefusedAtEnqueue(t *testing.T) {
	csvPath := writeFile(t, "c.csv", "to,name\n+12025550123,Ann\n")
	allow := writeFile(t, "allow.yaml", "egress: {allow_cidrs: [10.0.0.0/8]}\n")
	for _, target := range []string{"http://10.0.0.1/h?sig=Secret4sig", "http://169.254.169.254/", "http://192.168.1.1/",
		"http://[fd00::1]/", "http://[::ffff:169.254.169.254]/", "http://127.0.0.1/", "http://localhost/", "http://0.0.0.0/",
		"http://localhost-alias.test:8080/h?sig=Secret4sig", "https://nowhere.test/h"} {
		for _, args := range [][]string{
			{"enqueue", "webhook", "--url", target, "--event", "e", "--payload", "{}", "--key", "evt-1"},
			{"enqueue", "call", "--method", "GET", "--url", target},
			{"send", "--dry-run", "--channel", "webhook", "--csv", csvPath, "--url", target, "--event", "e"},
		} {
			r := run(t, append(args, "--redis", "redis://127.0.0.1:1")...)
			if r.code == 0 || !strings.Contains(r.stderr, "refused: ") && !strings.Contains(r.stderr, "no such host") {
				t.Errorf("%v: exit %d, want a refusal:\n%s", args, r.code, r.stderr)
			}
			if strings.Contains(r.stderr, "Secret4sig") {
				t.Errorf("%v: the error shows the URL's query:\n%s", args, r.stderr)
			}
		}
	}
	r := run(t, "--config", allow, "send", "--dry-run", "--channel", "webhook", "--csv", csvPath, "--url", "http://10.0.0.1/h", "--event", "e")
	if r.code != 0 {
		t.Errorf("egress.allow_cidrs 10.0.0.0/8: send exit %d, want 0:\n%s", r.code, r.stderr)
	}
}
