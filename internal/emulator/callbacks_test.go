package emulator

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTwilioSignatureMatchesTwiliosExample(t *testing.T) {
	t.Parallel()
	// The worked example of Twilio's request validation docs.
	params := url.Values{"CallSid": {"CA1234567890ABCDE"}, "Caller": {"+14158675309"}, "Digits": {"1234"},
		"From": {"+14158675309"}, "To": {"+18005551212"}}
	require.Equal(t, "RSOYDt4T1cUTdK1PDd93/VVr8B8=", twilioSignature("12345", "https://mycompany.com/myapp.php?foo=1&bar=2", params))
}

type callbackPost struct {
	form url.Values
	sig  string
}

// callbackReceiver records the status callbacks posted to it.
func callbackReceiver(t *testing.T) (string, <-chan callbackPost) {
	t.Helper()
	posts := make(chan callbackPost, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		posts <- callbackPost{r.PostForm, r.Header.Get("X-Twilio-Signature")}
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/callbacks/twilio?x=1", posts
}

func nextPost(t *testing.T, posts <-chan callbackPost) callbackPost {
	t.Helper()
	select {
	case p := <-posts:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no status callback within 10s")
		return callbackPost{}
	}
}

func TestTwilioPostsSignedStatusCallbacks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	cb, posts := callbackReceiver(t)
	form := smsForm(fromA, toSMS)
	form.Set("StatusCallback", cb)
	r := h.sms(form, nil)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	var msg struct {
		SID string `json:"sid"`
	}
	require.NoError(t, json.Unmarshal(r.body, &msg))

	for _, want := range []string{"sent", "delivered"} {
		p := nextPost(t, posts)
		require.Equal(t, want, p.form.Get("MessageStatus"))
		require.Equal(t, msg.SID, p.form.Get("MessageSid"))
		require.Equal(t, fromA, p.form.Get("From"))
		require.Equal(t, toSMS, p.form.Get("To"))
		require.Equal(t, DefaultTwilioAccountSID, p.form.Get("AccountSid"))
		require.Empty(t, p.form.Get("ErrorCode"))
		require.Equal(t, twilioSignature(DefaultTwilioAuthToken, cb, p.form), p.sig, "signed over the full URL and the sorted params")
	}
}

func TestTwilioCarrierThrottleIsReportedLater(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	cb, posts := callbackReceiver(t)
	form := smsForm(fromA, "+1415555"+SuffixCarrierThrottle)
	form.Set("StatusCallback", cb)
	form.Set("MessagingServiceSid", "MG0123456789abcdef0123456789abcdef")
	require.Equal(t, http.StatusCreated, h.sms(form, nil).status)
	require.Equal(t, "sent", nextPost(t, posts).form.Get("MessageStatus"))
	p := nextPost(t, posts)
	require.Equal(t, "undelivered", p.form.Get("MessageStatus"))
	require.Equal(t, "30022", p.form.Get("ErrorCode"))
	require.Equal(t, "MG0123456789abcdef0123456789abcdef", p.form.Get("MessagingServiceSid"))
	require.Len(t, h.s.Records(), 1, "accepted and recorded")
}

func TestTwilioRefusesABadStatusCallback(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	for _, cb := range []string{"/relative", "ftp://x.example/cb", "https://user:pw@x.example/cb", "http://"} {
		form := smsForm(fromA, toSMS)
		form.Set("StatusCallback", cb)
		r := h.sms(form, nil)
		require.Equal(t, http.StatusBadRequest, r.status, cb)
		require.Contains(t, string(r.body), "21609", cb)
	}
}

// The WhatsApp emulator posts each accepted message's statuses to the
// app's webhook as Meta does: one post per status, "sent" then
// "delivered", signed with X-Hub-Signature-256 over the raw body.
func TestWhatsAppPostsSignedStatusWebhooks(t *testing.T) {
	t.Parallel()
	type post struct {
		body []byte
		sig  string
	}
	posts := make(chan post, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		posts <- post{b, r.Header.Get("X-Hub-Signature-256")}
	}))
	t.Cleanup(srv.Close)
	h := newHarness(t, Options{WhatsAppWebhookURL: srv.URL + "/callbacks/whatsapp"})
	r := h.waText(phoneID, "+16505551234")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	var sent struct {
		Messages []struct {
			ID string `json:"id"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(r.body, &sent))

	for _, want := range []string{"sent", "delivered"} {
		var p post
		select {
		case p = <-posts:
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s status within 10s", want)
		}
		mac := hmac.New(sha256.New, []byte(DefaultWhatsAppAppSecret))
		mac.Write(p.body)
		require.Equal(t, "sha256="+hex.EncodeToString(mac.Sum(nil)), p.sig)
		var hook struct {
			Object string `json:"object"`
			Entry  []struct {
				Changes []struct {
					Field string `json:"field"`
					Value struct {
						Metadata struct {
							PhoneNumberID string `json:"phone_number_id"`
						} `json:"metadata"`
						Statuses []struct {
							ID, Status, Timestamp string
							RecipientID           string `json:"recipient_id"`
						} `json:"statuses"`
					} `json:"value"`
				} `json:"changes"`
			} `json:"entry"`
		}
		require.NoError(t, json.Unmarshal(p.body, &hook))
		require.Equal(t, "whatsapp_business_account", hook.Object)
		c := hook.Entry[0].Changes[0]
		require.Equal(t, "messages", c.Field)
		require.Equal(t, phoneID, c.Value.Metadata.PhoneNumberID)
		st := c.Value.Statuses[0]
		require.Equal(t, want, st.Status)
		require.Equal(t, sent.Messages[0].ID, st.ID)
		require.Equal(t, "16505551234", st.RecipientID)
		require.NotEmpty(t, st.Timestamp)
	}
}

func TestWhatsAppWebhookURLIsChecked(t *testing.T) {
	t.Parallel()
	_, err := Start(Options{WhatsAppWebhookURL: "ftp://example.com/hook"})
	require.ErrorContains(t, err, "WhatsAppWebhookURL")
}
