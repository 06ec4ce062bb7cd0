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
	"strconv"
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
		Components []waComponent `json:"components"`
	} `json:"template"`
	Image    *waMedia `json:"image"`
	Video    *waMedia `json:"video"`
	Audio    *waMedia `json:"audio"`
	Document *waMedia `json:"document"`
	Sticker  *waMedia `json:"sticker"`
	Context  *struct {
		MessageID string `json:"message_id"`
	} `json:"context"`
	Interactive *waInteractive `json:"interactive"`
	Location    *struct {
		Latitude  json.RawMessage `json:"latitude"`
		Longitude json.RawMessage `json:"longitude"`
	} `json:"location"`
	Contacts []struct {
		Name *struct {
			FormattedName string `json:"formatted_name"`
		} `json:"name"`
	} `json:"contacts"`
	Reaction *struct {
		MessageID *string `json:"message_id"`
		Emoji     *string `json:"emoji"`
	} `json:"reaction"`
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

// waComponent is a template component as the emulator checks it.
type waComponent struct {
	Type       string `json:"type"`
	SubType    string `json:"sub_type"`
	Index      string `json:"index"`
	Parameters []struct {
		Type     string  `json:"type"`
		Text     *string `json:"text"`
		Currency *struct {
			FallbackValue string `json:"fallback_value"`
			Code          string `json:"code"`
		} `json:"currency"`
		DateTime *struct {
			FallbackValue string `json:"fallback_value"`
		} `json:"date_time"`
		Image      *waMedia        `json:"image"`
		Video      *waMedia        `json:"video"`
		Document   *waMedia        `json:"document"`
		Location   json.RawMessage `json:"location"`
		Payload    *string         `json:"payload"`
		CouponCode *string         `json:"coupon_code"`
	} `json:"parameters"`
}

var (
	currencyCode = regexp.MustCompile(`^[A-Z]{3}$`)
	buttonIndex  = regexp.MustCompile(`^[0-9]$`)
	decimal      = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?$`)
)

// checkComponents refuses template components the way the strictest
// reading of Meta's template messages reference does, with code 100 (Meta
// answers 132000-range codes for a mismatch with the template itself,
// which the emulator does not know): a header with one parameter of type
// text (at most 60 characters), image, video, document or location; body
// parameters of type text, currency (an ISO 4217 code and a fallback) or
// date_time (a fallback); buttons with sub_type quick_reply (a payload),
// url (a text) or copy_code (a coupon_code of at most 15 characters) and
// an index from "0" to "9", each index once.
func checkComponents(cs []waComponent) string {
	indexes := map[string]bool{}
	for _, c := range cs {
		switch c.Type {
		case "header":
			if len(c.Parameters) != 1 {
				return "Param template['components'][header] must have one parameter."
			}
			p := c.Parameters[0]
			ok := false
			switch p.Type {
			case "text":
				ok = p.Text != nil && paramText(*p.Text) && runes(*p.Text) <= 60
			case "image":
				ok = checkMedia("image", p.Image) == ""
			case "video":
				ok = checkMedia("video", p.Video) == ""
			case "document":
				ok = checkMedia("document", p.Document) == ""
			case "location":
				ok = headerLocation(p.Location)
			}
			if !ok {
				return "Param template['components'][header]['parameters'] is invalid."
			}
		case "body":
			for _, p := range c.Parameters {
				ok := false
				switch p.Type {
				case "text":
					ok = p.Text != nil && paramText(*p.Text)
				case "currency":
					ok = p.Currency != nil && currencyCode.MatchString(p.Currency.Code) && paramText(p.Currency.FallbackValue)
				case "date_time":
					ok = p.DateTime != nil && paramText(p.DateTime.FallbackValue)
				}
				if !ok {
					return "Param template['components'][body]['parameters'] is invalid."
				}
			}
		case "button":
			if !buttonIndex.MatchString(c.Index) || indexes[c.Index] {
				return "Param template['components'][button]['index'] must be 0 to 9, each once."
			}
			indexes[c.Index] = true
			if len(c.Parameters) != 1 {
				return "Param template['components'][button] must have one parameter."
			}
			p := c.Parameters[0]
			var ok bool
			switch c.SubType {
			case "quick_reply":
				ok = p.Type == "payload" && p.Payload != nil && *p.Payload != ""
			case "url":
				ok = p.Type == "text" && p.Text != nil && *p.Text != ""
			case "copy_code":
				ok = p.Type == "coupon_code" && p.CouponCode != nil && *p.CouponCode != "" && runes(*p.CouponCode) <= 15
			}
			if !ok {
				return "Param template['components'][button]['parameters'] is invalid for its sub_type."
			}
		default:
			return fmt.Sprintf("Param template['components'][]['type'] %q must be header, body or button.", c.Type)
		}
	}
	return ""
}

// paramText is a template parameter's text as Meta takes it (error 132018,
// "Param text cannot have new-line/tab characters or more than 4
// consecutive spaces"), read strictly: not empty, no line feed, carriage
// return or tab, no five spaces in a row. A fallback_value stands in for
// its parameter, so it is held to the same.
func paramText(s string) bool {
	return s != "" && !strings.ContainsAny(s, "\n\r\t") && !strings.Contains(s, "     ")
}

// headerLocation is a template header's location parameter: an object
// with a latitude (-90 to 90) and a longitude (-180 to 180), as numbers or
// as the strings of numbers (the spec types them as strings).
func headerLocation(raw json.RawMessage) bool {
	var l struct {
		Latitude  json.RawMessage `json:"latitude"`
		Longitude json.RawMessage `json:"longitude"`
	}
	if json.Unmarshal(raw, &l) != nil {
		return false
	}
	coord := func(v json.RawMessage, bound float64) bool {
		var s string
		if json.Unmarshal(v, &s) != nil {
			s = string(v)
		}
		if !decimal.MatchString(s) { // (ParseFloat alone takes "0x1p-2", "1_0", "Inf")
			return false
		}
		f, err := strconv.ParseFloat(s, 64)
		return err == nil && f >= -bound && f <= bound
	}
	return coord(l.Latitude, 90) && coord(l.Longitude, 180)
}

// waInteractive is the part of an interactive object the emulator checks.
type waInteractive struct {
	Type   string `json:"type"`
	Header *struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"header"`
	Body *struct {
		Text string `json:"text"`
	} `json:"body"`
	Footer *struct {
		Text string `json:"text"`
	} `json:"footer"`
	Action *struct {
		Buttons []struct {
			Type  string `json:"type"`
			Reply struct {
				ID    string `json:"id"`
				Title string `json:"title"`
			} `json:"reply"`
		} `json:"buttons"`
		Button   string `json:"button"`
		Sections []struct {
			Title string `json:"title"`
			Rows  []struct {
				ID          string `json:"id"`
				Title       string `json:"title"`
				Description string `json:"description"`
			} `json:"rows"`
		} `json:"sections"`
		Name       string `json:"name"`
		Parameters *struct {
			DisplayText string `json:"display_text"`
			URL         string `json:"url"`
		} `json:"parameters"`
	} `json:"action"`
}

// runes is s's length in characters.
func runes(s string) int { return utf8.RuneCountInString(s) }

// checkInteractive refuses an interactive message the way the strictest
// reading of Meta's interactive messages reference does, with code 100:
// types button (1 to 3 reply buttons, ids at most 256 characters, titles
// at most 20 and unique), list (a button of at most 20 characters; 1 to 10
// sections, titled (at most 24) when more than one; at most 10 rows in all,
// ids at most 200 and unique, titles at most 24, descriptions at most 72)
// and cta_url (display_text at most 20, an http(s) url); a body of at most
// 1,024 characters always; a header text and a footer of at most 60.
func checkInteractive(in *waInteractive) string {
	switch {
	case in == nil:
		return "The parameter interactive is required."
	case in.Body == nil || in.Body.Text == "" || runes(in.Body.Text) > 1024:
		return "Param interactive['body']['text'] is required and must be at most 1024 characters long."
	case in.Footer != nil && (in.Footer.Text == "" || runes(in.Footer.Text) > 60):
		return "Param interactive['footer']['text'] must be 1 to 60 characters long."
	case in.Header != nil && in.Header.Type == "text" && (in.Header.Text == "" || runes(in.Header.Text) > 60):
		return "Param interactive['header']['text'] must be 1 to 60 characters long."
	case in.Action == nil:
		return "The parameter interactive['action'] is required."
	}
	a := in.Action
	switch in.Type {
	case "button":
		if len(a.Buttons) < 1 || len(a.Buttons) > 3 {
			return "Param interactive['action']['buttons'] must have 1 to 3 buttons."
		}
		titles := map[string]bool{}
		for _, b := range a.Buttons {
			switch {
			case b.Type != "reply":
				return "Param interactive['action']['buttons'][]['type'] must be reply."
			case b.Reply.ID == "" || runes(b.Reply.ID) > 256:
				return "Param interactive['action']['buttons'][]['reply']['id'] must be 1 to 256 characters long."
			case b.Reply.Title == "" || runes(b.Reply.Title) > 20:
				return "Param interactive['action']['buttons'][]['reply']['title'] must be 1 to 20 characters long."
			case titles[b.Reply.Title]:
				return "Button titles must be unique."
			}
			titles[b.Reply.Title] = true
		}
	case "list":
		if in.Header != nil && in.Header.Type != "text" {
			return "Param interactive['header']['type'] must be text for a list message."
		}
		if a.Button == "" || runes(a.Button) > 20 {
			return "Param interactive['action']['button'] must be 1 to 20 characters long."
		}
		if len(a.Sections) < 1 || len(a.Sections) > 10 {
			return "Param interactive['action']['sections'] must have 1 to 10 sections."
		}
		rows, ids := 0, map[string]bool{}
		for _, sec := range a.Sections {
			if (len(a.Sections) > 1 && sec.Title == "") || runes(sec.Title) > 24 {
				return "Param interactive['action']['sections'][]['title'] is required with several sections and must be at most 24 characters long."
			}
			if len(sec.Rows) == 0 {
				return "Param interactive['action']['sections'][]['rows'] is required."
			}
			for _, r := range sec.Rows {
				rows++
				switch {
				case r.ID == "" || runes(r.ID) > 200 || ids[r.ID]:
					return "Param interactive['action']['sections'][]['rows'][]['id'] must be 1 to 200 characters long and unique."
				case r.Title == "" || runes(r.Title) > 24:
					return "Param interactive['action']['sections'][]['rows'][]['title'] must be 1 to 24 characters long."
				case runes(r.Description) > 72:
					return "Param interactive['action']['sections'][]['rows'][]['description'] must be at most 72 characters long."
				}
				ids[r.ID] = true
			}
		}
		if rows > 10 {
			return "A list message has at most 10 rows."
		}
	case "cta_url":
		switch {
		case a.Name != "cta_url" || a.Parameters == nil:
			return "Param interactive['action'] must be {name: cta_url, parameters}."
		case a.Parameters.DisplayText == "" || runes(a.Parameters.DisplayText) > 20:
			return "Param interactive['action']['parameters']['display_text'] must be 1 to 20 characters long."
		case !httpURL(a.Parameters.URL):
			return "Param interactive['action']['parameters']['url'] must be a valid http or https URL."
		}
	default:
		return fmt.Sprintf("Param interactive['type'] %q is not supported by the emulator (button, list, cta_url).", in.Type)
	}
	return ""
}

// coordinate reads a latitude or longitude, a JSON number or a string
// holding one, within ±limit degrees.
func coordinate(raw json.RawMessage, limit float64) bool {
	var v float64
	if json.Unmarshal(raw, &v) != nil {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return false
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return false
		}
		v = f
	}
	return v >= -limit && v <= limit
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
		if d := checkComponents(req.Template.Components); d != "" {
			return fail(d)
		}
	case "image", "video", "audio", "document", "sticker":
		m := map[string]*waMedia{"image": req.Image, "video": req.Video, "audio": req.Audio, "document": req.Document, "sticker": req.Sticker}[req.Type]
		if d := checkMedia(req.Type, m); d != "" {
			return fail(d)
		}
	case "interactive":
		if d := checkInteractive(req.Interactive); d != "" {
			return fail(d)
		}
	case "location":
		if req.Location == nil || !coordinate(req.Location.Latitude, 90) || !coordinate(req.Location.Longitude, 180) {
			return fail("Param location must have a latitude (-90 to 90) and a longitude (-180 to 180).")
		}
	case "contacts":
		if len(req.Contacts) < 1 || len(req.Contacts) > 5 {
			return fail("Param contacts must have 1 to 5 contacts.")
		}
		for _, c := range req.Contacts {
			if c.Name == nil || c.Name.FormattedName == "" {
				return fail("Param contacts[]['name']['formatted_name'] is required.")
			}
		}
	case "reaction":
		if req.Reaction == nil || req.Reaction.MessageID == nil || *req.Reaction.MessageID == "" || req.Reaction.Emoji == nil {
			return fail("Param reaction must have a message_id and an emoji.")
		}
	default:
		return fail(fmt.Sprintf("Param type %q is not supported by the emulator (text, template, image, video, audio, document, sticker, interactive, location, contacts, reaction).", req.Type))
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
