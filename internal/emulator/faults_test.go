package emulator

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFaultsAnswerASendersNextRequests(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{Tolerance: -1})
	h.s.Fault(ChannelWhatsApp, phoneID, 131048, 1)
	r := h.waText(phoneID, "+16505551234")
	require.Equal(t, http.StatusBadRequest, r.status)
	assert.Equal(t, 131048, r.graphErr(t).Code)
	// One request only; another sender never was faulted.
	assert.Equal(t, http.StatusOK, h.waText(phoneID, "+16505551235").status)

	h.s.Fault(ChannelWhatsApp, phoneID, 190, -1)
	for range 3 {
		r = h.waText(phoneID, "+16505551236")
		require.Equal(t, http.StatusUnauthorized, r.status)
		assert.Equal(t, 190, r.graphErr(t).Code)
	}
	h.s.ClearFaults()
	assert.Equal(t, http.StatusOK, h.waText(phoneID, "+16505551237").status)

	st := h.s.Stats()[ChannelWhatsApp]
	assert.Equal(t, 2, st.Accepted)
	assert.Equal(t, map[string]int{"131048": 1}, st.ThrottledByCode)
	assert.Equal(t, 3, st.Rejected)

	// Over HTTP, as `sluice emulate` users set them.
	r = h.do(http.MethodPost, h.s.WhatsAppURL()+"/_emulator/faults", strings.NewReader(`{"channel":"whatsapp","sender":"`+phoneID+`","code":4}`), nil)
	require.Equal(t, http.StatusNoContent, r.status)
	r = h.waText(phoneID, "+16505551238")
	require.Equal(t, http.StatusTooManyRequests, r.status)
	assert.Equal(t, 4, r.graphErr(t).Code)
	r = h.do(http.MethodPost, h.s.WhatsAppURL()+"/_emulator/faults", strings.NewReader(`{"channel":"fax"}`), nil)
	assert.Equal(t, http.StatusBadRequest, r.status)
}
