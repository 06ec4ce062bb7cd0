package callbacks

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/internal/delivery"
)

// WhatsAppSignature is X-Hub-Signature-256 for a webhook post's raw body:
// "sha256=" and the hex HMAC-SHA256 of body keyed with the Meta app's
// secret.
func WhatsAppSignature(appSecret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(appSecret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// challenge is what a verify request may ask to have echoed: Meta sends
// a number; anything else short and plain is echoed too, nothing that a
// browser could take for markup.
var challenge = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// whatsappVerify serves GET /callbacks/whatsapp: Meta's subscription
// check. With hub.mode=subscribe and hub.verify_token equal to the
// configured one it echoes hub.challenge as text/plain; else 403.
func (s *server) whatsappVerify(w http.ResponseWriter, r *http.Request) {
	const provider = channels.ProviderWhatsApp
	if s.opts.WhatsAppAppSecret == "" || s.opts.WhatsAppVerifyToken == "" {
		s.answer(w, provider, resultNotConfigured, http.StatusNotFound, "whatsapp callbacks are not configured")
		return
	}
	q := r.URL.Query()
	c := q.Get("hub.challenge")
	if q.Get("hub.mode") != "subscribe" || !sameSecret(q.Get("hub.verify_token"), s.opts.WhatsAppVerifyToken) || !challenge.MatchString(c) {
		s.log.Warn("whatsapp webhook verification refused: mode, verify token or challenge wrong", "remote", r.RemoteAddr, "mode_subscribe", q.Get("hub.mode") == "subscribe")
		s.answer(w, provider, resultForbidden, http.StatusForbidden, "verification refused")
		return
	}
	s.log.Info("whatsapp webhook verified", "remote", r.RemoteAddr)
	s.answer(w, provider, resultVerified, http.StatusOK, "")
	_, _ = w.Write([]byte(c))
}

// sameSecret compares in constant time, whatever the lengths.
func sameSecret(got, want string) bool {
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return hmac.Equal(a[:], b[:]) && got != ""
}

// whatsappPost is the part of a webhook post Sluice reads (Meta's
// WhatsApp Cloud API webhooks, field "messages", value.statuses).
type whatsappPost struct {
	Object string `json:"object"`
	Entry  []struct {
		Changes []struct {
			Field string `json:"field"`
			Value struct {
				Metadata struct {
					PhoneNumberID string `json:"phone_number_id"`
				} `json:"metadata"`
				Statuses []whatsappStatus `json:"statuses"`
			} `json:"value"`
		} `json:"changes"`
	} `json:"entry"`
}

type whatsappStatus struct {
	ID          string `json:"id"`
	Status      string `json:"status"`
	Timestamp   string `json:"timestamp"`
	RecipientID string `json:"recipient_id"`
	Errors      []struct {
		Code    int    `json:"code"`
		Title   string `json:"title"`
		Message string `json:"message"`
	} `json:"errors"`
}

var whatsappStatuses = map[string]delivery.State{
	"sent": delivery.StateSent, "delivered": delivery.StateDelivered, "read": delivery.StateRead, "failed": delivery.StateFailed,
}

var (
	digits = regexp.MustCompile(`^[0-9]{1,32}$`)
	// wamid is a WhatsApp message id: "wamid." and base64.
	wamid = regexp.MustCompile(`^[A-Za-z0-9._=+/-]{1,200}$`)
)

// whatsapp serves POST /callbacks/whatsapp.
func (s *server) whatsapp(w http.ResponseWriter, r *http.Request) {
	const provider = channels.ProviderWhatsApp
	if s.opts.WhatsAppAppSecret == "" || s.opts.WhatsAppVerifyToken == "" {
		s.answer(w, provider, resultNotConfigured, http.StatusNotFound, "whatsapp callbacks are not configured")
		return
	}
	body, ok := s.readBody(w, r, provider)
	if !ok {
		return
	}
	sig := r.Header.Get("X-Hub-Signature-256")
	if !strings.HasPrefix(sig, "sha256=") || !hmac.Equal([]byte(sig), []byte(WhatsAppSignature(s.opts.WhatsAppAppSecret, body))) {
		s.log.Warn("whatsapp callback: signature missing or wrong; check the app secret", "remote", r.RemoteAddr, "signed", sig != "")
		s.answer(w, provider, resultForbidden, http.StatusForbidden, "bad signature")
		return
	}
	var post whatsappPost
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&post); err != nil {
		s.answer(w, provider, resultBadRequest, http.StatusBadRequest, "body: want the JSON of a webhook post")
		return
	}
	if post.Object != "whatsapp_business_account" {
		s.answer(w, provider, resultOK, http.StatusOK, "") // another product's webhook: nothing of ours
		return
	}
	sts := s.whatsappStatuses(&post)
	ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
	defer cancel()
	for _, st := range sts {
		if err := s.apply(ctx, provider, st); err != nil {
			s.log.Warn("whatsapp callback: could not record a status; Meta will post again", "provider_id", st.providerID, "err", err)
			s.answer(w, provider, resultError, http.StatusInternalServerError, "could not record the statuses")
			return
		}
	}
	s.answer(w, provider, resultOK, http.StatusOK, "")
}

// whatsappStatuses returns post's valid statuses, at most
// maxStatusesPerPost; an invalid one is logged, naming the field, and
// skipped (Meta would post it again and again).
func (s *server) whatsappStatuses(post *whatsappPost) []status {
	var out []status
	n := 0
	for i, e := range post.Entry {
		for j, c := range e.Changes {
			v := c.Value
			for k, ws := range v.Statuses {
				if n++; n > maxStatusesPerPost {
					s.log.Warn("whatsapp callback: too many statuses in one post; the rest are dropped", "max", maxStatusesPerPost)
					return out
				}
				st, err := parseWhatsApp(v.Metadata.PhoneNumberID, ws, s.opts.Now)
				if err != nil {
					s.log.Warn("whatsapp callback: status skipped", "at", fmt.Sprintf("entry[%d].changes[%d].value.statuses[%d]", i, j, k), "err", err)
					continue
				}
				out = append(out, st)
			}
		}
	}
	return out
}

// parseWhatsApp checks one status; the error names the bad field.
func parseWhatsApp(phoneNumberID string, ws whatsappStatus, now func() time.Time) (status, error) {
	if !strings.HasPrefix(ws.ID, "wamid.") || !wamid.MatchString(ws.ID) {
		return status{}, fmt.Errorf("id: want wamid. and up to 200 base64 characters")
	}
	if !digits.MatchString(phoneNumberID) {
		return status{}, fmt.Errorf("metadata.phone_number_id: want digits")
	}
	if ws.RecipientID != "" && !digits.MatchString(ws.RecipientID) {
		return status{}, fmt.Errorf("recipient_id: want digits")
	}
	if len(ws.Status) > 32 {
		return status{}, fmt.Errorf("status: want a status such as delivered")
	}
	st := status{channel: ChannelWhatsApp, providerID: ws.ID, raw: ws.Status, state: whatsappStatuses[ws.Status], at: now()}
	if ws.Timestamp != "" {
		sec, err := strconv.ParseInt(ws.Timestamp, 10, 64)
		if err != nil || sec <= 0 || sec > 1<<40 {
			return status{}, fmt.Errorf("timestamp: want Unix seconds")
		}
		st.at = time.Unix(sec, 0)
	}
	if len(ws.Errors) > 0 {
		e := ws.Errors[0]
		if e.Code < 0 || e.Code > 99999999 {
			return status{}, fmt.Errorf("errors[0].code: want a Meta error code")
		}
		st.code = e.Code
		st.reason = e.Title
		if st.reason == "" {
			st.reason = e.Message
		}
		st.reason = delivery.CleanReason(st.reason)
	}
	to := ""
	if ws.RecipientID != "" {
		to = "+" + ws.RecipientID
	}
	// The send's key fields (worker.WhatsAppChannel, tasks.WhatsAppSend.Fields).
	st.fields = map[string]string{"phone_number_id": phoneNumberID, "to": to}
	return st, nil
}
