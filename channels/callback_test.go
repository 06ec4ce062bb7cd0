package channels

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/tasks"
)

func TestTwilioStatusCallbackMatchesSpec(t *testing.T) {
	t.Parallel()
	s := requireSpec(t, twilioSpec)
	srv, got := capture(t, http.StatusCreated, twilioOK, nil)
	cb := "https://sluice.example.com/callbacks/twilio"
	c := &Twilio{BaseURL: srv.URL, AccountSID: testAccountSID, AuthToken: "tok3n", HTTP: srv.Client(), StatusCallback: cb}
	_, err := c.Send(context.Background(), tasks.SMSSend{V: 1, From: "+12025550100", To: "+12025550123", Body: "hi"})
	require.NoError(t, err)
	reqs := got()
	require.Len(t, reqs, 1)
	require.Equal(t, "Body=hi&From=%2B12025550100&StatusCallback=https%3A%2F%2Fsluice.example.com%2Fcallbacks%2Ftwilio&To=%2B12025550123", string(reqs[0].body))
	require.NoError(t, s.validate(reqs[0].asSpecRequest(s)))
}

func TestTwilioStatusCallbackValidate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		url, err string
	}{
		{"", ""},
		{"https://sluice.example.com/callbacks/twilio", ""},
		{"http://127.0.0.1:8080/callbacks/twilio?tenant=a", ""},
		{"/callbacks/twilio", "want an absolute http(s) URL"},
		{"ftp://sluice.example.com/x", "want an absolute http(s) URL"},
		{"https://user:secret@sluice.example.com/x", "want no user info"},
		{"https://my_host.example.com/x", "want a host name without underscores"},
	} {
		c := &Twilio{AccountSID: testAccountSID, AuthToken: "tok3n", StatusCallback: tt.url}
		err := c.Validate()
		if tt.err == "" {
			require.NoError(t, err, tt.url)
			continue
		}
		require.ErrorContains(t, err, "Twilio.StatusCallback: "+tt.err, tt.url)
		require.NotContains(t, err.Error(), "secret", "user info is never echoed")
	}
}

func TestCodeErrorMatchesSynchronousAnswers(t *testing.T) {
	t.Parallel()
	// A code reported in a callback classifies exactly as the same code in
	// a send's answer.
	for _, tt := range []struct {
		provider string
		code     int
		reply    *reply
		result   func(*reply, time.Time, ...string) (Response, error)
	}{
		{ProviderTwilio, 30022, &reply{status: 400, body: []byte(`{"code":30022,"message":"x"}`)}, twilioResult},
		{ProviderTwilio, 30023, &reply{status: 400, body: []byte(`{"code":30023,"message":"x"}`)}, twilioResult},
		{ProviderTwilio, 21610, &reply{status: 400, body: []byte(`{"code":21610,"message":"x"}`)}, twilioResult},
		{ProviderWhatsApp, 130429, &reply{status: 400, body: []byte(`{"error":{"code":130429,"message":"x"}}`)}, whatsappResult},
		{ProviderWhatsApp, 131056, &reply{status: 400, body: []byte(`{"error":{"code":131056,"message":"x"}}`)}, whatsappResult},
		{ProviderWhatsApp, 131048, &reply{status: 400, body: []byte(`{"error":{"code":131048,"message":"x"}}`)}, whatsappResult},
	} {
		_, err := tt.result(tt.reply, testNow)
		var want *Error
		require.ErrorAs(t, err, &want)
		got, ok := CodeError(tt.provider, tt.code, "x", testNow)
		require.True(t, ok, "%s %d", tt.provider, tt.code)
		want.HTTPStatus = 0
		require.Equal(t, want, got, "%s %d", tt.provider, tt.code)
	}
	for _, code := range []int{0, 99999} {
		_, ok := CodeError(ProviderTwilio, code, "", testNow)
		require.False(t, ok, "code %d", code)
	}
	_, ok := CodeError(ProviderWebhook, 30022, "", testNow)
	require.False(t, ok, "a provider without a table")
	e, _ := CodeError(ProviderTwilio, 30022, "bad\x00"+strings.Repeat("é", 600), testNow)
	require.NotContains(t, e.Message, "\x00")
	require.LessOrEqual(t, len(e.Message), maxMessage+len("…"))
}
