package emulator

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

var (
	e164Pattern         = regexp.MustCompile(`^\+[0-9]{8,15}$`)
	whatsAppPattern     = regexp.MustCompile(`^whatsapp:\+[0-9]{8,15}$`)
	shortCodePattern    = regexp.MustCompile(`^[0-9]{5,6}$`)
	alphaSenderPattern  = regexp.MustCompile(`^[A-Za-z0-9 ]{1,11}$`)
	hasLetterPattern    = regexp.MustCompile(`[A-Za-z]`)
	messagingSIDPattern = regexp.MustCompile(`^MG[0-9a-fA-F]{32}$`)
)

// twilioError is Twilio's REST error body.
type twilioError struct {
	Code     int    `json:"code"`
	Message  string `json:"message"`
	MoreInfo string `json:"more_info"`
	Status   int    `json:"status"`
}

func writeTwilioError(w http.ResponseWriter, status, code int, message string) {
	writeJSON(w, status, twilioError{
		Code:     code,
		Message:  message,
		MoreInfo: fmt.Sprintf("https://www.twilio.com/docs/errors/%d", code),
		Status:   status,
	})
}

// twilioMessage is the Message resource (api.v2010.account.message); field
// names follow the spec, nullable fields are pointers.
type twilioMessage struct {
	AccountSID          string            `json:"account_sid"`
	APIVersion          string            `json:"api_version"`
	Body                string            `json:"body"`
	DateCreated         string            `json:"date_created"`
	DateSent            *string           `json:"date_sent"`
	DateUpdated         string            `json:"date_updated"`
	Direction           string            `json:"direction"`
	ErrorCode           *int              `json:"error_code"`
	ErrorMessage        *string           `json:"error_message"`
	From                *string           `json:"from"`
	MessagingServiceSID *string           `json:"messaging_service_sid"`
	NumMedia            string            `json:"num_media"`
	NumSegments         string            `json:"num_segments"`
	Price               *string           `json:"price"`
	PriceUnit           *string           `json:"price_unit"`
	SID                 string            `json:"sid"`
	Status              string            `json:"status"`
	SubresourceURIs     map[string]string `json:"subresource_uris"`
	To                  string            `json:"to"`
	URI                 string            `json:"uri"`
}

func (s *Server) twilioHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /2010-04-01/Accounts/{AccountSid}/Messages.json", s.handleTwilio)
	mux.HandleFunc("GET /2010-04-01/Accounts/{Sid}", s.handleTwilioProbe)
	return mux
}

// twilioAuthorized reports whether r carries the account's Basic credentials
// and addresses that account.
func (s *Server) twilioAuthorized(r *http.Request) bool {
	user, pass, ok := r.BasicAuth()
	if !ok {
		return false
	}
	sidOK := subtle.ConstantTimeCompare([]byte(user), []byte(s.opts.TwilioAccountSID)) == 1
	tokenOK := subtle.ConstantTimeCompare([]byte(pass), []byte(s.opts.TwilioAuthToken)) == 1
	return sidOK && tokenOK && r.PathValue("AccountSid") == s.opts.TwilioAccountSID
}

// twilioForm is a validated create-message request.
type twilioForm struct {
	to, from, service, body string
	statusCallback          string // StatusCallback, "" for none
	numMedia                int
	content                 bool // a ContentSid: a Content Template
	segments                int  // of the body (smsSegments): the units of the sender's MPS
}

// parseTwilio validates the form; on failure it returns the error code and
// message to send with HTTP 400.
func parseTwilio(r *http.Request) (f twilioForm, code int, msg string) {
	_ = r.ParseForm() // a malformed body leaves fields empty and fails below
	p := r.PostForm
	f = twilioForm{
		to:       p.Get("To"),
		from:     p.Get("From"),
		service:  p.Get("MessagingServiceSid"),
		body:     p.Get("Body"),
		numMedia: len(p["MediaUrl"]),
		content:  p.Get("ContentSid") != "",

		statusCallback: p.Get("StatusCallback"),
	}
	switch {
	case f.to == "":
		return f, 21604, "A 'To' phone number is required."
	case !e164Pattern.MatchString(f.to) && !whatsAppPattern.MatchString(f.to):
		return f, 21211, fmt.Sprintf("The 'To' number %s is not a valid phone number.", f.to)
	case f.from == "" && f.service == "":
		return f, 21603, "A 'From' phone number is required."
	case f.from != "" && !validFrom(f.from):
		return f, 21212, fmt.Sprintf("The 'From' number %s is not a valid phone number, shortcode, or alphanumeric sender ID.", f.from)
	case f.from != "" && whatsAppPattern.MatchString(f.from) != whatsAppPattern.MatchString(f.to):
		return f, 21910, "Invalid From and To pair. From and To should be of the same channel."
	case f.service != "" && !messagingSIDPattern.MatchString(f.service):
		return f, 21705, "The Messaging Service is invalid."
	case f.body == "" && f.numMedia == 0 && p.Get("ContentSid") == "":
		return f, 21602, "Message body is required."
	case utf8.RuneCountInString(f.body) > 1600:
		return f, 21617, "The concatenated message body exceeds the 1600 character limit."
	case f.numMedia > twilioMaxMedia:
		return f, 21623, "Number of media files exceeds allowed limit. You may send up to 10 media files in a single message."
	case !allHTTP(p["MediaUrl"]):
		return f, 21620, "Invalid media URL(s)."
	case f.numMedia > 1 && (whatsAppPattern.MatchString(f.from) || whatsAppPattern.MatchString(f.to)):
		return f, 21623, "Number of media files exceeds allowed limit. A WhatsApp message carries one media file."
	case p.Has("ContentVariables") && p.Get("ContentSid") == "":
		return f, 21654, "A ContentSid must be specified if ContentVariables are provided in the request."
	case p.Has("ContentSid") && !contentSIDPattern.MatchString(p.Get("ContentSid")):
		return f, 21655, "The ContentSid is Invalid."
	case p.Has("ContentVariables") && !validContentVariables(p.Get("ContentVariables")):
		return f, 21656, "The ContentVariables Parameter is invalid."
	case p.Has("ValidityPeriod") && !validValidityPeriod(p.Get("ValidityPeriod")):
		return f, 21624, "Invalid validity period value. Validity period can only be set to integers between 1 and 36,000 seconds."
	case f.statusCallback != "" && !validCallbackURL(f.statusCallback):
		return f, 21609, "The StatusCallback URL is not a valid URL."
	}
	f.segments = smsSegments(f.body)
	if f.numMedia > 0 || p.Get("ContentSid") != "" {
		// An MMS is one message against a number's MPS (Twilio, "MMS
		// Account Rate Limits": 1 MMS a second per US/CA long code); a
		// Content Template is counted as one message too: the emulator
		// does not render templates.
		f.segments = 1
	}
	return f, 0, ""
}

// kind is what the message is: "mms" with media, "content" for a Content
// Template, else "sms".
func (f twilioForm) kind() string {
	switch {
	case f.content:
		return "content"
	case f.numMedia > 0:
		return "mms"
	}
	return "sms"
}

// Twilio's limits on a message's content (Messages API; error dictionary
// 21620, 21623, 21654–21656, 21658, 21624).
const (
	twilioMaxMedia      = 10
	twilioMaxContentVar = 1600 // characters of one ContentVariables value (21658)
	twilioMaxValidity   = 36000
)

var contentSIDPattern = regexp.MustCompile(`^HX[0-9a-fA-F]{32}$`)

// allHTTP reports whether every URL is absolute http(s) with a host.
func allHTTP(urls []string) bool {
	for _, u := range urls {
		if !httpURL(u) {
			return false
		}
	}
	return true
}

// validContentVariables reports whether v is a JSON object whose values
// are non-empty strings of at most 1,600 characters (Twilio 21656: "not a
// JSON String", a variable "set to null or empty string"; 21658).
func validContentVariables(v string) bool {
	var m map[string]*string
	if json.Unmarshal([]byte(v), &m) != nil || m == nil {
		return false
	}
	for _, s := range m {
		if s == nil || *s == "" || utf8.RuneCountInString(*s) > twilioMaxContentVar {
			return false
		}
	}
	return true
}

// validValidityPeriod reports whether v is an integer from 1 to 36,000.
func validValidityPeriod(v string) bool {
	n, err := strconv.Atoi(v)
	return err == nil && n >= 1 && n <= twilioMaxValidity
}

// validFrom accepts an E.164 number, whatsapp:+E.164, a short code or an
// alphanumeric sender ID (1 to 11 letters, digits or spaces, at least one
// letter).
func validFrom(from string) bool {
	return e164Pattern.MatchString(from) || whatsAppPattern.MatchString(from) || shortCodePattern.MatchString(from) ||
		(alphaSenderPattern.MatchString(from) && hasLetterPattern.MatchString(from))
}

func (s *Server) handleTwilio(w http.ResponseWriter, r *http.Request) {
	const ch = ChannelSMS
	// The request's arrival: read before authentication, parsing and the
	// lock, so that neither this process's work nor other requests move it.
	arrived := s.opts.Clock()
	if !s.twilioAuthorized(r) {
		s.countRejected(ch)
		w.Header().Set("WWW-Authenticate", `Basic realm="Twilio API"`)
		writeTwilioError(w, http.StatusUnauthorized, 20003, "Authenticate")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	f, code, msg := parseTwilio(r)
	if code != 0 {
		s.countRejected(ch)
		writeTwilioError(w, http.StatusBadRequest, code, msg)
		return
	}
	switch {
	case strings.HasSuffix(f.to, SuffixUndeliverable):
		s.countRejected(ch)
		writeTwilioError(w, http.StatusBadRequest, 21610, "Attempt to send to unsubscribed recipient")
		return
	case strings.HasSuffix(f.to, SuffixServerError):
		s.countFailed(ch)
		writeTwilioError(w, http.StatusInternalServerError, 20500, "Internal Server Error")
		return
	}

	sender := f.from
	if sender == "" {
		sender = f.service
	}
	if ft, ok := s.takeFault(ch, sender); ok {
		writeTwilioFault(w, ft)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		key = r.Header.Get("I-Twilio-Idempotency-Token")
	}
	account := s.opts.TwilioAccountSID
	sid := "SM" + randomHex(16)
	if f.numMedia > 0 {
		sid = "MM" + sid[2:]
	}

	s.mu.Lock()
	now := arrived
	if s.inflight[account] >= s.opts.TwilioConcurrency {
		s.throttledLocked(ch, "20429")
		s.mu.Unlock()
		writeTwilioError(w, http.StatusTooManyRequests, 20429, "Too Many Requests")
		return
	}
	// A per-second count (sliding window or calendar second) of message
	// segments, as Twilio's MPS is: exact, the tolerance does not apply.
	if ok, _, _ := s.limiter.allow(now, s.tolerance, limit{key: "sms|" + sender, perSecond: s.opts.TwilioMPS, cost: f.segments}); !ok {
		s.throttledLocked(ch, "20429")
		s.mu.Unlock()
		writeTwilioError(w, http.StatusTooManyRequests, 20429, "Too Many Requests")
		return
	}
	s.inflight[account]++
	s.acceptLocked(Record{
		Channel:        ch,
		At:             now,
		Sender:         sender,
		Recipient:      f.to,
		IdempotencyKey: key,
		ProviderID:     sid,
		Kind:           f.kind(),
	})
	s.mu.Unlock()

	s.process(ch)

	s.mu.Lock()
	s.inflight[account]--
	s.mu.Unlock()

	writeJSON(w, http.StatusCreated, newTwilioMessage(account, sid, f, now))
	if f.statusCallback != "" {
		s.statusCallbacks(f.statusCallback, sid, f)
	}
}

func newTwilioMessage(account, sid string, f twilioForm, now time.Time) twilioMessage {
	date := now.UTC().Format(time.RFC1123Z)
	uri := "/2010-04-01/Accounts/" + account + "/Messages/" + sid
	m := twilioMessage{
		AccountSID:      account,
		APIVersion:      "2010-04-01",
		Body:            f.body,
		DateCreated:     date,
		DateUpdated:     date,
		Direction:       "outbound-api",
		NumMedia:        fmt.Sprint(f.numMedia),
		NumSegments:     fmt.Sprint(max(f.segments, 1)),
		SID:             sid,
		Status:          "queued",
		SubresourceURIs: map[string]string{"media": uri + "/Media.json"},
		To:              f.to,
		URI:             uri + ".json",
	}
	if f.from != "" {
		m.From = &f.from
	}
	if f.service != "" {
		m.MessagingServiceSID = &f.service
		if f.from == "" {
			// With a Messaging Service and no From, Twilio answers
			// "accepted" and picks the sender later.
			m.Status = "accepted"
		}
	}
	return m
}
