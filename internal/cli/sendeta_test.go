package cli

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/redistest"
)

// With SMS paused for 10 minutes by an operator (longer than the plan
// looks past), send said the last of five sends at 1/s was due within
// seconds and limits show agreed. Both say now that the sends go after the
// pause, and that no time can be said while the pause lasts until resumed.
func TestSendAndLimitsShowWaitForAPause(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	r := run(t, "channels", "pause", "sms", "--for", "10m", "--redis", srv.URL())
	require.Equal(t, 0, r.code, r.stderr)

	var b strings.Builder
	b.WriteString("to,name\n")
	for i := range 5 {
		fmt.Fprintf(&b, "+1202555%04d,Ann\n", 1000+i)
	}
	path := writeFile(t, "paused.csv", b.String())
	start := time.Now()
	r = run(t, "send", "--channel", "sms", "--csv", path, "--from", "+12025550100", "--body", "Hi {name}", "--redis", srv.URL())
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "5 enqueued")
	m := regexp.MustCompile(`last send expected at (\S+) \(in [^;]+; held by sms:paused:channel until \S+, then 5 sends at ([\d.]+)/s; planned for (\S+)\)`).FindStringSubmatch(r.stdout)
	require.NotNil(t, m, r.stdout)
	at, err := time.Parse(time.RFC3339, m[1])
	require.NoError(t, err)
	planned, err := time.Parse(time.RFC3339, m[3])
	require.NoError(t, err)
	require.True(t, planned.Before(start.Add(time.Minute)), "the plan (%v) does not see the pause", planned)
	require.True(t, at.After(start.Add(10*time.Minute)), "the last send (%v) is after the pause ends", at)

	r = run(t, "limits", "show", "sms:sender:+12025550100", "--redis", srv.URL())
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `backlog\s+5 planned sends`, r.stdout)
	require.Regexp(t, `held by\s+sms:paused:channel \(paused until \S+\)`, r.stdout)
	require.Regexp(t, `drains\s+\S+ \(in \d+m[\d.]+s; held by sms:paused:channel until \S+, then 5 sends at [\d.]+/s; planned for \S+\)`, r.stdout)

	r = run(t, "channels", "pause", "sms", "--redis", srv.URL())
	require.Equal(t, 0, r.code, r.stderr)
	r = run(t, "limits", "show", "sms:sender:+12025550100", "--redis", srv.URL())
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `drains\s+unknown: sms:paused:channel: paused until resumed \(planned for \S+\)`, r.stdout)
	r = run(t, "send", "--channel", "sms", "--csv", writeFile(t, "more.csv", "to\n+12025551999\n"), "--from", "+12025550100", "--body", "Hi", "--redis", srv.URL())
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `last send expected: cannot be said: sms:paused:channel: paused until resumed \(planned for \S+\)`, r.stdout)
}
