package cli

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/emulator"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/throttle"
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

// scanCalls is how many SCAN commands srv has run (INFO commandstats).
func scanCalls(t *testing.T, srv *redistest.Server) int {
	t.Helper()
	info, err := srv.Client(t).Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^cmdstat_scan:calls=(\d+),`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return n
}

// pauseFor pauses key on srv's limiter, as a worker does after a provider
// throttle, for wait.
func pauseFor(t *testing.T, srv *redistest.Server, key string, wait time.Duration) {
	t.Helper()
	lim := app.NewLimiter(config.Default(), srv.Client(t), nil)
	_, err := lim.Pause(context.Background(), key, throttle.PauseOptions{Wait: wait, Code: 131048, Reason: "spam rate limit"})
	require.NoError(t, err)
}

// sendRows runs `sluice send` of one campaign to tos on channel (its
// sender flags in args) and returns its stdout and how many SCAN commands
// srv ran meanwhile.
func sendRows(t *testing.T, srv *redistest.Server, campaign string, tos []string, args ...string) (string, int) {
	t.Helper()
	path := writeFile(t, campaign+".csv", "to,name\n"+strings.Join(tos, ",Ann\n")+",Ann\n")
	before := scanCalls(t, srv)
	r := run(t, append([]string{"send", "--csv", path, "--redis", srv.URL()}, args...)...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, fmt.Sprintf("%d enqueued", len(tos)))
	return r.stdout, scanCalls(t, srv) - before
}

// send estimates a campaign's end from the pauses that can hold its keys,
// read by name: it walks no keyspace (no SCAN, however many keys Redis
// holds), and still finds a number's pause, a pair's and the channel's.
func TestSendFindsThePausesOfItsKeysWithoutAScan(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const pnid = "106540352242922"
	wa := []string{"--channel", "whatsapp", "--phone-number-id", pnid, "--template", "order_update", "--params", "name"}
	// Another number's pause holds none of the campaign's keys.
	pauseFor(t, srv, throttle.PauseKey("whatsapp", "sender", "106540352242923"), time.Hour)
	pauseFor(t, srv, throttle.PauseKey("whatsapp", "sender", pnid), 10*time.Minute)
	out, scans := sendRows(t, srv, "number", []string{"+12025550101", "+12025550102"}, wa...)
	require.Regexp(t, `last send expected at \S+ \(in [^;]+; held by whatsapp:paused:sender:`+pnid+` until \S+, then`, out)
	require.Zero(t, scans, "SCAN calls while sending")

	// The pair's pause outlasts the number's.
	pauseFor(t, srv, throttle.PauseKey("whatsapp", "pair", pnid+":+12025550104"), 20*time.Minute)
	out, scans = sendRows(t, srv, "pair", []string{"+12025550103", "+12025550104"}, wa...)
	require.Regexp(t, `held by whatsapp:paused:pair:`+pnid+`:\+12025550104 until \S+, then 1 send at`, out)
	require.Zero(t, scans, "SCAN calls while sending")

	r := run(t, "channels", "pause", "whatsapp", "--for", "30m", "--redis", srv.URL())
	require.Equal(t, 0, r.code, r.stderr)
	out, scans = sendRows(t, srv, "channel", []string{"+12025550105"}, wa...)
	require.Regexp(t, `held by whatsapp:paused:channel until \S+`, out)
	require.Zero(t, scans, "SCAN calls while sending")
}

// An SMS account's pause names the Twilio account SID, which no limiter
// key of a campaign does: send reads it under the SID its environment
// gives serve, without a scan; where the SID is not set it lists the
// channel's pauses (a scan), as before, and finds it all the same. Not
// parallel: it sets the environment.
func TestSendFindsAnSMSAccountPause(t *testing.T) {
	srv := redistest.Start(t)
	sms := []string{"--channel", "sms", "--from", "+12025550100", "--body", "Hi {name}"}
	pauseFor(t, srv, throttle.PauseKey("sms", "sender", "+12025550100"), 10*time.Minute)
	pauseFor(t, srv, throttle.PauseKey("sms", "account", emulator.DefaultTwilioAccountSID), 20*time.Minute)
	held := `held by sms:paused:account:` + emulator.DefaultTwilioAccountSID + ` until \S+, then`

	t.Setenv("TWILIO_ACCOUNT_SID", emulator.DefaultTwilioAccountSID)
	out, scans := sendRows(t, srv, "known", []string{"+12025550101", "+12025550102"}, sms...)
	require.Regexp(t, held, out)
	require.Zero(t, scans, "SCAN calls while sending")

	t.Setenv("TWILIO_ACCOUNT_SID", "")
	out, scans = sendRows(t, srv, "unknown", []string{"+12025550103"}, sms...)
	require.Regexp(t, held, out)
	require.NotZero(t, scans, "SCAN calls while sending, the account's SID unknown")
}
