package app

import (
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/emulator"
	"github.com/sluice-dev/sluice/internal/redistest"
)

// TestMalformedCredentialsRefuseToStart: a credential that cannot be right
// stops NewWorker (so `serve` does not start) with an error naming the
// variable and never its value (issue 7: a malformed WEBHOOK_SECRET let
// serve start and then archived every webhook).
func TestMalformedCredentialsRefuseToStart(t *testing.T) {
	t.Parallel()
	good := map[string]string{
		"WHATSAPP_TOKEN":     emulator.DefaultWhatsAppToken,
		"TWILIO_ACCOUNT_SID": emulator.DefaultTwilioAccountSID,
		"TWILIO_AUTH_TOKEN":  emulator.DefaultTwilioAuthToken,
		"WEBHOOK_SECRET":     emulator.DefaultWebhookSecret,
	}
	bad := []struct{ env, value, why string }{
		{"WEBHOOK_SECRET", "supersecretvalue", "prefix missing"},
		{"WEBHOOK_SECRET", "whsec_not*base64!!", "not standard base64"},
		{"WEBHOOK_SECRET", "whsec_c2hvcnRzZWNyZXQ=", "want 24–64 bytes"},
		{"WHATSAPP_TOKEN", "EAAGtokenvalue\n", "whitespace"},
		{"WHATSAPP_TOKEN", "EAAG token", "spaces or control characters"},
		{"TWILIO_AUTH_TOKEN", " 0123456789abcdef0123456789abcdef", "whitespace"},
		{"TWILIO_ACCOUNT_SID", "0123456789abcdef0123456789abcdefXY", "AC followed by 32 hex digits"},
	}
	for _, b := range bad {
		secrets := maps.Clone(good)
		secrets[b.env] = b.value
		_, err := NewWorker(config.Default(), nil, nil, Options{Secrets: func(env string) (string, error) { return secrets[env], nil }})
		require.Error(t, err, "%s=%q", b.env, b.value)
		require.Contains(t, err.Error(), "env "+b.env, "the error names the variable")
		require.Contains(t, err.Error(), b.why)
		require.NotContains(t, err.Error(), strings.TrimSpace(strings.TrimPrefix(b.value, "whsec_")), "the value is never shown")
	}
	rdb := redistest.Start(t).Client(t)
	w, err := NewWorker(config.Default(), rdb, NewLimiter(config.Default(), rdb, nil), Options{Secrets: func(env string) (string, error) { return good[env], nil }})
	require.NoError(t, err)
	require.NotNil(t, w)
}
