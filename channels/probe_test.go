package channels

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// The probes are requests of the providers' specs, and their answers are
// classified as sends' are: 2xx nil, a refused credential Unauthorized.
func TestProbesMatchSpecsAndClassify(t *testing.T) {
	t.Parallel()
	t.Run("whatsapp", func(t *testing.T) {
		s := requireSpec(t, whatsappSpec)
		srv, got := capture(t, http.StatusOK, `{"id":"106540352242922"}`, nil)
		c := &WhatsApp{BaseURL: srv.URL, Token: "EAAtesttoken", HTTP: srv.Client()}
		require.NoError(t, c.Probe(context.Background(), "106540352242922"))
		r := got()[0]
		require.Equal(t, http.MethodGet, r.method)
		require.Equal(t, "/v23.0/106540352242922?fields=id", r.path)
		require.Equal(t, "Bearer EAAtesttoken", r.header.Get("Authorization"))
		require.NoError(t, s.validate(r.asSpecRequest(s)))
	})
	t.Run("twilio", func(t *testing.T) {
		s := requireSpec(t, twilioSpec)
		srv, got := capture(t, http.StatusOK, `{"sid":"`+testAccountSID+`","status":"active"}`, nil)
		c := &Twilio{BaseURL: srv.URL, AccountSID: testAccountSID, AuthToken: "tok3n", HTTP: srv.Client()}
		require.NoError(t, c.Probe(context.Background()))
		r := got()[0]
		require.Equal(t, http.MethodGet, r.method)
		require.Equal(t, "/2010-04-01/Accounts/"+testAccountSID+".json", r.path)
		require.NoError(t, s.validate(r.asSpecRequest(s)))
	})
}

func TestProbeRefusedIsUnauthorized(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		body   string
		probe  func(url string, hc *http.Client) error
		code   int
	}{
		{"whatsapp 190", 401, `{"error":{"message":"Error validating access token: Session has expired","type":"OAuthException","code":190}}`,
			func(u string, hc *http.Client) error {
				return (&WhatsApp{BaseURL: u, Token: "EAAtesttoken", HTTP: hc}).Probe(context.Background(), "106540352242922")
			}, 190},
		{"whatsapp 403 no body", 403, ``,
			func(u string, hc *http.Client) error {
				return (&WhatsApp{BaseURL: u, Token: "EAAtesttoken", HTTP: hc}).Probe(context.Background(), "106540352242922")
			}, 0},
		{"twilio 20003", 401, `{"code":20003,"message":"Authenticate","more_info":"https://www.twilio.com/docs/errors/20003","status":401}`,
			func(u string, hc *http.Client) error {
				return (&Twilio{BaseURL: u, AccountSID: testAccountSID, AuthToken: "tok3n", HTTP: hc}).Probe(context.Background())
			}, 20003},
		{"twilio 401 html", 401, `<html>nope</html>`,
			func(u string, hc *http.Client) error {
				return (&Twilio{BaseURL: u, AccountSID: testAccountSID, AuthToken: "tok3n", HTTP: hc}).Probe(context.Background())
			}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, _ := capture(t, tt.status, tt.body, nil)
			err := tt.probe(srv.URL, srv.Client())
			var ce *Error
			require.True(t, errors.As(err, &ce), "%v", err)
			require.Equal(t, Unauthorized, ce.Class, "%v", err)
			require.Equal(t, ScopeChannel, ce.Scope)
			require.Equal(t, tt.code, ce.Code)
			require.NotContains(t, err.Error(), "tok3n")
			require.NotContains(t, err.Error(), "EAAtesttoken")
		})
	}
}

// A send refused for its credentials, with or without the provider's code,
// is Unauthorized with scope channel, never Permanent: the task is kept.
func TestSendUnauthorizedByStatus(t *testing.T) {
	t.Parallel()
	for _, status := range []int{401, 403} {
		_, err := whatsappResult(&reply{status: status, header: http.Header{}, body: []byte(`{"error":{"message":"m","type":"OAuthException","code":10}}`)}, testNow)
		var ce *Error
		require.True(t, errors.As(err, &ce))
		require.Equal(t, Unauthorized, ce.Class, "whatsapp %d", status)
		require.Equal(t, ScopeChannel, ce.Scope)
		_, err = twilioResult(&reply{status: status, header: http.Header{}, body: []byte(`{"code":20005,"message":"m","status":401}`)}, testNow)
		require.True(t, errors.As(err, &ce))
		require.Equal(t, Unauthorized, ce.Class, "twilio %d", status)
		require.Equal(t, ScopeChannel, ce.Scope)
	}
}
