package emulator

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestProbesAnswerAsTheCredentialsDo(t *testing.T) {
	h := newHarness(t, Options{})
	auth := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }
	wa := h.s.WhatsAppURL() + "/v23.0/106540352242922?fields=id"
	require.Equal(t, http.StatusOK, h.do(http.MethodGet, wa, nil, auth(DefaultWhatsAppToken)).status)
	require.Equal(t, http.StatusUnauthorized, h.do(http.MethodGet, wa, nil, auth("wrong")).status)

	// An expired-token fault answers probes too, and probes do not use it up.
	h.s.Fault(ChannelWhatsApp, "106540352242922", 190, 1)
	for range 2 {
		r := h.do(http.MethodGet, wa, nil, auth(DefaultWhatsAppToken))
		require.Equal(t, http.StatusUnauthorized, r.status)
		require.Contains(t, string(r.body), `"code":190`)
	}
	h.s.ClearFaults()
	require.Equal(t, http.StatusOK, h.do(http.MethodGet, wa, nil, auth(DefaultWhatsAppToken)).status)

	tw := h.s.TwilioURL() + "/2010-04-01/Accounts/" + DefaultTwilioAccountSID + ".json"
	basic := func(tok string) http.Header {
		req, _ := http.NewRequest(http.MethodGet, tw, nil)
		req.SetBasicAuth(DefaultTwilioAccountSID, tok)
		return req.Header
	}
	require.Equal(t, http.StatusOK, h.do(http.MethodGet, tw, nil, basic(DefaultTwilioAuthToken)).status)
	require.Equal(t, http.StatusUnauthorized, h.do(http.MethodGet, tw, nil, basic("wrong")).status)
	h.s.Fault(ChannelSMS, "+12025550100", 20003, -1)
	r := h.do(http.MethodGet, tw, nil, basic(DefaultTwilioAuthToken))
	require.Equal(t, http.StatusUnauthorized, r.status)
	require.Contains(t, string(r.body), `"code":20003`)
	require.Equal(t, http.StatusNotFound, h.do(http.MethodGet, h.s.TwilioURL()+"/2010-04-01/Accounts/AC00000000000000000000000000000000.json", nil, basic(DefaultTwilioAuthToken)).status)

	st := h.s.Stats()
	require.Equal(t, 5, st[ChannelWhatsApp].Probes)
	require.Equal(t, 4, st[ChannelSMS].Probes)
	require.Zero(t, st[ChannelWhatsApp].Rejected+st[ChannelSMS].Rejected, "probes are not counted as sends")
}
