package cli

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/throttle"
)

// After a provider throttle lowered a sender's rate, `limits show` and
// `limits adapted` print the effective rate beside the configured one,
// `events tail` the change, and `limits reset` forgets it.
func TestLimitsShowTheAdaptedRateBesideTheConfigured(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	key := "sms:sender:+12025550100"
	r := run(t, "limits", "set", key, "--rate", "5/s", "--redis", srv.URL())
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)

	// A worker's limiter saw Twilio 20429 for a send of the sender.
	lim := app.NewLimiter(config.Default(), rdb, nil)
	rule := defaultRule(t, "sms", "sender")
	ch, err := lim.AdaptDown(ctx, throttle.AdaptOptions{}, throttle.AdaptSignal{Code: 20429, Reason: "Too Many Requests"},
		throttle.Request{Key: key, Limit: rule.Limit})
	require.NoError(t, err)
	require.Len(t, ch, 1)

	r = run(t, "limits", "show", key, "--redis", srv.URL())
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	require.Regexp(t, `override\s+rate 5/s`, r.stdout)
	require.Regexp(t, `effective rate\s+1.25/s of 5/s configured \(adapted, last lowered after provider code 20429 at \S+; ceiling 5/s\)`, r.stdout)
	require.Regexp(t, `paced at\s+1.231/s`, r.stdout, "the pacing at the effective rate, less 1.5% headroom")

	r = run(t, "limits", "adapted", "--redis", srv.URL())
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	require.Regexp(t, `KEY\s+LIMIT\s+EFFECTIVE\s+CONFIGURED\s+CEILING\s+CODE\s+CHANGED\n`+regexp.QuoteMeta(key)+`\s+sender\s+1.25/s\s+5/s\s+5/s\s+20429\s+\S+ \(Too Many Requests\)\n`, r.stdout)

	r = run(t, "events", "tail", "--from-start", "--count", "1", "--type", "adapted", "--redis", srv.URL())
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	require.Regexp(t, `limits.adapted `+regexp.QuoteMeta(key)+` name=sender effective=1.25/s configured=5/s previous=5/s ceiling=5/s code=20429 reason="Too Many Requests"\n`, r.stdout)

	r = run(t, "limits", "reset", key, "--redis", srv.URL())
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	require.Equal(t, "reset 1 keys\n", r.stdout)
	r = run(t, "limits", "adapted", "--redis", srv.URL())
	require.Equal(t, 0, r.code)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, "no adapted limits")
	r = run(t, "limits", "show", key, "--redis", srv.URL())
	require.Regexp(t, `effective rate\s+5/s, as overridden by `+"`limits set` "+regexp.QuoteMeta(key)+` \(not adapted\)`, r.stdout)
}

// A daily cap's rate is shown per day, not as a fraction per second.
func TestLimitsShowADailyCapPerDay(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	r := run(t, "limits", "show", "whatsapp:daily:+12025550101", "--redis", srv.URL())
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	require.Regexp(t, `effective rate\s+250/day, as configured \(not adapted\)\n`, r.stdout)
	require.Equal(t, "250/day", ratePer(250.0/86400, 24*time.Hour))
	require.Equal(t, "0.1667/s", ratePer(1.0/6, 6*time.Second))
	require.Equal(t, "20/m", ratePer(20.0/60, time.Minute))
	require.Equal(t, "80/s", ratePer(80, time.Second))
}
