package channels

import (
	"context"
	"errors"
	"fmt"
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

// A send refused for its credentials (401 with any code, 190 or 20003
// with any status, a 403 without a code) is Unauthorized with scope
// channel, never Permanent: the task is kept. A 403 with another code is
// a permission of the token, often for one number: Permanent.
func TestSendUnauthorizedByStatus(t *testing.T) {
	t.Parallel()
	wa := func(status int, body string) Class {
		_, err := whatsappResult(&reply{status: status, header: http.Header{}, body: []byte(body)}, testNow)
		var ce *Error
		require.True(t, errors.As(err, &ce))
		if ce.Class == Unauthorized {
			require.Equal(t, ScopeChannel, ce.Scope)
		}
		return ce.Class
	}
	tw := func(status int, body string) Class {
		_, err := twilioResult(&reply{status: status, header: http.Header{}, body: []byte(body)}, testNow)
		var ce *Error
		require.True(t, errors.As(err, &ce))
		if ce.Class == Unauthorized {
			require.Equal(t, ScopeChannel, ce.Scope)
		}
		return ce.Class
	}
	const waErr = `{"error":{"message":"m","type":"OAuthException","code":%d}}`
	require.Equal(t, Unauthorized, wa(401, fmt.Sprintf(waErr, 10)))
	require.Equal(t, Unauthorized, wa(400, fmt.Sprintf(waErr, 190)), "190 by its code, whatever the status")
	require.Equal(t, Unauthorized, wa(403, ``))
	require.Equal(t, Permanent, wa(403, fmt.Sprintf(waErr, 131005)), "access denied: a permission, not the credentials")
	require.Equal(t, Unauthorized, tw(401, `{"code":20005,"message":"m","status":401}`))
	require.Equal(t, Unauthorized, tw(400, `{"code":20003,"message":"m","status":400}`), "20003 by its code")
	require.Equal(t, Unauthorized, tw(403, `<html>forbidden</html>`))
	require.Equal(t, Permanent, tw(403, `{"code":20403,"message":"m","status":403}`))
}
