package callbacks_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/delivery"
)

func whatsappRequest(body []byte, sig string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, "/callbacks/whatsapp", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	if sig != "" {
		req.Header.Set("X-Hub-Signature-256", sig)
	}
	return req
}

// webhookPost is a Cloud API webhook post with one status, in the shape
// of Meta's documented samples.
func webhookPost(id, status, errors string) []byte {
	if errors != "" {
		errors = `,"errors":[` + errors + `]`
	}
	return []byte(fmt.Sprintf(`{"object":"whatsapp_business_account","entry":[{"id":"102290129340398","changes":[{"value":{
"messaging_product":"whatsapp","metadata":{"display_phone_number":"15550783881","phone_number_id":%q},
"statuses":[{"id":%q,"status":%q,"timestamp":"1764064800","recipient_id":"12025550123",
"pricing":{"billable":true,"pricing_model":"PMP","category":"marketing"}%s}]},"field":"messages"}]}]}`, phoneID, id, status, errors))
}

func TestWhatsAppVerifyChallenge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	get := func(mode, token, challenge string) (int, string, http.Header) {
		q := url.Values{"hub.mode": {mode}, "hub.verify_token": {token}, "hub.challenge": {challenge}}
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/callbacks/whatsapp?"+q.Encode(), nil))
		return rec.Code, rec.Body.String(), rec.Header()
	}
	code, body, h := get("subscribe", verifyToken, "1158201444")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "1158201444", body)
	require.Equal(t, "text/plain; charset=utf-8", h.Get("Content-Type"))
	require.Equal(t, "nosniff", h.Get("X-Content-Type-Options"))

	for name, tc := range map[string][3]string{
		"wrong token":      {"subscribe", "verify-me-7f3b", "1158201444"},
		"token prefix":     {"subscribe", verifyToken[:5], "1158201444"},
		"no token":         {"subscribe", "", "1158201444"},
		"wrong mode":       {"unsubscribe", verifyToken, "1158201444"},
		"markup challenge": {"subscribe", verifyToken, "<script>alert(1)</script>"},
		"long challenge":   {"subscribe", verifyToken, strings.Repeat("1", 129)},
		"empty challenge":  {"subscribe", verifyToken, ""},
	} {
		code, body, _ := get(tc[0], tc[1], tc[2])
		require.Equal(t, http.StatusForbidden, code, name)
		require.NotContains(t, body, "script", name)
		require.NotContains(t, body, verifyToken, name)
	}
}

func TestWhatsAppCallbackRecordsSignedStatuses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.recordSent("whatsapp", wamid)
	body := webhookPost(wamid, "delivered", "")
	code, _ := e.do(whatsappRequest(body, metaSign(appSecret, body)))
	require.Equal(t, http.StatusOK, code)
	st, err := e.store.Get(context.Background(), "task-1")
	require.NoError(t, err)
	require.Equal(t, delivery.StateDelivered, st.State)
	require.Equal(t, int64(1764064800), st.At.Unix(), "the provider's timestamp")

	body = webhookPost(wamid, "sent", "")
	code, _ = e.do(whatsappRequest(body, metaSign(appSecret, body)))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, delivery.StateDelivered, e.state(), "a late sent changes nothing")
	require.Equal(t, 1.0, counter(t, e.reg, "sluice_delivery_status_total", map[string]string{"channel": "whatsapp", "status": "sent"}))
}

func TestWhatsAppCallbackRefusesBadSignatures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.recordSent("whatsapp", wamid)
	body := webhookPost(wamid, "failed", `{"code":131026,"title":"Message undeliverable"}`)
	other := webhookPost(wamid, "read", "")
	for name, sig := range map[string]string{
		"missing":       "",
		"wrong secret":  metaSign("another-secret", body),
		"other body":    metaSign(appSecret, other),
		"no prefix":     strings.TrimPrefix(metaSign(appSecret, body), "sha256="),
		"sha1 prefix":   "sha1=" + strings.TrimPrefix(metaSign(appSecret, body), "sha256="),
		"upper hex":     "sha256=" + strings.ToUpper(strings.TrimPrefix(metaSign(appSecret, body), "sha256=")),
		"truncated hex": metaSign(appSecret, body)[:40],
	} {
		code, _ := e.do(whatsappRequest(body, sig))
		require.Equal(t, http.StatusForbidden, code, name)
	}
	require.Equal(t, delivery.StateSent, e.state(), "nothing recorded")
}

func TestWhatsAppPairThrottlePausesThePair(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.recordSent("whatsapp", wamid)
	body := webhookPost(wamid, "failed", `{"code":131056,"title":"(Business Account, Consumer Account) pair rate limit hit","message":"x"}`)
	code, _ := e.do(whatsappRequest(body, metaSign(appSecret, body)))
	require.Equal(t, http.StatusOK, code)
	st, err := e.store.Get(context.Background(), "task-1")
	require.NoError(t, err)
	require.Equal(t, delivery.StateFailed, st.State)
	require.Equal(t, 131056, st.Code)
	require.Equal(t, "(Business Account, Consumer Account) pair rate limit hit", st.Reason)
	pz, err := e.lim.PauseOf(context.Background(), "whatsapp:paused:pair:"+phoneID+":"+recipient)
	require.NoError(t, err)
	require.NotNil(t, pz, "131056 pauses the pair")
	require.Equal(t, 131056, pz.Code)
}

func TestWhatsAppCallbackSkipsBadStatuses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.recordSent("whatsapp", wamid)
	// One bad status among good ones: the good ones apply.
	body := []byte(`{"object":"whatsapp_business_account","entry":[{"changes":[{"field":"messages","value":{"metadata":{"phone_number_id":"` + phoneID + `"},
"statuses":[{"id":"not-a-wamid","status":"read"},{"id":"` + wamid + `","status":"read","recipient_id":"12025550123"},
{"id":"` + wamid + `","status":"read","recipient_id":"+1 202"}]}}]}]}`)
	code, _ := e.do(whatsappRequest(body, metaSign(appSecret, body)))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, delivery.StateRead, e.state())
	require.Contains(t, e.logs.String(), "statuses[0]")
	require.Contains(t, e.logs.String(), "statuses[2]")

	for name, b := range map[string]string{
		"not json":   `{"object":`,
		"wrong type": `{"object":"whatsapp_business_account","entry":[{"changes":[{"value":{"statuses":[{"id":5}]}}]}]}`,
	} {
		code, _ := e.do(whatsappRequest([]byte(b), metaSign(appSecret, []byte(b))))
		require.Equal(t, http.StatusBadRequest, code, name)
	}
	// Another product's webhook is acknowledged and ignored.
	b := []byte(`{"object":"page","entry":[]}`)
	code, _ = e.do(whatsappRequest(b, metaSign(appSecret, b)))
	require.Equal(t, http.StatusOK, code)
}
