package tasks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nyaruka/phonenumbers"
)

// Limits enforced by Validate. Text lengths count Unicode code points, as the
// providers do.
const (
	maxWhatsAppText = 4096 // WhatsApp Cloud API text body and template parameters
	maxSMSBody      = 1600 // Twilio Programmable Messaging body
	maxTemplateName = 512  // WhatsApp template names
)

// MaxIdempotencyKey is the longest idempotency key Validate takes, in
// bytes (its characters are ASCII): the task ID, a tenant's namespace
// included (producer.TenantNamespace).
const MaxIdempotencyKey = 200

var (
	templateNameRE = regexp.MustCompile(`^[a-z0-9_]+$`)
	serviceSIDRE   = regexp.MustCompile(`^MG[0-9a-fA-F]{32}$`) // Twilio spec: MessagingServiceSid
)

// httpMethods are the methods an HTTPCall may use.
var httpMethods = []string{"GET", "POST", "PUT", "PATCH", "DELETE"}

// NormalizePhone parses s as an international phone number and returns it in
// E.164 form ("+12025550123"). s must start with "+" followed by digits,
// optionally grouped with spaces, dashes and parentheses
// ("+1 (202) 555-0123"); surrounding whitespace is ignored. Letters,
// extensions and national formats without a country code are rejected. The
// number must be valid according to libphonenumber's metadata (a known
// country code, the right length and an assigned range).
//
// The error reads `"+1555" is not a valid E.164 phone number`; callers prefix
// it with the field name.
func NormalizePhone(s string) (string, error) {
	t := strings.TrimSpace(s)
	if !phoneSyntax(t) {
		return "", fmt.Errorf("%q is not a valid E.164 phone number", s)
	}
	n, err := phonenumbers.Parse(t, "ZZ")
	if err != nil || !phonenumbers.IsValidNumber(n) {
		return "", fmt.Errorf("%q is not a valid E.164 phone number", s)
	}
	return phonenumbers.Format(n, phonenumbers.E164), nil
}

// phoneSyntax reports whether s is "+" followed by digits and the grouping
// characters space, '-', '(' and ')', with at least one digit.
func phoneSyntax(s string) bool {
	if len(s) < 2 || s[0] != '+' {
		return false
	}
	digits := 0
	for _, c := range []byte(s[1:]) {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == ' ' || c == '-' || c == '(' || c == ')':
		default:
			return false
		}
	}
	return digits > 0
}

// normPhone returns the E.164 form of s, or s unchanged if it is not a valid
// number (Validate then reports it).
func normPhone(s string) string {
	if e, err := NormalizePhone(s); err == nil {
		return e
	}
	return s
}

// Validate reports whether p is a well-formed version-1 payload in canonical
// form; the error names the first offending field by its JSON name
// (`to: "+1555" is not a valid E.164 phone number`). Rules: PhoneNumberID is
// digits; To is a valid number already in E.164 form (NewWhatsAppSendTask
// normalizes it first); exactly one of Text (non-blank, at most 4096
// characters, no NUL byte), Template (Name matching ^[a-z0-9_]+$,
// Language non-empty, no empty Parameters) and Media (see Media: a type,
// one of link and id, a caption only on image, video and document, a
// filename only on a document) is set; PreviewURL only with Text; ReplyTo
// empty or a message ID (printable ASCII, at most 256 bytes);
// IdempotencyKey is empty or 1–200 characters of [A-Za-z0-9._:-].
func (p WhatsAppSend) Validate() error { return p.validate(checkPhone) }

// CheckShape is Validate as the decoders apply it: phone numbers checked
// for E.164 shape only (checkE164Syntax), and V 0 taken as PayloadVersion
// (a payload built in Go without NewWhatsAppSendTask). channels.WhatsApp
// checks every payload it sends with it, so one that no decoder read
// cannot go out malformed (a media header with neither link nor id as
// "{}", say).
func (p WhatsAppSend) CheckShape() error {
	if p.V == 0 {
		p.V = PayloadVersion
	}
	return p.validate(checkE164Syntax)
}

func (p WhatsAppSend) validate(checkPhone func(field, s string) error) error {
	if err := checkVersion(p.V); err != nil {
		return err
	}
	if err := p.Delivery.validate(); err != nil {
		return err
	}
	if p.PhoneNumberID == "" {
		return errors.New("phone_number_id: required")
	}
	if !allDigits(p.PhoneNumberID) {
		return fmt.Errorf("phone_number_id: %q must contain only digits", p.PhoneNumberID)
	}
	if err := checkPhone("to", p.To); err != nil {
		return err
	}
	var kinds []string
	if p.Text != "" {
		kinds = append(kinds, "text")
	}
	if p.Template != nil {
		kinds = append(kinds, "template")
	}
	if p.Media != nil {
		kinds = append(kinds, "media")
	}
	if p.Interactive != nil {
		kinds = append(kinds, "interactive")
	}
	if p.Location != nil {
		kinds = append(kinds, "location")
	}
	if p.Contacts != nil {
		kinds = append(kinds, "contacts")
	}
	if p.Reaction != nil {
		kinds = append(kinds, "reaction")
	}
	var err error
	switch {
	case len(kinds) > 1:
		return fmt.Errorf("%s: set exactly one of %s (got %s)", strings.Join(kinds, ", "), whatsAppKinds, strings.Join(kinds, " and "))
	case len(kinds) == 0:
		return errors.New("text, template, media, interactive, location, contacts, reaction: set exactly one (got none)")
	case p.Text != "":
		err = checkText("text", p.Text, maxWhatsAppText)
	case p.Template != nil:
		err = p.Template.validate()
	case p.Media != nil:
		err = p.Media.validate()
	case p.Interactive != nil:
		err = p.Interactive.validate()
	case p.Location != nil:
		err = p.Location.validate()
	case p.Contacts != nil:
		err = checkContacts(p.Contacts)
	default:
		err = p.Reaction.validate()
		if err == nil && p.ReplyTo != "" {
			err = errors.New("reply_to: a reaction names its message in reaction.message_id, not as a reply")
		}
	}
	if err != nil {
		return err
	}
	if p.PreviewURL && p.Text == "" {
		return fmt.Errorf("preview_url: only a text message has a link preview (this is a %s message)", kinds[0])
	}
	if p.ReplyTo != "" {
		if err := checkMessageID("reply_to", p.ReplyTo); err != nil {
			return err
		}
	}
	return checkIdempotencyKey(p.IdempotencyKey)
}

// whatsAppKinds names a WhatsApp message's kinds, for errors.
const whatsAppKinds = "text, template, media, interactive, location, contacts and reaction"

// Limits of WhatsApp media messages (Cloud API messages reference and the
// spec's MediaObject_1: caption maxLength 1024).
const (
	maxMediaCaption  = 1024
	maxMediaLink     = 2048
	maxMediaID       = 64
	maxMediaFilename = 240
	maxMessageID     = 256
)

// validate checks a media message as Meta would take it: a known type;
// exactly one of link (absolute http(s), no userinfo) and id (digits); a
// caption only on image, video and document (Meta refuses one on audio
// and stickers with error 100); a filename only on a document.
func (m *Media) validate() error {
	switch m.Type {
	case MediaImage, MediaVideo, MediaAudio, MediaDocument, MediaSticker:
	case "":
		return errors.New("media.type: required: image, video, audio, document or sticker")
	default:
		return fmt.Errorf("media.type: %.40q: want image, video, audio, document or sticker", m.Type)
	}
	switch {
	case m.Link != "" && m.ID != "":
		return errors.New("media.link, media.id: set exactly one (got both)")
	case m.Link == "" && m.ID == "":
		return errors.New("media.link, media.id: set exactly one (got neither)")
	case m.Link != "":
		if err := checkLink("media.link", m.Link); err != nil {
			return err
		}
	case len(m.ID) > maxMediaID || !allDigits(m.ID):
		return fmt.Errorf("media.id: %.40q: want the digits of an uploaded media's ID (at most %d)", m.ID, maxMediaID)
	}
	if m.Caption != "" {
		if m.Type == MediaAudio || m.Type == MediaSticker {
			return fmt.Errorf("media.caption: %s messages have no caption (WhatsApp takes one on image, video and document)", m.Type)
		}
		if err := checkText("media.caption", m.Caption, maxMediaCaption); err != nil {
			return err
		}
	}
	if m.Filename != "" {
		if m.Type != MediaDocument {
			return fmt.Errorf("media.filename: only a document has a file name (this is %s)", m.Type)
		}
		if err := checkText("media.filename", m.Filename, maxMediaFilename); err != nil {
			return err
		}
		if i := strings.IndexFunc(m.Filename, func(r rune) bool { return r == '/' || r == '\\' || unicode.IsControl(r) }); i >= 0 {
			return fmt.Errorf("media.filename: has %q at byte %d: want a file name without '/', '\\' or control characters", m.Filename[i:i+1], i)
		}
	}
	return nil
}

// checkLink checks a link a provider fetches or opens (media, a
// call-to-action, a contact's web address): at most maxMediaLink bytes,
// then checkURL's absolute http(s) URL without userinfo.
func checkLink(field, s string) error {
	if len(s) > maxMediaLink {
		return fmt.Errorf("%s: %d bytes, want at most %d", field, len(s), maxMediaLink)
	}
	return checkURL(field, s)
}

// checkMessageID checks a WhatsApp message ID a send refers to: printable
// ASCII without spaces, at most maxMessageID bytes ("wamid.HBgL…").
func checkMessageID(field, id string) error {
	if len(id) > maxMessageID {
		return fmt.Errorf("%s: %d bytes, want at most %d", field, len(id), maxMessageID)
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] >= 0x7f {
			return fmt.Errorf("%s: %.40q has a space, control or non-ASCII character at byte %d: want a WhatsApp message ID (wamid.…)", field, id, i)
		}
	}
	return nil
}

func (t *Template) validate() error {
	switch {
	case t.Name == "":
		return errors.New("template.name: required")
	case len(t.Name) > maxTemplateName:
		return fmt.Errorf("template.name: %d characters, want at most %d", len(t.Name), maxTemplateName)
	case !templateNameRE.MatchString(t.Name):
		return fmt.Errorf("template.name: %q must match %s", t.Name, templateNameRE)
	case t.Language == "":
		return errors.New("template.language: required")
	}
	for i, v := range t.Parameters {
		if err := checkParamText(fmt.Sprintf("template.parameters[%d]", i), i+1, v, maxWhatsAppText); err != nil {
			return err
		}
	}
	return t.validateComponents()
}

// maxParamSpaces is the longest run of spaces a template parameter may hold.
const maxParamSpaces = 4

// checkParamText checks a template parameter's text: checkText's rules
// with max, then Meta's 132018 rules (checkTemplateParam). The error names
// field and, for the body's {{n}} (n > 0), the placeholder.
func checkParamText(field string, n int, v string, max int) error {
	if err := checkText(field, v, max); err != nil {
		return err
	}
	if err := checkTemplateParam(v); err != nil {
		if n > 0 {
			return fmt.Errorf("%s ({{%d}}): %w", field, n, err)
		}
		return fmt.Errorf("%s: %w", field, err)
	}
	return nil
}

// checkTemplateParam rejects what Meta rejects in a template parameter's
// text with error 132018, "There was an issue with the parameters in your
// template", details "Param text cannot have new-line/tab characters or more
// than 4 consecutive spaces" (WhatsApp Cloud API error codes;
// docs/providers.md): a line feed, carriage return or tab, or a run of five
// or more spaces. The provider would refuse the send for good, so it is
// refused at enqueue.
func checkTemplateParam(v string) error {
	if i := strings.IndexAny(v, "\n\r\t"); i >= 0 {
		name := map[byte]string{'\n': "a newline", '\r': "a carriage return", '\t': "a tab"}[v[i]]
		return fmt.Errorf("has %s at byte %d; WhatsApp rejects new-line and tab characters in parameters (error 132018)", name, i)
	}
	if i := strings.Index(v, strings.Repeat(" ", maxParamSpaces+1)); i >= 0 {
		return fmt.Errorf("has more than %d consecutive spaces at byte %d; WhatsApp rejects them in parameters (error 132018)", maxParamSpaces, i)
	}
	return nil
}

// Validate reports whether p is a well-formed version-1 payload in canonical
// form; the error names the first offending field by its JSON name. Exactly
// one of From and MessagingServiceSID ("MG" + 32 hex digits) must be set.
// From is a sender Twilio accepts (see CheckSender): an E.164 number, a
// short code, an alphanumeric sender ID or whatsapp:+E.164; a Messaging
// Service SID given as From is accepted too and sent as
// MessagingServiceSid (NewSMSSendTask moves it there). To is E.164, or
// whatsapp:+E.164 when From is a whatsapp: sender or a Messaging Service
// sends (Twilio requires From and To on the same channel, error 21910).
// The content is a Body (non-blank, without a NUL byte, at most 1600
// characters), MediaURLs (an MMS: 1 to 10 http(s) URLs, one from a
// whatsapp: sender, none from an alphanumeric sender ID; with or without a
// Body) or a ContentSID ("HX" + 32 hex digits) alone, with its
// ContentVariables (names of 1 to 64 letters, digits, '_', '.', '-';
// non-blank values of at most 1600 characters); ValidityPeriod is 0 or 1
// to 36,000 seconds.
func (p SMSSend) Validate() error { return p.validate(checkPhone) }

// CheckShape is WhatsAppSend.CheckShape for an SMS: what channels.Twilio
// checks every payload it sends with.
func (p SMSSend) CheckShape() error {
	if p.V == 0 {
		p.V = PayloadVersion
	}
	return p.validate(checkE164Syntax)
}

func (p SMSSend) validate(checkPhone func(field, s string) error) error {
	if err := checkVersion(p.V); err != nil {
		return err
	}
	if err := p.Delivery.validate(); err != nil {
		return err
	}
	switch {
	case p.From != "" && p.MessagingServiceSID != "":
		return errors.New("from, messaging_service_sid: set exactly one (got both)")
	case p.From == "" && p.MessagingServiceSID == "":
		return errors.New("from, messaging_service_sid: set exactly one (got neither)")
	case p.From != "":
		if err := checkSender("from", p.From, checkPhone); err != nil {
			return err
		}
	case !IsMessagingServiceSID(p.MessagingServiceSID):
		return fmt.Errorf("messaging_service_sid: %q must be \"MG\" followed by 32 hex digits", p.MessagingServiceSID)
	}
	to, waTo := strings.CutPrefix(p.To, whatsAppPrefix)
	switch _, waFrom := strings.CutPrefix(p.From, whatsAppPrefix); {
	case waFrom && !waTo:
		return fmt.Errorf("to: %q must be whatsapp:+E.164 like from %q (Twilio requires both on one channel, error 21910)", p.To, p.From)
	case waTo && p.From != "" && !waFrom && !IsMessagingServiceSID(p.From):
		return fmt.Errorf("to: %q is a WhatsApp address but from %q is not a whatsapp: sender (Twilio error 21910)", p.To, p.From)
	}
	if err := checkPhone("to", to); err != nil {
		return err
	}
	if err := p.checkContent(); err != nil {
		return err
	}
	if p.ValidityPeriod != 0 && (p.ValidityPeriod < 1 || p.ValidityPeriod > maxValidityPeriod) {
		return fmt.Errorf("validity_period: %d seconds, want 1 to %d (Twilio ValidityPeriod; 0 for Twilio's default)", p.ValidityPeriod, maxValidityPeriod)
	}
	return checkIdempotencyKey(p.IdempotencyKey)
}

// Limits of a Twilio message's content (Twilio Messages API; the spec's
// CreateMessageRequest).
const (
	maxMediaURLs      = 10    // MediaUrl: "up to ten media_url parameters per message"
	maxWhatsAppMedia  = 1     // a WhatsApp message through Twilio carries one media
	maxValidityPeriod = 36000 // ValidityPeriod: 1 to 36,000 seconds
	maxContentVars    = 100   // variables of one Content Template (Sluice's bound)
)

var (
	contentSIDRE = regexp.MustCompile(`^HX[0-9a-fA-F]{32}$`) // Twilio spec: ContentSid
	contentVarRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
)

// checkContent checks what the message carries: a body (at most 1,600
// characters), media (1 to 10 http(s) URLs: an MMS; one for a whatsapp:
// sender; none from an alphanumeric sender ID, which cannot send MMS), or a
// Content Template (HX + 32 hex digits, with its variables as names and
// strings), which stands alone: Twilio renders it, body and media
// included.
func (p SMSSend) checkContent() error {
	if p.ContentSID != "" {
		switch {
		case !contentSIDRE.MatchString(p.ContentSID):
			return fmt.Errorf("content_sid: %.40q must be \"HX\" followed by 32 hex digits (a Content Template's SID)", p.ContentSID)
		case p.Body != "":
			return errors.New("body, content_sid: set one (the Content Template holds the text)")
		case len(p.MediaURLs) > 0:
			return errors.New("media_urls, content_sid: set one (the Content Template holds the media)")
		case len(p.ContentVariables) > maxContentVars:
			return fmt.Errorf("content_variables: %d variables, want at most %d", len(p.ContentVariables), maxContentVars)
		}
		for _, name := range slices.Sorted(maps.Keys(p.ContentVariables)) { // (the first bad one, always the same)
			v := p.ContentVariables[name]
			if !contentVarRE.MatchString(name) {
				return fmt.Errorf("content_variables: name %.40q: want 1 to 64 letters, digits, '_', '.' or '-' (\"1\", \"first_name\")", name)
			}
			if err := checkText("content_variables."+name, v, maxSMSBody); err != nil {
				return err
			}
		}
		return nil
	}
	if len(p.ContentVariables) > 0 {
		return errors.New("content_variables: only with content_sid")
	}
	switch {
	case p.Body == "" && len(p.MediaURLs) == 0:
		return errors.New("body: required (or media_urls, or content_sid)")
	case p.Body != "":
		if err := checkText("body", p.Body, maxSMSBody); err != nil {
			return err
		}
	}
	if len(p.MediaURLs) == 0 {
		return nil
	}
	max := maxMediaURLs
	if strings.HasPrefix(p.From, whatsAppPrefix) || strings.HasPrefix(p.To, whatsAppPrefix) {
		max = maxWhatsAppMedia // (also through a Messaging Service, which has no From)
	}
	if len(p.MediaURLs) > max {
		return fmt.Errorf("media_urls: %d URLs, want at most %d (Twilio MediaUrl%s)", len(p.MediaURLs), max,
			map[bool]string{true: "; a WhatsApp message carries one", false: ""}[max == maxWhatsAppMedia])
	}
	if p.From != "" && !strings.HasPrefix(p.From, "+") && !strings.HasPrefix(p.From, whatsAppPrefix) && !shortCodeRE.MatchString(p.From) && !IsMessagingServiceSID(p.From) {
		return fmt.Errorf("media_urls: from %.40q is an alphanumeric sender ID, which cannot send MMS", p.From)
	}
	for i, u := range p.MediaURLs {
		if err := checkLink(fmt.Sprintf("media_urls[%d]", i), u); err != nil {
			return err
		}
	}
	return nil
}

// whatsAppPrefix starts a Twilio WhatsApp channel address ("whatsapp:+14155238886").
const whatsAppPrefix = "whatsapp:"

var (
	shortCodeRE = regexp.MustCompile(`^[0-9]{5,6}$`)
	alphaIDRE   = regexp.MustCompile(`^[A-Za-z0-9 ]{1,11}$`)
)

// checkSender requires from to be a sender Twilio's Messages API accepts as
// From (twilio_api_v2010.json CreateMessageRequest.From; Twilio's sender
// docs): a valid number in E.164 form (+12025550100); a short code, 5 or 6
// digits (US and CA short codes); an alphanumeric sender ID, 1 to 11 ASCII
// letters, digits and spaces with at least one letter, not starting or
// ending with a space; whatsapp:+E.164 (a WhatsApp sender through Twilio);
// or a Messaging Service SID ("MG" + 32 hex digits), which the Twilio
// client sends as MessagingServiceSid.
func checkSender(field, from string, checkPhone func(field, s string) error) error {
	switch {
	case strings.HasPrefix(from, "+"):
		return checkPhone(field, from)
	case strings.HasPrefix(from, whatsAppPrefix):
		return checkPhone(field+" (after whatsapp:)", strings.TrimPrefix(from, whatsAppPrefix))
	case IsMessagingServiceSID(from), shortCodeRE.MatchString(from):
		return nil
	case alphaIDRE.MatchString(from) && strings.ContainsFunc(from, isASCIILetter) &&
		from[0] != ' ' && from[len(from)-1] != ' ':
		return nil
	}
	return fmt.Errorf("%s: %.40q is not a Twilio sender: want an E.164 number (+12025550100), a short code (5 or 6 digits), "+
		"an alphanumeric sender ID (1 to 11 letters, digits and spaces, at least one letter), whatsapp:+E.164 "+
		"or a Messaging Service SID (MG + 32 hex digits)", field, from)
}

func isASCIILetter(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' }

// Validate reports whether p is a well-formed version-1 payload; the error
// names the first offending field by its JSON name. URL must be an absolute
// http(s) URL with a host and no userinfo; Payload must be a JSON object or
// array in valid UTF-8 (RFC 8259 §8.1: receivers' Standard Webhooks
// libraries parse the body as UTF-8 and reject other bytes; an empty payload
// is an error, not "{}"); IdempotencyKey is required: it is the
// webhook-id, the id receivers deduplicate by, and the worker cannot sign a
// delivery without it (CLI: --key).
func (p WebhookDeliver) Validate() error { return p.validate(checkPhone) }

func (p WebhookDeliver) validate(checkPhone func(field, s string) error) error {
	if err := checkVersion(p.V); err != nil {
		return err
	}
	if err := p.Delivery.validate(); err != nil {
		return err
	}
	if err := checkURL("url", p.URL); err != nil {
		return err
	}
	if strings.TrimSpace(p.EventType) == "" {
		return errors.New("event_type: required")
	}
	if err := checkJSONPayload(p.Payload); err != nil {
		return err
	}
	if p.IdempotencyKey == "" {
		return errors.New("idempotency_key: required for webhooks: it is the webhook-id receivers deduplicate by (CLI: --key)")
	}
	return checkIdempotencyKey(p.IdempotencyKey)
}

// Validate reports whether p is a well-formed version-1 payload; the error
// names the first offending field by its JSON name. Method must be one of
// GET, POST, PUT, PATCH, DELETE in upper case (NewHTTPCallTask upper-cases
// it); URL must be an absolute http(s) URL; header names must be RFC 9110
// tokens and values must not contain CR, LF or NUL.
func (p HTTPCall) Validate() error { return p.validate(checkPhone) }

func (p HTTPCall) validate(checkPhone func(field, s string) error) error {
	if err := checkVersion(p.V); err != nil {
		return err
	}
	if err := p.Delivery.validate(); err != nil {
		return err
	}
	if !slices.Contains(httpMethods, p.Method) {
		return fmt.Errorf("method: %q is not one of %s", p.Method, strings.Join(httpMethods, ", "))
	}
	if err := checkURL("url", p.URL); err != nil {
		return err
	}
	names := make([]string, 0, len(p.Headers))
	for name := range p.Headers {
		names = append(names, name)
	}
	slices.Sort(names) // report the same header first every time
	for _, name := range names {
		if !isToken(name) {
			return fmt.Errorf("headers: %q is not a valid header name", name)
		}
		if strings.ContainsAny(p.Headers[name], "\r\n\x00") {
			return fmt.Errorf("headers[%q]: value contains CR, LF or NUL", name)
		}
	}
	return checkIdempotencyKey(p.IdempotencyKey)
}

func (p *WhatsAppSend) normalize() {
	p.V = PayloadVersion
	p.PhoneNumberID = strings.TrimSpace(p.PhoneNumberID)
	p.To = normPhone(p.To)
	if p.Media != nil {
		m := *p.Media // (a copy: the caller's Media is not changed)
		m.Type = strings.ToLower(strings.TrimSpace(m.Type))
		m.Link, m.ID = strings.TrimSpace(m.Link), strings.TrimSpace(m.ID)
		p.Media = &m
	}
	p.ReplyTo = strings.TrimSpace(p.ReplyTo)
}

// normalize trims the senders, writes numbers in E.164 (also after
// whatsapp:), moves a Messaging Service SID given as From to
// MessagingServiceSID, and gives To the whatsapp: prefix when From has it.
func (p *SMSSend) normalize() {
	p.V = PayloadVersion
	p.From = normAddress(p.From)
	p.MessagingServiceSID = strings.TrimSpace(p.MessagingServiceSID)
	p.From, p.MessagingServiceSID = p.Sender()
	p.To = normAddress(p.To)
	if strings.HasPrefix(p.From, whatsAppPrefix) && strings.HasPrefix(p.To, "+") {
		p.To = whatsAppPrefix + p.To
	}
}

// normAddress is normPhone for a number, also after "whatsapp:"; other
// senders (short codes, alphanumeric IDs) are only trimmed.
func normAddress(s string) string {
	t := strings.TrimSpace(s)
	if rest, ok := strings.CutPrefix(t, whatsAppPrefix); ok {
		return whatsAppPrefix + normPhone(rest)
	}
	if strings.HasPrefix(t, "+") {
		return normPhone(s)
	}
	return t
}

// normalize trims the URL and stamps the event's time (now, in UTC
// whole seconds) on a payload without one.
func (p *WebhookDeliver) normalize() {
	p.V = PayloadVersion
	p.URL = strings.TrimSpace(p.URL)
	if p.Timestamp.IsZero() {
		p.Timestamp = time.Now().UTC().Truncate(time.Second)
	}
}

func (p *HTTPCall) normalize() {
	p.V = PayloadVersion
	p.Method = strings.ToUpper(strings.TrimSpace(p.Method))
	p.URL = strings.TrimSpace(p.URL)
}

func checkVersion(v int) error {
	if v != PayloadVersion {
		return fmt.Errorf("v: unsupported version %d (want %d)", v, PayloadVersion)
	}
	return nil
}

// e164Syntax is the shape of an E.164 number: "+", a non-zero digit, and
// 7 to 15 digits in all (ITU-T E.164).
var e164Syntax = regexp.MustCompile(`^\+[1-9][0-9]{6,14}$`)

// checkE164Syntax is the decoders' phone check: the worker receives
// payloads that a constructor already validated in full, so it checks only
// the shape, and leaves libphonenumber's cost (about 30 µs a number) to
// enqueue time. A well-formed number that is not assigned gets the
// provider's permanent error (WhatsApp 131026, Twilio 21211) and is
// archived with it.
func checkE164Syntax(field, s string) error {
	if s == "" {
		return fmt.Errorf("%s: required", field)
	}
	if !e164Syntax.MatchString(s) {
		return fmt.Errorf("%s: %q is not an E.164 phone number (want + and 7 to 15 digits)", field, s)
	}
	return nil
}

// checkPhone requires s to be a valid number already in E.164 form.
func checkPhone(field, s string) error {
	if s == "" {
		return fmt.Errorf("%s: required", field)
	}
	e, err := NormalizePhone(s)
	if err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	if e != s {
		return fmt.Errorf("%s: %q is not in E.164 form (want %q)", field, s, e)
	}
	return nil
}

// checkText requires s to be non-blank UTF-8 of at most max code points,
// without a NUL byte (as `sluice send` refuses one in a CSV cell: it is no
// character of a message, and a sign of a UTF-16 file or a binary).
func checkText(field, s string, max int) error {
	switch {
	case strings.TrimSpace(s) == "":
		return fmt.Errorf("%s: required (got only whitespace or nothing)", field)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s: not valid UTF-8", field)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%s: contains a NUL byte at byte %d", field, strings.IndexByte(s, 0))
	}
	if n := utf8.RuneCountInString(s); n > max {
		return fmt.Errorf("%s: %d characters, want at most %d", field, n, max)
	}
	return nil
}

// checkURL requires an absolute http or https URL with a host and no userinfo.
// The userinfo error does not repeat the URL: it holds credentials.
func checkURL(field, s string) error {
	if s == "" {
		return fmt.Errorf("%s: required", field)
	}
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("%s: %q is not a valid URL: %v", field, s, err)
	}
	switch {
	case u.User != nil:
		return fmt.Errorf("%s: must not contain userinfo (user:password@)", field)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%s: %q must be an absolute http or https URL", field, s)
	case u.Hostname() == "":
		return fmt.Errorf("%s: %q has no host", field, s)
	}
	return nil
}

func checkJSONPayload(b json.RawMessage) error {
	t := bytes.TrimSpace(b)
	switch {
	case len(t) == 0:
		return errors.New("payload: required (a JSON object or array)")
	case !utf8.Valid(t):
		return fmt.Errorf("payload: not valid UTF-8 at byte %d; JSON must be UTF-8 (RFC 8259), and receivers verify the signature over the body as UTF-8", invalidUTF8At(b))
	case !json.Valid(t):
		return errors.New("payload: not valid JSON")
	case t[0] != '{' && t[0] != '[':
		return fmt.Errorf("payload: must be a JSON object or array, got %.20s", t)
	}
	return nil
}

// invalidUTF8At is the offset of the first byte of b that is not valid
// UTF-8, or -1.
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// checkIdempotencyKey allows an empty key (no deduplication) or 1 to
// 200 characters of [A-Za-z0-9._:-].
func checkIdempotencyKey(k string) error {
	if len(k) > MaxIdempotencyKey {
		return fmt.Errorf("idempotency_key: %d characters, want at most %d", len(k), MaxIdempotencyKey)
	}
	for _, c := range []byte(k) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == ':' || c == '-'
		if !ok {
			return fmt.Errorf("idempotency_key: %q may only contain A-Z a-z 0-9 . _ : -", k)
		}
	}
	return nil
}

func allDigits(s string) bool {
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// isToken reports whether s is an RFC 9110 token (a valid header name).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
		if !ok {
			return false
		}
	}
	return true
}

// endpointNameRE is a webhook endpoint's name in channels.webhook.endpoints.
var endpointNameRE = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{1,64}$`)

// ValidEndpointName reports whether s may name a webhook endpoint in
// channels.webhook.endpoints: 1 to 64 ASCII letters, digits and '_', '.',
// ':', '/', '-'. WebhookDeliver.Endpoint is not held to it (tasks
// enqueued before endpoints had secrets of their own may name others);
// once endpoints are listed, a delivery must name one of them or none.
func ValidEndpointName(s string) bool { return endpointNameRE.MatchString(s) }

// IsMessagingServiceSID reports whether s has the shape of a Twilio
// Messaging Service SID: "MG" and 32 hex digits (Twilio's OpenAPI spec,
// MessagingServiceSid).
func IsMessagingServiceSID(s string) bool { return serviceSIDRE.MatchString(s) }

// Sender returns the send's From and Messaging Service SID as Twilio takes
// them: a Messaging Service SID given as From (with no
// MessagingServiceSID) is the service, and From is then "" (Twilio refuses
// it in From with 21212).
func (p SMSSend) Sender() (from, service string) {
	from, service = p.From, p.MessagingServiceSID
	if service == "" && IsMessagingServiceSID(from) {
		from, service = "", from
	}
	return from, service
}
