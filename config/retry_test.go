package config

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/worker"
)

// A channel's retry, when given, replaces its default budget as a whole;
// the others keep theirs.
func TestRetryReplacesTheDefaultBudget(t *testing.T) {
	t.Parallel()
	cfg, err := Parse("sluice.yaml", doc(
		"channels:",
		"  webhook:",
		"    retry:",
		"      max_age: 48h",
		"  sms:",
		"    retry: {schedule: [1m, 10m], max_attempts: 5}",
	))
	require.NoError(t, err)
	for name, want := range map[string]worker.RetryBudget{
		"webhook":  {MaxAge: 48 * time.Hour},
		"sms":      {Schedule: []time.Duration{time.Minute, 10 * time.Minute}, MaxAttempts: 5},
		"whatsapp": worker.DefaultProviderRetry,
		"http":     worker.DefaultWebhookRetry,
	} {
		if diff := cmp.Diff(want, cfg.Channels[name].Retry); diff != "" {
			t.Errorf("%s retry (-want +got):\n%s", name, diff)
		}
	}
}
