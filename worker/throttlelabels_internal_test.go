package worker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/channels"
)

// A webhook's 429 is counted as code 429 on the host it pauses, not as
// code 0 on a "sender"; a provider's own code and scope are kept.
func TestThrottleLabelsNameTheStatusAndTheHost(t *testing.T) {
	hook := Channel{Name: "webhook", PauseScopes: HostPauseScopes}
	sms := Channel{Name: "sms", PauseScopes: SMSPauseScopes}
	for _, tc := range []struct {
		ch        Channel
		ce        channels.Error
		code      int
		wantScope string
	}{
		{hook, channels.Error{HTTPStatus: 429, Scope: channels.ScopeSender}, 429, ScopeHost},
		{hook, channels.Error{HTTPStatus: 503, Scope: channels.ScopeSender}, 503, ScopeHost},
		{sms, channels.Error{HTTPStatus: 429, Code: 20429, Scope: channels.ScopeAccount}, 20429, channels.ScopeAccount},
		{sms, channels.Error{HTTPStatus: 429, Scope: channels.ScopeSender}, 429, channels.ScopeSender},
	} {
		code, scope := throttleLabels(tc.ch, &tc.ce)
		require.Equal(t, []any{tc.code, tc.wantScope}, []any{code, scope}, "%s %+v", tc.ch.Name, tc.ce)
	}
}
