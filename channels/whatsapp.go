package channels

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/tasks"
)

// WhatsApp defaults.
const (
	DefaultWhatsAppBaseURL = "https://graph.facebook.com"
	DefaultWhatsAppVersion = "v23.0"
)

// whatsappVersion is the Graph API version pattern (docs/providers.md).
var whatsappVersion = regexp.MustCompile(`^v[0-9]+\.[0-9]+$`)

// WhatsApp sends messages through the WhatsApp Business Cloud API
// (POST {BaseURL}/{Version}/{phone_number_id}/messages). The zero value is not
// usable: Token is required. Safe for concurrent use.
type WhatsApp struct {
	// BaseURL is the Graph API root without a trailing version; default
	// DefaultWhatsAppBaseURL ("https://graph.facebook.com").
	BaseURL string
	// Version is the Graph API version, matching ^v[0-9]+\.[0-9]+$; default
	// DefaultWhatsAppVersion ("v23.0").
	Version string
	// Token is the system user access token, sent as "Authorization: Bearer …".
	// Required. Never appears in errors.
	Token string
	// HTTP is the client to use; nil = NewHTTPClient() (15 s timeout, no redirects).
	HTTP *http.Client
	// Now is the clock used to interpret Retry-After dates; nil = time.Now.
	Now func() time.Time
}

// Validate checks the configuration and names the first bad field.
func (c *WhatsApp) Validate() error {
	if c.Token == "" {
		return errors.New("channels: WhatsApp.Token: required")
	}
	if !validHeaderValue(c.Token) {
		return errors.New("channels: WhatsApp.Token: contains control characters")
	}
	if c.Version != "" && !whatsappVersion.MatchString(c.Version) {
		return fmt.Errorf("channels: WhatsApp.Version: want ^v[0-9]+\\.[0-9]+$ (like %q), got %q", DefaultWhatsAppVersion, c.Version)
	}
	if err := validBaseURL(c.BaseURL); err != nil {
		return fmt.Errorf("channels: WhatsApp.BaseURL: %w", err)
	}
	return nil
}

// Send sends one text, template or media message and returns the message
// ID ("wamid.…", from messages[0].id of the 200 response).
//
// The JSON body is the one Meta's OpenAPI spec
// (whatsapp-business-messaging-api_v23.0.yaml, schemas TextMessage,
// TemplateMessage, ImageMessage, VideoMessage, AudioMessage,
// DocumentMessage and StickerMessage) accepts:
//
//	{"messaging_product":"whatsapp","recipient_type":"individual","to":"12025550123",
//	 "type":"text","text":{"body":"…","preview_url":false}}
//	{"messaging_product":"whatsapp","recipient_type":"individual","to":"12025550123",
//	 "type":"template","template":{"name":"order_update",
//	  "language":{"policy":"deterministic","code":"en_US"},
//	  "components":[{"type":"body","parameters":[{"type":"text","text":"…"}]}]}}
//	{"messaging_product":"whatsapp","recipient_type":"individual","to":"12025550123",
//	 "type":"document","context":{"message_id":"wamid.…"},
//	 "document":{"link":"https://…/i.pdf","caption":"…","filename":"i.pdf"}}
//
// "to" is p.To without its "+". components is omitted when the template has
// no parameters. A media message's object is named by its type (image,
// video, audio, document, sticker) and holds id or link, and caption and
// filename where p.Media has them; context is sent for p.ReplyTo. language.policy is sent because the spec's LanguageObject
// requires it ("deterministic" is its only value). p.IdempotencyKey is sent as
// the Idempotency-Key header (IETF httpapi draft; Meta ignores it, the emulator
// counts duplicates with it); it is not put in biz_opaque_callback_data, which
// the spec defines only for calls, not on message bodies.
//
// Errors are *Error, classified on the JSON error.code, not on the HTTP
// status (docs/providers.md, WhatsApp table; Meta's error codes page):
//
//   - 4 (app rate limit), 80007 (WABA rate limit): Throttled, ScopeAccount;
//   - 130429 (throughput), 131057 (throughput upgrade): Throttled, ScopeSender;
//   - 131056 (pair rate limit): Throttled, ScopePair;
//   - 131048 (spam rate limit): Throttled, ScopeSender, RetryAfter 1 h if the
//     provider gave none — a quality limit, so no fast retries;
//   - 131049 (per-user marketing limit): Throttled, ScopePair, RetryAfter 24 h if
//     none given — Meta says not to retry soon, and its window is a day;
//   - 190 (access token expired or invalid): Unauthorized, ScopeChannel — the
//     channel's token: pause the channel, probe, never archive;
//   - 1, 2, 131000: Transient; is_transient:true makes any other code Transient;
//   - 368, 131026, 131047: Permanent; any other code by its HTTP status: 5xx
//     Transient, 429 Throttled with ScopeSender, 401 Unauthorized, else (403
//     included: a permission of the token, such as 10 or 131005, often for
//     one number) Permanent;
//   - no parsable error body: by HTTP status, 429 Throttled with ScopeSender
//     (the phone number ID: see uncodedThrottle), 401 and 403 Unauthorized.
//
// RetryAfter comes from the x-business-use-case-usage header
// (estimated_time_to_regain_access, minutes) or a Retry-After header, whichever
// is larger. An invalid payload (tasks.WhatsAppSend.CheckShape: every rule
// of enqueue but libphonenumber's, whoever built p) or configuration is a
// Permanent *Error without HTTPStatus. If ctx is cancelled the error wraps
// context.Canceled and is not an *Error.
func (c *WhatsApp) Send(ctx context.Context, p tasks.WhatsAppSend) (Response, error) {
	if err := c.Validate(); err != nil {
		return Response{}, permanent(ProviderWhatsApp, "config: %v", err)
	}
	body, err := whatsappBody(p)
	if err != nil {
		return Response{}, permanent(ProviderWhatsApp, "invalid payload: %v", err)
	}
	if !validHeaderValue(p.IdempotencyKey) {
		return Response{}, permanent(ProviderWhatsApp, "invalid payload: idempotency_key contains control characters")
	}
	base := strings.TrimRight(orDefault(c.BaseURL, DefaultWhatsAppBaseURL), "/")
	u := base + "/" + orDefault(c.Version, DefaultWhatsAppVersion) + "/" + p.PhoneNumberID + "/messages"
	req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return Response{}, permanent(ProviderWhatsApp, "config: building request: %v", redactErr(err, []string{c.Token}))
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", DefaultUserAgent)
	if p.IdempotencyKey != "" {
		req.Header.Set("Idempotency-Key", p.IdempotencyKey)
	}
	r, err := do(ctx, c.HTTP, req, ProviderWhatsApp, c.Token)
	if err != nil {
		return Response{}, err
	}
	return whatsappResult(r, clock(c.Now), c.Token)
}

// whatsappMessage is the request body; see Send.
type whatsappMessage struct {
	MessagingProduct string            `json:"messaging_product"`
	RecipientType    string            `json:"recipient_type"`
	To               string            `json:"to"`
	Type             string            `json:"type"`
	Context          *whatsappContext  `json:"context,omitempty"`
	Text             *whatsappText     `json:"text,omitempty"`
	Template         *whatsappTemplate `json:"template,omitempty"`
	whatsappMediaOf
	Interactive *whatsappInteract `json:"interactive,omitempty"`
	Location    *whatsappLocation `json:"location,omitempty"`
	Contacts    []tasks.Contact   `json:"contacts,omitempty"`
	Reaction    *tasks.Reaction   `json:"reaction,omitempty"`
}

// whatsappInteract is an interactive object (the spec's InteractiveObject;
// cta_url as Meta's interactive messages reference gives it).
type whatsappInteract struct {
	Type   string            `json:"type"`
	Header *whatsappHeader   `json:"header,omitempty"`
	Body   whatsappTextPart  `json:"body"`
	Footer *whatsappTextPart `json:"footer,omitempty"`
	Action whatsappAction    `json:"action"`
}

type whatsappHeader struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
	whatsappMediaOf
}

// whatsappMediaOf holds a media object under the member its type names
// (image, video, audio, document, sticker), in a message, an interactive
// header and a template header parameter alike.
type whatsappMediaOf struct {
	Image    *whatsappMedia `json:"image,omitempty"`
	Video    *whatsappMedia `json:"video,omitempty"`
	Audio    *whatsappMedia `json:"audio,omitempty"`
	Document *whatsappMedia `json:"document,omitempty"`
	Sticker  *whatsappMedia `json:"sticker,omitempty"`
}

// set puts md under typ's member; false for a type that is not a media
// type.
func (m *whatsappMediaOf) set(typ string, md *whatsappMedia) bool {
	switch typ {
	case tasks.MediaImage:
		m.Image = md
	case tasks.MediaVideo:
		m.Video = md
	case tasks.MediaAudio:
		m.Audio = md
	case tasks.MediaDocument:
		m.Document = md
	case tasks.MediaSticker:
		m.Sticker = md
	default:
		return false
	}
	return true
}

type whatsappTextPart struct {
	Text string `json:"text"`
}

type whatsappAction struct {
	Buttons    []whatsappReplyButton `json:"buttons,omitempty"`
	Button     string                `json:"button,omitempty"`
	Sections   []tasks.ListSection   `json:"sections,omitempty"`
	Name       string                `json:"name,omitempty"`
	Parameters *whatsappCTA          `json:"parameters,omitempty"`
}

type whatsappReplyButton struct {
	Type  string            `json:"type"`
	Reply tasks.ReplyButton `json:"reply"`
}

type whatsappCTA struct {
	DisplayText string `json:"display_text"`
	URL         string `json:"url"`
}

// whatsappLocation is a location object: the spec types latitude and
// longitude as strings.
type whatsappLocation struct {
	Latitude  string `json:"latitude"`
	Longitude string `json:"longitude"`
	Name      string `json:"name,omitempty"`
	Address   string `json:"address,omitempty"`
}

// whatsappContext names the message a reply quotes (context.message_id).
type whatsappContext struct {
	MessageID string `json:"message_id"`
}

// whatsappMedia is a media object (the spec's MediaObject; StickerMessage
// allows only id or link, which a sticker's validated payload holds).
type whatsappMedia struct {
	ID       string `json:"id,omitempty"`
	Link     string `json:"link,omitempty"`
	Caption  string `json:"caption,omitempty"`
	Filename string `json:"filename,omitempty"`
}

type whatsappText struct {
	Body       string `json:"body"`
	PreviewURL bool   `json:"preview_url"`
}

type whatsappTemplate struct {
	Name       string              `json:"name"`
	Language   whatsappLanguage    `json:"language"`
	Components []whatsappComponent `json:"components,omitempty"`
}

type whatsappLanguage struct {
	Policy string `json:"policy"`
	Code   string `json:"code"`
}

type whatsappComponent struct {
	Type       string              `json:"type"`
	SubType    string              `json:"sub_type,omitempty"`
	Index      string              `json:"index,omitempty"`
	Parameters []whatsappParameter `json:"parameters"`
}

// whatsappParameter is a template parameter (the spec's ParameterObject
// and ButtonParameterObject; location and coupon_code as Meta's template
// reference gives them).
type whatsappParameter struct {
	Type     string                  `json:"type"`
	Text     *string                 `json:"text,omitempty"`
	Currency *tasks.TemplateCurrency `json:"currency,omitempty"`
	DateTime *tasks.TemplateDateTime `json:"date_time,omitempty"`
	whatsappMediaOf
	Location   *whatsappLocation `json:"location,omitempty"`
	Payload    *string           `json:"payload,omitempty"`
	CouponCode *string           `json:"coupon_code,omitempty"`
}

// textParam is a text parameter.
func textParam(v string) whatsappParameter { return whatsappParameter{Type: "text", Text: &v} }

// templateComponents are the components of a template, in the order
// header, body, buttons; the error is a payload's that bypassed tasks'
// validation.
func templateComponents(t *tasks.Template) ([]whatsappComponent, error) {
	var out []whatsappComponent
	if h := t.Header; h != nil {
		p := whatsappParameter{Type: h.Type}
		md := &whatsappMedia{ID: h.ID, Link: h.Link, Filename: h.Filename}
		switch {
		case h.Type == "text":
			p.Text = &h.Text
		case p.set(h.Type, md):
		case h.Type == "location":
			if h.Location == nil { // (a payload that bypassed tasks' validation)
				return nil, errors.New("template.header.location: required for a location header")
			}
			p.Location = locationOf(h.Location)
		}
		out = append(out, whatsappComponent{Type: "header", Parameters: []whatsappParameter{p}})
	}
	var body []whatsappParameter
	for _, v := range t.Parameters {
		body = append(body, textParam(v))
	}
	for _, bp := range t.BodyParams {
		p := whatsappParameter{Type: bp.Type, Currency: bp.Currency, DateTime: bp.DateTime}
		if bp.Type == "text" {
			p.Text = &bp.Text
		}
		body = append(body, p)
	}
	if len(body) > 0 {
		out = append(out, whatsappComponent{Type: "body", Parameters: body})
	}
	for _, b := range t.Buttons {
		c := whatsappComponent{Type: "button", SubType: b.SubType, Index: strconv.Itoa(b.Index)}
		switch b.SubType {
		case "quick_reply":
			c.Parameters = []whatsappParameter{{Type: "payload", Payload: &b.Payload}}
		case "url":
			c.Parameters = []whatsappParameter{textParam(b.Text)}
		case "copy_code":
			c.Parameters = []whatsappParameter{{Type: "coupon_code", CouponCode: &b.CouponCode}}
		}
		out = append(out, c)
	}
	return out, nil
}

// locationOf is a location object (the spec types its coordinates as
// strings).
func locationOf(l *tasks.Location) *whatsappLocation {
	return &whatsappLocation{Latitude: strconv.FormatFloat(l.Latitude, 'f', -1, 64),
		Longitude: strconv.FormatFloat(l.Longitude, 'f', -1, 64), Name: l.Name, Address: l.Address}
}

// whatsappBody checks p (tasks.WhatsAppSend.CheckShape: every rule of
// enqueue but libphonenumber's) and builds its JSON body.
func whatsappBody(p tasks.WhatsAppSend) ([]byte, error) {
	if err := p.CheckShape(); err != nil {
		return nil, err
	}
	return buildWhatsAppBody(p)
}

// buildWhatsAppBody is whatsappBody without CheckShape: the body a payload
// makes as it is (the contract tests show that payloads Sluice refuses
// make bodies the spec refuses too).
func buildWhatsAppBody(p tasks.WhatsAppSend) ([]byte, error) {
	if p.PhoneNumberID == "" || !isDigits(p.PhoneNumberID) {
		return nil, fmt.Errorf("phone_number_id: want digits, got %q", p.PhoneNumberID)
	}
	to, ok := strings.CutPrefix(p.To, "+")
	if !ok || !isDigits(to) {
		return nil, fmt.Errorf("to: want E.164 like +12025550123, got %q", p.To)
	}
	m := whatsappMessage{MessagingProduct: "whatsapp", RecipientType: "individual", To: to}
	if p.ReplyTo != "" {
		m.Context = &whatsappContext{MessageID: p.ReplyTo}
	}
	kinds := 0
	for _, set := range []bool{p.Text != "", p.Template != nil, p.Media != nil, p.Interactive != nil, p.Location != nil, p.Contacts != nil, p.Reaction != nil} {
		if set {
			kinds++
		}
	}
	switch {
	case kinds > 1:
		return nil, errors.New("text, template, media, interactive, location, contacts, reaction: want exactly one, got several")
	case p.Interactive != nil:
		m.Type = "interactive"
		m.Interactive = interactiveOf(p.Interactive)
	case p.Location != nil:
		m.Type = "location"
		m.Location = locationOf(p.Location)
	case p.Contacts != nil:
		m.Type = "contacts"
		m.Contacts = p.Contacts
	case p.Reaction != nil:
		m.Type = "reaction"
		m.Reaction = p.Reaction
	case p.Text != "":
		m.Type = "text"
		m.Text = &whatsappText{Body: p.Text, PreviewURL: p.PreviewURL}
	case p.Media != nil:
		md := &whatsappMedia{ID: p.Media.ID, Link: p.Media.Link, Caption: p.Media.Caption, Filename: p.Media.Filename}
		if (md.ID == "") == (md.Link == "") {
			return nil, errors.New("media: want exactly one of link and id")
		}
		m.Type = p.Media.Type
		if !m.set(p.Media.Type, md) {
			return nil, fmt.Errorf("media.type: %.40q: want image, video, audio, document or sticker", p.Media.Type)
		}
	case p.Template != nil:
		if p.Template.Name == "" || p.Template.Language == "" {
			return nil, errors.New("template: name and language are required")
		}
		m.Type = "template"
		m.Template = &whatsappTemplate{
			Name:     p.Template.Name,
			Language: whatsappLanguage{Policy: "deterministic", Code: p.Template.Language},
		}
		comps, err := templateComponents(p.Template)
		if err != nil {
			return nil, err
		}
		m.Template.Components = comps
	default:
		return nil, errors.New("text, template, media, interactive, location, contacts, reaction: want exactly one, got none")
	}
	return json.Marshal(m)
}

// interactiveOf is the interactive object of a validated payload.
func interactiveOf(in *tasks.Interactive) *whatsappInteract {
	out := &whatsappInteract{Type: in.Type, Body: whatsappTextPart{Text: in.Body}}
	if in.Footer != "" {
		out.Footer = &whatsappTextPart{Text: in.Footer}
	}
	if h := in.Header; h != nil {
		out.Header = &whatsappHeader{Type: h.Type, Text: h.Text}
		if h.Type != "text" {
			out.Header.set(h.Type, &whatsappMedia{ID: h.ID, Link: h.Link})
		}
	}
	switch in.Type {
	case tasks.InteractiveButton:
		for _, b := range in.Buttons {
			out.Action.Buttons = append(out.Action.Buttons, whatsappReplyButton{Type: "reply", Reply: b})
		}
	case tasks.InteractiveList:
		out.Action.Button, out.Action.Sections = in.ListButton, in.ListSections()
	case tasks.InteractiveCTAURL:
		out.Action.Name, out.Action.Parameters = "cta_url", &whatsappCTA{DisplayText: in.DisplayText, URL: in.URL}
	}
	return out
}

// whatsappCodes is docs/providers.md's WhatsApp table (source: Meta, Cloud API error
// codes and throughput docs).
var whatsappCodes = map[int]codeRule{
	4:      {Throttled, ScopeAccount, "app rate limit", nil, 2, 0},
	80007:  {Throttled, ScopeAccount, "WABA rate limit", nil, 2, 0},
	130429: {Throttled, ScopeSender, "throughput limit", nil, 2, perSecondMaxWait},
	131056: {Throttled, ScopePair, "pair rate limit", nil, 4, 0},
	131057: {Throttled, ScopeSender, "throughput upgrade in progress", fixed(time.Minute), 0, 0},
	131048: {Throttled, ScopeSender, "spam rate limit", fixed(time.Hour), 0, 0},
	131049: {Throttled, ScopePair, "per-user marketing limit", fixed(24 * time.Hour), 0, 0},
	1:      {Transient, "", "unknown error", nil, 0, 0},
	2:      {Transient, "", "service unavailable", nil, 0, 0},
	131000: {Transient, "", "something went wrong", nil, 0, 0},
	368:    {Permanent, "", "blocked for policy violation", nil, 0, 0},
	131026: {Permanent, "", "undeliverable", nil, 0, 0},
	131047: {Permanent, "", "outside 24 h window", nil, 0, 0},
	190:    {Unauthorized, ScopeChannel, "access token expired or invalid", nil, 0, 0},
}

// whatsappResponse holds the fields of the 200 body (MessageResponsePayload)
// and of the error body (GraphAPIError) that Send reads.
type whatsappResponse struct {
	Messages []struct {
		ID string `json:"id"`
	} `json:"messages"`
	Error *struct {
		Message     string `json:"message"`
		Type        string `json:"type"`
		Code        int    `json:"code"`
		IsTransient bool   `json:"is_transient"`
		ErrorData   struct {
			Details string `json:"details"`
		} `json:"error_data"`
	} `json:"error"`
}

// whatsappResult classifies a /messages response; see Send.
func whatsappResult(r *reply, now time.Time, secrets ...string) (Response, error) {
	resp := Response{Status: r.status}
	var body whatsappResponse
	jsonErr := json.Unmarshal(r.body, &body)
	if r.status >= 200 && r.status < 300 {
		if jsonErr == nil && len(body.Messages) > 0 && body.Messages[0].ID != "" {
			resp.ProviderID = body.Messages[0].ID
			resp.Incomplete = r.incomplete
			return resp, nil
		}
		// Accepted, but the body is cut off or not in the documented shape: a
		// 2xx is a delivery, and a retry would send the message twice (Meta
		// ignores Idempotency-Key). Success without a message ID.
		resp.Incomplete = true
		return resp, nil
	}
	secrets = r.redactions(secrets)
	e := &Error{Provider: ProviderWhatsApp, HTTPStatus: r.status}
	e.RetryAfter = max(parseBusinessUseCaseUsage(r.header), ParseRetryAfter(r.header, now))
	if jsonErr != nil || body.Error == nil {
		e.Class = statusClass(r.status)
		if e.Class == Unauthorized {
			e.Scope = ScopeChannel
		}
		uncodedThrottle(e)
		e.Message = bodyMessage(r, secrets)
		return resp, e
	}
	e.Code = body.Error.Code
	e.Message = body.Error.Message
	if d := body.Error.ErrorData.Details; d != "" && d != e.Message {
		e.Message += " (" + d + ")"
	}
	e.Message = cleanMessage(e.Message, secrets)
	rule, known := whatsappCodes[e.Code]
	switch {
	case known && rule.class == Throttled:
		e.Class, e.Scope = Throttled, rule.scope
		if e.RetryAfter == 0 {
			e.Growth, e.MaxWait = rule.growth, rule.most
			if rule.retry != nil {
				e.RetryAfter = rule.retry(now)
			}
		}
	case known && rule.class == Unauthorized:
		e.Class, e.Scope = Unauthorized, rule.scope
	case r.status == http.StatusTooManyRequests && !known:
		// Every 429 counts, is_transient or not: the number is paused for
		// its Retry-After in every worker (uncodedThrottle).
		e.Class = Throttled
		uncodedThrottle(e)
	case body.Error.IsTransient:
		e.Class = Transient
	case known:
		e.Class = rule.class
	case r.status == http.StatusForbidden:
		// A code that is not 190 on a 403 concerns what the token may
		// do (10 permission denied, 131005 access denied), often for one
		// number only: not the channel's credentials.
		e.Class = Permanent
	default:
		e.Class = statusClass(r.status)
		uncodedThrottle(e)
	}
	if e.Class == Unauthorized {
		e.Scope = ScopeChannel
	}
	return resp, e
}

// uncodedThrottle gives a throttle that carries no code the tables know
// (an HTTP 429 with no error body, or with a code not in them) its scope
// and backoff. WhatsApp: the sender, as Cloud API limits throughput per
// business phone number (130429, docs/providers.md), the number in the
// request's URL. Twilio: the sender too; Twilio documents HTTP 429 only with
// code 20429 (the account's API concurrency), which keeps the account scope
// through its table row, so a 429 without it (no body, an unknown code:
// a proxy, an edge, a limit Twilio does not document) names no scope and
// the narrowest one that stops the requests that drew it is paused. Either
// way every 429 pauses something, in every worker: for its Retry-After,
// else the channel's backoff doubling while nothing gets through, at most
// perSecondMaxWait.
func uncodedThrottle(e *Error) {
	if e.Class != Throttled {
		return
	}
	e.Scope = ScopeSender
	if e.RetryAfter == 0 {
		e.Growth, e.MaxWait = 2, perSecondMaxWait
	}
}

// statusClass classifies a non-2xx response the provider gave no known code
// for: 429 Throttled, 401 and 403 Unauthorized (the channel's credentials),
// 5xx Transient, anything else Permanent.
func statusClass(status int) Class {
	switch {
	case status == http.StatusTooManyRequests:
		return Throttled
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return Unauthorized
	case status >= 500:
		return Transient
	}
	return Permanent
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// validBaseURL accepts "" (default) or an absolute http(s) URL without query.
func validBaseURL(raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("want an absolute http(s) URL, got %q", redactURL(raw))
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("want no user info, query or fragment, got %q", redactURL(raw))
	}
	return nil
}
