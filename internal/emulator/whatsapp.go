package emulator

import (
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"unicode/utf8"
)

var graphVersionPattern = regexp.MustCompile(`^v[0-9]+\.[0-9]+$`)

// graphErrorBody is the Graph API error envelope.
type graphErrorBody struct {
	Error graphError `json:"error"`
}

type graphError struct {
	Message      string          `json:"message"`
	Type         string          `json:"type"`
	Code         int             `json:"code"`
	ErrorSubcode int             `json:"error_subcode,omitempty"`
	IsTransient  *bool           `json:"is_transient,omitempty"`
	ErrorData    *graphErrorData `json:"error_data,omitempty"`
	FBTraceID    string          `json:"fbtrace_id"`
}

type graphErrorData struct {
	MessagingProduct string `json:"messaging_product"`
	Details          string `json:"details"`
}

// waError builds a WhatsApp error of type OAuthException with error_data.
func waError(code int, message, details string) graphError {
	return graphError{
		Message:   message,
		Type:      "OAuthException",
		Code:      code,
		ErrorData: &graphErrorData{MessagingProduct: "whatsapp", Details: details},
	}
}

func waInvalidParameter(details string) graphError {
	return waError(100, "(#100) Invalid parameter", details)
}

func writeGraphError(w http.ResponseWriter, status int, e graphError) {
	e.FBTraceID = randomToken(17) // 23 characters, like Meta's
	w.Header().Set("x-fb-trace-id", e.FBTraceID)
	writeJSON(w, status, graphErrorBody{Error: e})
}

// waRequest is the part of a send-message body the emulator checks.
type waRequest struct {
	MessagingProduct string `json:"messaging_product"`
	RecipientType    string `json:"recipient_type"`
	To               string `json:"to"`
	Type             string `json:"type"`
	Text             *struct {
		Body string `json:"body"`
	} `json:"text"`
	Template *struct {
		Name     string `json:"name"`
		Language *struct {
			Code string `json:"code"`
		} `json:"language"`
	} `json:"template"`
	Image    *waMedia `json:"image"`
	Video    *waMedia `json:"video"`
	Audio    *waMedia `json:"audio"`
	Document *waMedia `json:"document"`
	Sticker  *waMedia `json:"sticker"`
	Context  *struct {
		MessageID string `json:"message_id"`
	} `json:"context"`
	BizOpaqueCallbackData string `json:"biz_opaque_callback_data"`
}

// waMedia is a media message's object (Cloud API messages reference, media
// object: id or link; caption on image, video and document, at most 1,024
// characters; filename on document).
type waMedia struct {
	ID       *string `json:"id"`
	Link     *string `json:"link"`
	Caption  *string `json:"caption"`
	Filename *string `json:"filename"`
}

// waMaxCaption is the longest media caption, in characters (the spec's
// MediaObject caption maxLength).
const waMaxCaption = 1024

// checkMedia refuses a media object of message type typ the way the
// strictest reading of the Cloud API reference does, with code 100: absent;
// both or neither of id and link; a link that is not absolute http(s); a
// caption on audio or a sticker, or one over 1,024 characters; a filename
// on anything but a document.
func checkMedia(typ string, m *waMedia) string {
	switch {
	case m == nil:
		return fmt.Sprintf("The parameter %s is required.", typ)
	case (m.ID == nil) == (m.Link == nil):
		return fmt.Sprintf("Param %s must have exactly one of id and link.", typ)
	case m.ID != nil && (*m.ID == "" || !digitsOnly(*m.ID)):
		return fmt.Sprintf("Param %s['id'] must be a valid media id.", typ)
	case m.Link != nil && !httpURL(*m.Link):
		return fmt.Sprintf("Param %s['link'] must be a valid http or https URL.", typ)
	case m.Caption != nil && (typ == "audio" || typ == "sticker"):
		return fmt.Sprintf("Param %s['caption'] is not supported for %s messages.", typ, typ)
	case m.Caption != nil && utf8.RuneCountInString(*m.Caption) > waMaxCaption:
		return fmt.Sprintf("Param %s['caption'] must be at most %d characters long.", typ, waMaxCaption)
	case m.Filename != nil && typ != "document":
		return fmt.Sprintf("Param %s['filename'] is only supported for document messages.", typ)
	}
	return ""
}

// httpURL reports whether s is an absolute http or https URL with a host.
func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

type waResponse struct {
	MessagingProduct string      `json:"messaging_product"`
	Contacts         []waContact `json:"contacts"`
	Messages         []waMessage `json:"messages"`
}

type waContact struct {
	Input string `json:"input"`
	WaID  string `json:"wa_id"`
}

type waMessage struct {
	ID string `json:"id"`
}

// wamidSeq makes wamids unique within the process.
var wamidSeq atomic.Uint64

func newWamid(digits string) string {
	b := make([]byte, 0, 64)
	b = append(b, digits...)
	b = binary.BigEndian.AppendUint64(b, wamidSeq.Add(1))
	b = append(b, randomToken(9)...)
	return "wamid." + base64.RawURLEncoding.EncodeToString(b)
}

func (s *Server) whatsAppHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /{version}/{phoneID}/messages", s.handleWhatsApp)
	mux.HandleFunc("GET /{version}/{phoneID}", s.handleWhatsAppProbe)
	s.introspection(mux)
	return mux
}

// checkBearer returns the Graph auth error for r, if any.
func (s *Server) checkBearer(r *http.Request) (graphError, bool) {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return graphError{Message: "An access token is required to request this resource.", Type: "OAuthException", Code: 104}, false
	}
	token, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(token), []byte(s.opts.WhatsAppToken)) != 1 {
		return graphError{Message: "Invalid OAuth access token - Cannot parse access token", Type: "OAuthException", Code: 190}, false
	}
	return graphError{}, true
}

// parseWhatsApp validates the path and body; it returns the request, the
// recipient's digits, or the error to send.
func parseWhatsApp(r *http.Request, body []byte) (req waRequest, digits string, e *graphError) {
	version, phoneID := r.PathValue("version"), r.PathValue("phoneID")
	if !graphVersionPattern.MatchString(version) {
		return req, "", &graphError{
			Message: fmt.Sprintf("Unknown path components: /%s/%s/messages", version, phoneID),
			Type:    "OAuthException",
			Code:    2500,
		}
	}
	if !digitsOnly(phoneID) {
		return req, "", &graphError{
			Message:      fmt.Sprintf("Unsupported post request. Object with ID '%s' does not exist, cannot be loaded due to missing permissions, or does not support this operation. Please read the Graph API documentation at https://developers.facebook.com/docs/graph-api", phoneID),
			Type:         "GraphMethodException",
			Code:         100,
			ErrorSubcode: 33,
		}
	}
	fail := func(details string) (waRequest, string, *graphError) {
		ge := waInvalidParameter(details)
		return req, "", &ge
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return fail("Request body must be a JSON object: " + err.Error())
	}
	switch req.MessagingProduct {
	case "whatsapp":
	case "":
		ge := waError(100, "(#100) The parameter messaging_product is required.", "messaging_product is required")
		return req, "", &ge
	default:
		return fail(fmt.Sprintf("Param messaging_product must be one of {WHATSAPP} - got %q.", req.MessagingProduct))
	}
	if req.RecipientType != "" && req.RecipientType != "individual" {
		return fail(fmt.Sprintf("Param recipient_type must be one of {INDIVIDUAL} - got %q.", req.RecipientType))
	}
	if req.To == "" {
		ge := waError(100, "(#100) The parameter to is required.", "to is required")
		return req, "", &ge
	}
	digits = strings.TrimPrefix(req.To, "+")
	if !digitsOnly(digits) || len(digits) < 8 || len(digits) > 15 {
		return fail(fmt.Sprintf("Param to must be a phone number of 8 to 15 digits with optional leading '+', got %q.", req.To))
	}
	switch req.Type {
	case "text", "": // Graph defaults type to text
		if req.Text == nil || req.Text.Body == "" {
			ge := waError(100, "(#100) The parameter text['body'] is required.", "text.body is required")
			return req, "", &ge
		}
	case "template":
		switch {
		case req.Template == nil || req.Template.Name == "":
			ge := waError(100, "(#100) The parameter template['name'] is required.", "template.name is required")
			return req, "", &ge
		case req.Template.Language == nil || req.Template.Language.Code == "":
			ge := waError(100, "(#100) The parameter template['language']['code'] is required.", "template.language.code is required")
			return req, "", &ge
		}
	case "image", "video", "audio", "document", "sticker":
		m := map[string]*waMedia{"image": req.Image, "video": req.Video, "audio": req.Audio, "document": req.Document, "sticker": req.Sticker}[req.Type]
		if d := checkMedia(req.Type, m); d != "" {
			return fail(d)
		}
	default:
		return fail(fmt.Sprintf("Param type %q is not supported by the emulator (text, template, image, video, audio, document, sticker).", req.Type))
	}
	if req.Context != nil && req.Context.MessageID == "" {
		return fail("Param context['message_id'] is required.")
	}
	return req, digits, nil
}

func (s *Server) handleWhatsApp(w http.ResponseWriter, r *http.Request) {
	const ch = ChannelWhatsApp
	// The request's arrival: read before authentication, parsing and the
	// lock, so that neither this process's work nor other requests move it.
	arrived := s.opts.Clock()
	if e, ok := s.checkBearer(r); !ok {
		s.countRejected(ch)
		w.Header().Set("WWW-Authenticate", fmt.Sprintf("OAuth \"Facebook Platform\" \"invalid_token\" %q", e.Message))
		writeGraphError(w, http.StatusUnauthorized, e)
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		s.countRejected(ch)
		writeGraphError(w, http.StatusBadRequest, waInvalidParameter("Request body could not be read: "+err.Error()))
		return
	}
	req, digits, perr := parseWhatsApp(r, body)
	if perr != nil {
		s.countRejected(ch)
		writeGraphError(w, http.StatusBadRequest, *perr)
		return
	}
	switch {
	case strings.HasSuffix(digits, SuffixUndeliverable):
		s.countRejected(ch)
		writeGraphError(w, http.StatusBadRequest, waError(131026, "(#131026) Message undeliverable",
			"Message failed to send because the recipient's phone number is not a WhatsApp phone number (emulator: recipient ends in "+SuffixUndeliverable+")."))
		return
	case strings.HasSuffix(digits, SuffixServerError):
		s.countFailed(ch)
		e := waError(131000, "(#131000) Something went wrong", "Message failed to send due to an unknown error (emulator: recipient ends in "+SuffixServerError+").")
		transient := true
		e.IsTransient = &transient
		writeGraphError(w, http.StatusInternalServerError, e)
		return
	}

	phoneID := r.PathValue("phoneID")
	if ft, ok := s.takeFault(ch, phoneID); ok {
		writeWhatsAppFault(w, ft)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		key = req.BizOpaqueCallbackData
	}
	wamid := newWamid(digits)
	kind := req.Type
	if kind == "" {
		kind = "text" // Graph's default type
	}
	s.mu.Lock()
	now := arrived
	// The throughput cap is a per-second count (exact; sliding window or
	// calendar second); the pair limit is a GCRA interval with the tolerance.
	ok, failed, _ := s.limiter.allow(now, s.tolerance,
		limit{key: "wa|" + phoneID, perSecond: s.opts.WhatsAppMPS},
		limit{key: "wa|" + phoneID + "|" + digits, interval: s.opts.PairInterval},
	)
	if !ok {
		var e graphError
		if failed == 0 {
			e = waError(130429, "(#130429) Rate limit hit",
				fmt.Sprintf("Cloud API message throughput has been reached (emulator: phone number %s is limited to %d messages %s).", phoneID, s.opts.WhatsAppMPS, s.perSecondPhrase()))
		} else {
			e = waError(131056, "(#131056) (Business Account, Consumer Account) pair rate limit hit",
				fmt.Sprintf("Message failed to send because there were too many messages sent from this phone number to the same phone number in a short period of time (emulator: 1 per %s).", s.opts.PairInterval))
		}
		s.throttledLocked(ch, fmt.Sprint(e.Code))
		s.mu.Unlock()
		writeGraphError(w, http.StatusBadRequest, e)
		return
	}
	rec := s.acceptLocked(Record{
		Channel:        ch,
		At:             now,
		Sender:         phoneID,
		Recipient:      "+" + digits,
		IdempotencyKey: key,
		ProviderID:     wamid,
		Kind:           kind,
	})
	s.mu.Unlock()

	s.process(ch)
	s.whatsAppStatuses(phoneID, rec.ProviderID, digits)
	writeJSON(w, http.StatusOK, waResponse{
		MessagingProduct: "whatsapp",
		Contacts:         []waContact{{Input: req.To, WaID: digits}},
		Messages:         []waMessage{{ID: rec.ProviderID}},
	})
}
