package emulator

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SuffixCarrierThrottle: a Twilio recipient whose digits end in it is
// accepted (201), and its status callback then reports the message
// undelivered with ErrorCode 30022, carrier throughput exceeded: the
// throttle Twilio only reports after the send (PROVIDERS.md, Twilio table).
const SuffixCarrierThrottle = "0022"

// statusCallbackTimeout bounds one status callback post.
const statusCallbackTimeout = 5 * time.Second

// validCallbackURL reports whether a StatusCallback is an absolute http(s)
// URL with a host (Twilio refuses others with 21609).
func validCallbackURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Hostname() != "" && u.User == nil
}

// twilioSignature is X-Twilio-Signature: base64 of the HMAC-SHA1, keyed with
// the auth token, of the URL followed by each POST parameter's name and
// value, names sorted (Twilio's webhook security docs).
func twilioSignature(token, u string, params url.Values) string {
	mac := hmac.New(sha1.New, []byte(token))
	mac.Write([]byte(u))
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range params[k] {
			mac.Write([]byte(k + v))
		}
	}
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// statusCallbacks posts an accepted message's status changes to its
// StatusCallback, signed, one after the other as Twilio does: "sent", then
// "delivered", or "undelivered" with ErrorCode 30022 for a recipient ending
// in SuffixCarrierThrottle. Best effort: a post that fails is dropped. It
// runs in the background; Close cancels it.
func (s *Server) statusCallbacks(callback, sid string, f twilioForm) {
	final, code := "delivered", ""
	if strings.HasSuffix(f.to, SuffixCarrierThrottle) {
		final, code = "undelivered", "30022"
	}
	base := url.Values{"MessageSid": {sid}, "SmsSid": {sid}, "AccountSid": {s.opts.TwilioAccountSID},
		"To": {f.to}, "ApiVersion": {"2010-04-01"}}
	if f.from != "" {
		base.Set("From", f.from)
	}
	if f.service != "" {
		base.Set("MessagingServiceSid", f.service)
	}
	s.inBackground(func(hc *http.Client) {
		for _, status := range []string{"sent", final} {
			p := url.Values{}
			for k, v := range base {
				p[k] = v
			}
			p.Set("MessageStatus", status)
			p.Set("SmsStatus", status)
			if status == final && code != "" {
				p.Set("ErrorCode", code)
			}
			if !s.postStatus(hc, callback, p) {
				return
			}
		}
	})
}

// waWebhook is a WhatsApp Cloud API webhook post of message statuses
// (Meta's "messages" field; value.statuses).
type waWebhook struct {
	Object string      `json:"object"`
	Entry  []waHookEnt `json:"entry"`
}

type waHookEnt struct {
	ID      string         `json:"id"`
	Changes []waHookChange `json:"changes"`
}

type waHookChange struct {
	Field string      `json:"field"`
	Value waHookValue `json:"value"`
}

type waHookValue struct {
	MessagingProduct string       `json:"messaging_product"`
	Metadata         waHookMeta   `json:"metadata"`
	Statuses         []waHookStat `json:"statuses"`
}

type waHookMeta struct {
	DisplayPhoneNumber string `json:"display_phone_number"`
	PhoneNumberID      string `json:"phone_number_id"`
}

type waHookStat struct {
	ID          string `json:"id"`
	Status      string `json:"status"`
	Timestamp   string `json:"timestamp"`
	RecipientID string `json:"recipient_id"`
}

// whatsAppSignature is X-Hub-Signature-256: "sha256=" and the hex
// HMAC-SHA256 of the raw body, keyed with the app secret (Meta's webhook
// docs, "Validating payloads").
func whatsAppSignature(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// whatsAppStatuses posts an accepted WhatsApp message's statuses to
// Options.WhatsAppWebhookURL, signed, one post per status as Meta does:
// "sent", then "delivered". Best effort, in the background; Close cancels
// them. Nothing is posted without a webhook URL.
func (s *Server) whatsAppStatuses(phoneID, wamid, digits string) {
	hook := s.opts.WhatsAppWebhookURL
	if hook == "" {
		return
	}
	s.inBackground(func(hc *http.Client) {
		for _, status := range []string{"sent", "delivered"} {
			post := waWebhook{Object: "whatsapp_business_account", Entry: []waHookEnt{{ID: "emulated-waba", Changes: []waHookChange{{
				Field: "messages",
				Value: waHookValue{MessagingProduct: "whatsapp", Metadata: waHookMeta{DisplayPhoneNumber: phoneID, PhoneNumberID: phoneID},
					Statuses: []waHookStat{{ID: wamid, Status: status, Timestamp: strconv.FormatInt(s.opts.Clock().Unix(), 10), RecipientID: digits}}},
			}}}}}
			body, err := json.Marshal(post)
			if err != nil {
				return
			}
			if !s.post(hc, hook, body, http.Header{"Content-Type": {"application/json"}, "User-Agent": {"facebookexternalua"},
				"X-Hub-Signature-256": {whatsAppSignature(s.opts.WhatsAppAppSecret, body)}}) {
				return
			}
		}
	})
}

// postStatus posts one Twilio status callback; it reports whether to go on.
func (s *Server) postStatus(hc *http.Client, callback string, p url.Values) bool {
	return s.post(hc, callback, []byte(p.Encode()), http.Header{"Content-Type": {"application/x-www-form-urlencoded"},
		"User-Agent": {"TwilioProxy/1.1"}, "X-Twilio-Signature": {twilioSignature(s.opts.TwilioAuthToken, callback, p)}})
}

// post posts one status (body, with header) to u, dropping the answer; it
// reports whether to go on: the post was made and the server is not
// closing.
func (s *Server) post(hc *http.Client, u string, body []byte, header http.Header) bool {
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return false
	}
	req.Header = header
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return s.ctx.Err() == nil
}

// inBackground runs post, a status poster, in the background with a client
// that follows no redirects, unless the server is closing; Close cancels
// and waits for it.
func (s *Server) inBackground(post func(hc *http.Client)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return // closing
	}
	s.posts.Go(func() {
		post(&http.Client{Timeout: statusCallbackTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }})
	})
}

// cancelCallbacks ends the status callbacks in flight and waits for them
// (Close); none start after it.
func (s *Server) cancelCallbacks() {
	s.mu.Lock()
	s.cancel()
	s.mu.Unlock()
	s.posts.Wait()
}

// backgroundContext returns the context of the server's own requests.
func backgroundContext() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}
