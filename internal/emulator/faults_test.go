package emulator

import (
	"net/http"
	"strings"
	"testing"
	"time"

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

// A bare 429 (Bare429) has no error code and no provider error body, and
// carries a Retry-After header when asked; a coded fault can carry one
// too. Both count as throttled; the sender's next request goes through.
func TestBare429FaultWithRetryAfter(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{Tolerance: -1})
	const from = "+14155550101"
	h.s.FaultWith(ChannelWhatsApp, phoneID, FaultOptions{Code: Bare429, RetryAfter: 4500 * time.Millisecond})
	h.s.FaultWith(ChannelSMS, from, FaultOptions{Code: Bare429, Count: 2})
	r := h.waText(phoneID, "+16505551234")
	require.Equal(t, http.StatusTooManyRequests, r.status)
	assert.Equal(t, "5", r.header.Get("Retry-After"), "whole seconds, rounded up")
	assert.Equal(t, "Too Many Requests\n", string(r.body))
	assert.NotContains(t, r.header.Get("Content-Type"), "json", "no error body to read a code from")
	assert.Equal(t, http.StatusOK, h.waText(phoneID, "+16505551235").status, "count 0 means 1")

	for range 2 {
		r = h.sms(smsForm(from, "+14155552345"), nil)
		require.Equal(t, http.StatusTooManyRequests, r.status)
		assert.Empty(t, r.header.Get("Retry-After"))
		assert.Equal(t, "Too Many Requests\n", string(r.body))
	}
	h.s.FaultWith(ChannelSMS, from, FaultOptions{Code: 20429, RetryAfter: 2 * time.Second})
	r = h.sms(smsForm(from, "+14155552346"), nil)
	require.Equal(t, http.StatusTooManyRequests, r.status)
	assert.Equal(t, "2", r.header.Get("Retry-After"))
	assert.Contains(t, string(r.body), `"code":20429`)

	assert.Equal(t, map[string]int{"429": 1}, h.s.Stats()[ChannelWhatsApp].ThrottledByCode)
	assert.Equal(t, map[string]int{"429": 2, "20429": 1}, h.s.Stats()[ChannelSMS].ThrottledByCode)

	// Over HTTP: retry_after in seconds.
	r = h.do(http.MethodPost, h.s.WhatsAppURL()+"/_emulator/faults",
		strings.NewReader(`{"channel":"whatsapp","sender":"`+phoneID+`","code":429,"retry_after":5}`), nil)
	require.Equal(t, http.StatusNoContent, r.status)
	r = h.waText(phoneID, "+16505551236")
	require.Equal(t, http.StatusTooManyRequests, r.status)
	assert.Equal(t, "5", r.header.Get("Retry-After"))
	r = h.do(http.MethodPost, h.s.WhatsAppURL()+"/_emulator/faults",
		strings.NewReader(`{"channel":"whatsapp","sender":"`+phoneID+`","code":429,"retry_after":-1}`), nil)
	assert.Equal(t, http.StatusBadRequest, r.status)
}

// A bare 503 is a load balancer's answer: no error body, counted as
// rejected. A delayed fault holds the request before it answers, so a
// client with a shorter timeout sees a timeout; nothing is accepted.
func TestBare503AndDelayedFaults(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{Tolerance: -1})
	h.s.FaultWith(ChannelWhatsApp, phoneID, FaultOptions{Code: Bare503})
	r := h.waText(phoneID, "+16505551234")
	require.Equal(t, http.StatusServiceUnavailable, r.status)
	assert.Equal(t, "Service Unavailable\n", string(r.body))

	h.s.FaultWith(ChannelWhatsApp, phoneID, FaultOptions{Code: Bare503, Delay: 300 * time.Millisecond})
	started := time.Now()
	r = h.waText(phoneID, "+16505551235")
	require.Equal(t, http.StatusServiceUnavailable, r.status)
	assert.GreaterOrEqual(t, time.Since(started), 300*time.Millisecond, "held before the answer")
	st := h.s.Stats()[ChannelWhatsApp]
	assert.Equal(t, 2, st.Rejected)
	assert.Zero(t, st.Accepted)
}
