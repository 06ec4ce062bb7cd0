package callbacks

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/delivery"
)

func FuzzParseTwilio(f *testing.F) {
	f.Add("MessageSid=SM0123456789abcdef0123456789abcdef&MessageStatus=undelivered&ErrorCode=30022&From=%2B12025550100&To=%2B12025550123&AccountSid=AC0123456789abcdef0123456789abcdef")
	f.Add("MessageSid=SM0123456789abcdef0123456789abcdef&MessageStatus=delivered&MessagingServiceSid=MG0123456789abcdef0123456789abcdef")
	f.Add("MessageSid=x&MessageStatus=&ErrorCode=-1")
	now := func() time.Time { return time.Unix(1764064800, 0) }
	f.Fuzz(func(t *testing.T, body string) {
		p, err := url.ParseQuery(body)
		if err != nil {
			return
		}
		st, msg := parseTwilio(p, now)
		if msg != "" {
			return
		}
		if !twilioSID.MatchString(st.providerID) || st.code < 0 || st.code > 999999 || len(st.reason) > delivery.MaxReasonBytes {
			t.Fatalf("accepted a bad status: %+v", st)
		}
		for k, v := range st.fields {
			if strings.ContainsAny(v, "\x00\n\r{}") {
				t.Fatalf("field %s: %q", k, v)
			}
		}
	})
}

func FuzzWhatsAppStatuses(f *testing.F) {
	f.Add(`{"object":"whatsapp_business_account","entry":[{"changes":[{"value":{"metadata":{"phone_number_id":"106540352242922"},"statuses":[{"id":"wamid.HBgL","status":"failed","timestamp":"1764064800","recipient_id":"12025550123","errors":[{"code":131056,"title":"pair rate limit hit"}]}]}}]}]}`)
	f.Add(`{"entry":[{"changes":[{"value":{"statuses":[{"id":"wamid.x","timestamp":"-5"}]}}]}]}`)
	s := &server{log: slog.New(slog.DiscardHandler), opts: Options{Now: time.Now}}
	f.Fuzz(func(t *testing.T, body string) {
		var post whatsappPost
		if json.NewDecoder(bytes.NewReader([]byte(body))).Decode(&post) != nil {
			return
		}
		for _, st := range s.whatsappStatuses(&post) {
			if !strings.HasPrefix(st.providerID, "wamid.") || len(st.providerID) > 200 || len(st.reason) > delivery.MaxReasonBytes {
				t.Fatalf("accepted a bad status: %+v", st)
			}
			if to := st.fields["to"]; to != "" && !digits.MatchString(to[1:]) {
				t.Fatalf("to %q", to)
			}
		}
	})
}
