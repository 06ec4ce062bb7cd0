//go:build unix

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/emulator"
)

// adaptiveSender is the Twilio sender the adaptive run sends from.
const adaptiveSender = "+12025550100"

// Bounds of TestAdaptiveLimitFindsTheProviderRate.
const (
	adaptiveRun     = 75 * time.Second // from the first send the emulator accepts
	adaptiveSettled = 30 * time.Second // no throttle after this
	adaptiveTail    = 30 * time.Second // the delivered rate is measured over the run's last 30s
)

// TestAdaptiveLimitFindsTheProviderRate is the case: `limits set`
// 5/s on a sender the strict Twilio emulator takes at 1 segment a second.
// Three workers send a backlog of 200 SMS from it for 75s. The provider's
// throttles (20429) lower the sender's rate in every worker: `limits
// adapted`, the events stream and the metrics show the effective rate
// under the configured 5/s, and nothing is sent twice. The timing is
// asserted by the full run (make e2e-full) and logged in the small one
// (claims_test.go): the throttles stop within 30s of the first send, and
// over the last 30s the delivered rate is at least 0.9 of the provider's
// 1/s. On a busy host a late send draws a throttle of its own, and the
// rate it costs is the busy host's, not the adaptation's.
func TestAdaptiveLimitFindsTheProviderRate(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: runs three workers for 75s")
	}
	c := startCluster(t, func(emu *emulator.Server) string {
		return fmt.Sprintf("  whatsapp:\n    enabled: false\n  sms:\n    base_url: %q\n", emu.TwilioURL())
	})
	key := "sms:sender:" + adaptiveSender
	out := runCLI(t, c.bin, c.env, "--config", c.cfgPath, "limits", "set", key, "--rate", "5/s")
	require.Contains(t, out, "override "+key+": rate 5/s")

	const rows = 200
	csv := filepath.Join(c.dir, "adaptive.csv")
	writeCSV(t, csv, rows, func(i int) string { return fmt.Sprintf("%s,Bo,%d", recipientN(i), i) })
	runCLI(t, c.bin, c.env, "--config", c.cfgPath, "send", "--channel", "sms", "--csv", csv,
		"--from", adaptiveSender, "--body", "Hi {name}, order {order_id} shipped.")

	// Sample the emulator's throttle count as the run goes; the run's
	// clock starts at the first accepted send.
	type sample struct {
		at        time.Time
		throttled int
	}
	var samples []sample
	var start time.Time
	deadline := time.Now().Add(adaptiveRun + 30*time.Second)
	for {
		st := c.emu.Stats()[emulator.ChannelSMS]
		now := time.Now()
		samples = append(samples, sample{now, st.Throttled})
		if start.IsZero() {
			if recs := c.emu.Records(); len(recs) > 0 {
				start = recs[0].At
			}
		}
		if !start.IsZero() && now.Sub(start) >= adaptiveRun {
			break
		}
		require.False(t, now.After(deadline), "no send accepted in %v", adaptiveRun+30*time.Second)
		for _, w := range c.workers {
			require.False(t, w.exited(), "%s exited", w.name)
		}
		time.Sleep(250 * time.Millisecond) // sampling period of the throttle count, not a wait for a condition
	}
	end := samples[len(samples)-1]

	var settledAt sample // the last sample at or before start + adaptiveSettled
	var timeline []string
	for _, s := range samples {
		if !s.at.After(start.Add(adaptiveSettled)) {
			settledAt = s
		}
		if len(timeline) == 0 || !strings.HasSuffix(timeline[len(timeline)-1], fmt.Sprintf(" %d", s.throttled)) {
			timeline = append(timeline, fmt.Sprintf("%+.1fs %d", s.at.Sub(start).Seconds(), s.throttled))
		}
	}
	recs := c.emu.Records()
	tailFrom := start.Add(adaptiveRun - adaptiveTail)
	var tail, total int
	for _, r := range recs {
		if r.Sender != adaptiveSender {
			continue
		}
		total++
		if !r.At.Before(tailFrom) && !r.At.After(start.Add(adaptiveRun)) {
			tail++
		}
	}
	delivered := float64(tail) / adaptiveTail.Seconds()
	// Each accepted send and its gap to the one before: a gap shorter than
	// the pacing says is a send that reached the emulator late (a loaded
	// host) or a pacing fault.
	var at []string
	for i, r := range recs {
		gap := 0.0
		if i > 0 {
			gap = r.At.Sub(recs[i-1].At).Seconds()
		}
		at = append(at, fmt.Sprintf("%+.2f(%.2f)", r.At.Sub(start).Seconds(), gap))
	}
	t.Logf("accepted at (gap), seconds since the first: %s", strings.Join(at, " "))
	adapted := runCLI(t, c.bin, c.env, "--config", c.cfgPath, "limits", "adapted")
	events := runCLI(t, c.bin, c.env, "--config", c.cfgPath, "events", "tail", "--from-start", "--type", "limits.adapted", "--count", "1")
	t.Logf("limits set 5/s against the emulator's 1/s: %d throttle responses (20429) in %v, %d by +%v; %d accepted, %d in the last %v: %.3f/s (%.3f of the provider's 1/s)\nthrottles over time (since the first accepted send): %s\n%s%s",
		end.throttled, adaptiveRun, settledAt.throttled, adaptiveSettled, total, tail, adaptiveTail, delivered, delivered/1,
		strings.Join(timeline, ", "), adapted, events)

	timingClaim(t, settledAt.throttled == end.throttled, "%d throttle responses after +%v, none", end.throttled-settledAt.throttled, adaptiveSettled)
	timingClaim(t, delivered >= 0.9, "delivered rate over the last %v %.3f/s, at least 0.9 of the provider's 1/s", adaptiveTail, delivered)
	require.Zero(t, c.emu.Stats()[emulator.ChannelSMS].Duplicates)
	require.Positive(t, end.throttled, "5/s against the provider's 1/s drew no throttle")
	require.Regexp(t, `(?m)^`+strings.ReplaceAll(key, "+", `\+`)+`\s+sender\s+\S+/s\s+5/s\s`, adapted, "limits adapted shows the sender")
	var adaptedJSON []struct {
		Key                   string
		Configured, Effective float64
	}
	require.NoError(t, json.Unmarshal(runCLIStdout(t, c.bin, c.env, "--config", c.cfgPath, "limits", "adapted", "--json"), &adaptedJSON))
	found := false
	for _, a := range adaptedJSON {
		if a.Key == key {
			found = true
			require.Equal(t, 5.0, a.Configured, "%s configured rate", key)
			require.Less(t, a.Effective, a.Configured, "%s: the throttles lowered the effective rate", key)
		}
	}
	require.True(t, found, "limits adapted --json lists %s: %+v", key, adaptedJSON)
	require.Contains(t, events, "limits.adapted "+key+" name=sender")

	// The workers' metrics carry the effective rate beside the configured.
	var eff, cfg bool
	for _, w := range c.workers {
		resp, err := c.hc.Get("http://" + w.httpAddr + "/metrics")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			eff = eff || strings.HasPrefix(line, `sluice_limit_effective_rate{channel="sms",limit="sender"}`)
			cfg = cfg || line == `sluice_limit_configured_rate{channel="sms",limit="sender"} 5`
			require.NotContains(t, line, key, "no metric names the sender's number")
		}
		resp.Body.Close()
	}
	require.True(t, eff && cfg, "sluice_limit_effective_rate and sluice_limit_configured_rate of the sender in /metrics")
}
