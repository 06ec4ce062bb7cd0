package callbacks

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"maps"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/internal/delivery"
)

// TwilioSignature is X-Twilio-Signature for a POST to fullURL with form
// params: the base64 HMAC-SHA1, keyed with the account's auth token, of
// fullURL followed by each parameter's name and value, names sorted (a
// name given more than once: each distinct value once, sorted), as
// Twilio's request validators compute it (twilio-python
// RequestValidator.compute_signature).
func TwilioSignature(authToken, fullURL string, params url.Values) string {
	mac := hmac.New(sha1.New, []byte(authToken))
	mac.Write([]byte(fullURL))
	for _, k := range slices.Sorted(maps.Keys(params)) {
		vs := slices.Clone(params[k])
		slices.Sort(vs)
		for _, v := range slices.Compact(vs) {
			mac.Write([]byte(k))
			mac.Write([]byte(v))
		}
	}
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// twilioURLs are the URLs a signature may have been computed over: the
// configured or rebuilt URL, and the same with the scheme's default port
// added or removed (Twilio signs the URL as configured; proxies differ on
// the port), as Twilio's own validators accept.
func (s *server) twilioURLs(r *http.Request) []string {
	raw := s.opts.TwilioURL
	if raw == "" {
		scheme := "http"
		if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
			scheme = "https"
		}
		raw = scheme + "://" + r.Host + r.URL.RequestURI()
	}
	out := []string{raw}
	u, err := url.Parse(raw)
	if err != nil {
		return out
	}
	port := map[string]string{"http": "80", "https": "443"}[u.Scheme]
	switch {
	case u.Port() == "" && port != "":
		u.Host = net.JoinHostPort(u.Hostname(), port)
		out = append(out, u.String())
	case u.Port() == port:
		u.Host = u.Hostname()
		if strings.Contains(u.Host, ":") {
			u.Host = "[" + u.Host + "]"
		}
		out = append(out, u.String())
	}
	return out
}

// twilioStatuses maps Twilio's MessageStatus to a tracked state; "" for
// statuses Sluice does not track (inbound receiving and received).
var twilioStatuses = map[string]delivery.State{
	"accepted": delivery.StateQueued, "scheduled": delivery.StateQueued, "queued": delivery.StateQueued,
	"sending": delivery.StateSent, "sent": delivery.StateSent, "delivery_unknown": delivery.StateSent,
	"delivered": delivery.StateDelivered, "partially_delivered": delivery.StateDelivered,
	"read":        delivery.StateRead,
	"undelivered": delivery.StateUndelivered, "failed": delivery.StateFailed, "canceled": delivery.StateFailed,
}

var (
	// twilioSID is a Message, Account or Messaging Service SID: two
	// letters and 32 hex digits.
	twilioSID = regexp.MustCompile(`^[A-Z]{2}[0-9a-fA-F]{32}$`)
	// address is a From or To: E.164, a short code, an alphanumeric
	// sender ID, or a channel address (whatsapp:+1...).
	address = regexp.MustCompile(`^[A-Za-z0-9+:._ -]{1,64}$`)
)

// twilio serves POST /callbacks/twilio.
func (s *server) twilio(w http.ResponseWriter, r *http.Request) {
	const provider = channels.ProviderTwilio
	if s.opts.TwilioAuthToken == "" {
		s.answer(w, provider, resultNotConfigured, http.StatusNotFound, "twilio callbacks are not configured")
		return
	}
	body, ok := s.readBody(w, r, provider)
	if !ok {
		return
	}
	sig := r.Header.Get("X-Twilio-Signature")
	params, err := url.ParseQuery(string(body))
	if sig == "" || err != nil || !s.twilioSigned(r, params, sig) {
		// Nothing of the request is echoed or logged but where it came from.
		s.log.Warn("twilio callback: signature missing or wrong; check http.public_url and the auth token", "remote", r.RemoteAddr, "signed", sig != "")
		s.answer(w, provider, resultForbidden, http.StatusForbidden, "bad signature")
		return
	}
	st, msg := parseTwilio(params, s.opts.Now)
	if msg != "" {
		s.answer(w, provider, resultBadRequest, http.StatusBadRequest, msg)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
	defer cancel()
	if err := s.apply(ctx, provider, st); err != nil {
		s.log.Warn("twilio callback: could not record the status", "provider_id", st.providerID, "err", err)
		s.answer(w, provider, resultError, http.StatusInternalServerError, "could not record the status")
		return
	}
	s.answer(w, provider, resultOK, http.StatusOK, "")
}

// twilioSigned checks sig against each URL the request may have been
// signed for, in constant time.
func (s *server) twilioSigned(r *http.Request, params url.Values, sig string) bool {
	got := []byte(sig)
	ok := false
	for _, u := range s.twilioURLs(r) {
		if hmac.Equal(got, []byte(TwilioSignature(s.opts.TwilioAuthToken, u, params))) {
			ok = true
		}
	}
	return ok
}

// parseTwilio reads a status callback's params; msg names the first bad
// field (the value is not echoed).
func parseTwilio(p url.Values, now func() time.Time) (st status, msg string) {
	one := func(k string) string {
		if len(p[k]) != 1 {
			return ""
		}
		return p[k][0]
	}
	sid, raw := one("MessageSid"), one("MessageStatus")
	if !twilioSID.MatchString(sid) {
		return st, "MessageSid: want two letters and 32 hex digits"
	}
	if len(raw) == 0 || len(raw) > 32 {
		return st, "MessageStatus: want a status such as delivered"
	}
	st = status{channel: ChannelSMS, providerID: sid, raw: raw, state: twilioStatuses[raw], at: now()}
	if c := one("ErrorCode"); c != "" {
		n, err := strconv.Atoi(c)
		if err != nil || n < 0 || n > 999999 {
			return st, "ErrorCode: want a number of up to 6 digits"
		}
		st.code = n
	}
	from, to, service, account := one("From"), one("To"), one("MessagingServiceSid"), one("AccountSid")
	for _, f := range []struct{ name, v string }{{"From", from}, {"To", to}} {
		if f.v != "" && !address.MatchString(f.v) {
			return st, f.name + ": want a phone number, short code, sender ID or channel address"
		}
	}
	for _, f := range []struct{ name, v string }{{"MessagingServiceSid", service}, {"AccountSid", account}} {
		if f.v != "" && !twilioSID.MatchString(f.v) {
			return st, f.name + ": want two letters and 32 hex digits"
		}
	}
	if st.code != 0 {
		st.reason = one("ErrorMessage")
		if st.reason == "" {
			if ce, ok := channels.CodeError(channels.ProviderTwilio, st.code, "", st.at); ok {
				st.reason = ce.Error()
			}
		}
		st.reason = delivery.CleanReason(st.reason)
	}
	// The send's key fields (worker.SMSChannel, tasks.SMSSend.Fields).
	// The sender is the Messaging Service when the message went through
	// one: a task that named only the service is keyed and paused on it,
	// and Twilio reports the pool's number as From.
	sender := from
	if service != "" {
		sender = service
	}
	st.fields = map[string]string{"from": from, "messaging_service_sid": service, "sender": sender, "to": to, "account_sid": account}
	return st, ""
}
