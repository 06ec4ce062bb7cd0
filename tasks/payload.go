package tasks

import (
	"encoding/json"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"
)

// Task type names, as stored in asynq's Redis keys.
const (
	TypeWhatsAppSend   = "whatsapp:send"
	TypeSMSSend        = "sms:send"
	TypeWebhookDeliver = "webhook:deliver"
	TypeHTTPCall       = "http:call"
)

// PayloadVersion is the "v" every payload carries; decoders reject other versions.
const PayloadVersion = 1

// Priority values of Delivery.Priority.
const (
	PriorityBulk = ""     // the default: queues behind sends planned before it
	PriorityHigh = "high" // transactional: overtakes planned bulk sends
)

// Delivery holds how a send is scheduled; every payload embeds it, so its
// fields sit at the payload's top level ({"priority":"high", ...}).
type Delivery struct {
	// Priority is "high" for a transactional send that must not wait behind
	// bulk traffic on the same limit: it takes the first free slot, at most
	// the worker's hold ahead (channels.*.hold, 2s), or "" for bulk ("bulk"
	// is accepted and means the same).
	Priority string `json:"priority,omitempty"`
	// Tenant names who the send is for (a customer; `sluice send` sets the
	// campaign's name). Tenants backlogged on one limit are served in
	// weighted turns (channels.*.tenant_weights), not first come, first
	// served. "" is a tenant of its own. At most MaxTenantBytes bytes of
	// UTF-8 without control characters.
	Tenant string `json:"tenant,omitempty"`
	// Campaign names the group of sends this one belongs to (`sluice send`
	// sets the campaign's name; an API batch may set one). The worker
	// counts each campaign's outcomes (sent, failed) and the delivery
	// callbacks its delivered and read messages, so `sluice send --wait`
	// follows a campaign without reading its tasks one by one, as a Sidekiq
	// batch is followed. At most MaxTenantBytes bytes of UTF-8 without
	// control characters.
	Campaign string `json:"campaign,omitempty"`
	// SendAt holds the send until then: it goes at that instant or after,
	// as the channel's limits allow, and is planned among the others then
	// (asynq's ProcessAt: a scheduled task, dequeued at SendAt). The
	// provider's own scheduling (Twilio's SendAt) is not used: a message
	// the provider holds would go out of Sluice's pacing. Zero or past:
	// now. At most MaxSendAhead ahead.
	SendAt time.Time `json:"send_at,omitzero"`
}

// MaxSendAhead is the farthest ahead Delivery.SendAt may be (35 days, as
// far as Twilio schedules a message).
const MaxSendAhead = 35 * 24 * time.Hour

// MaxTenantBytes bounds Delivery.Tenant (throttle.MaxTenantBytes).
const MaxTenantBytes = 128

// High reports whether the send has high priority.
func (d Delivery) High() bool { return d.Priority == PriorityHigh }

func (d Delivery) validate() error {
	switch d.Priority {
	case PriorityBulk, PriorityHigh, "bulk":
	default:
		return fmt.Errorf("priority: %.40q: want \"high\" or \"bulk\" (or none)", d.Priority)
	}
	if err := ValidTenant(d.Tenant); err != nil {
		return err
	}
	if !d.SendAt.IsZero() && time.Until(d.SendAt) > MaxSendAhead {
		return fmt.Errorf("send_at: %s is more than %v ahead (at most 35 days)", d.SendAt.UTC().Format(time.RFC3339), MaxSendAhead)
	}
	return validName("campaign", d.Campaign)
}

// ValidTenant checks a tenant name: at most MaxTenantBytes bytes of UTF-8
// without control characters.
func ValidTenant(t string) error { return validName("tenant", t) }

// validName checks a tenant or campaign name: at most MaxTenantBytes bytes
// of UTF-8 without control characters.
func validName(field, t string) error {
	if len(t) > MaxTenantBytes {
		return fmt.Errorf("%s: %d bytes, want at most %d", field, len(t), MaxTenantBytes)
	}
	if !utf8.ValidString(t) {
		return fmt.Errorf("%s: %.40q is not valid UTF-8", field, t)
	}
	for _, r := range t {
		if unicode.IsControl(r) {
			return fmt.Errorf("%s: %.40q has a control character", field, t)
		}
	}
	return nil
}

// WhatsAppSend is the payload of a whatsapp:send task: one message from a
// business phone number to one user: free text, a template, or a media
// message. Every kind counts one message against the number's throughput
// (80/s by default) and the pair's pace (Meta throughput docs).
type WhatsAppSend struct {
	V int `json:"v"`
	Delivery
	// PhoneNumberID is the sender's WhatsApp Business phone number ID (digits).
	PhoneNumberID string `json:"phone_number_id"`
	// To is the recipient in E.164 with a leading "+" ("+12025550123").
	To string `json:"to"`
	// Text is a free-form body (only valid inside the 24 h customer service window).
	// Exactly one of Text, Template, Media, Interactive, Location, Contacts
	// and Reaction is set.
	Text     string    `json:"text,omitempty"`
	Template *Template `json:"template,omitempty"`
	// Media is an image, video, audio, document or sticker message, by
	// link or uploaded media ID (free-form: inside the 24 h window, as Text).
	Media *Media `json:"media,omitempty"`
	// Interactive is a message with reply buttons, a list or a
	// call-to-action URL button; Location a point on a map; Contacts 1 to
	// 5 contact cards; Reaction an emoji on an earlier message. All are
	// free-form, as Text.
	Interactive *Interactive `json:"interactive,omitempty"`
	Location    *Location    `json:"location,omitempty"`
	Contacts    []Contact    `json:"contacts,omitempty"`
	Reaction    *Reaction    `json:"reaction,omitempty"`
	// PreviewURL asks WhatsApp to render a preview of the first URL in Text
	// (text.preview_url); only with Text.
	PreviewURL bool `json:"preview_url,omitempty"`
	// ReplyTo is the WhatsApp message ID ("wamid.…") this message replies
	// to, quoted above it in the chat (context.message_id). Optional.
	ReplyTo string `json:"reply_to,omitempty"`
	// IdempotencyKey becomes the asynq task ID and the Idempotency-Key header.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// Media types of a WhatsApp media message (Media.Type); Cloud API "Media"
// docs give what each may hold: image JPEG or PNG up to 5 MB, video MP4 or
// 3GPP up to 16 MB, audio AAC, AMR, MP3, M4A or OGG (Opus) up to 16 MB,
// document any type up to 100 MB, sticker WebP up to 100 KB (static) or
// 500 KB (animated). Meta fetches a link itself; Sluice never does.
const (
	MediaImage    = "image"
	MediaVideo    = "video"
	MediaAudio    = "audio"
	MediaDocument = "document"
	MediaSticker  = "sticker"
)

// Media is a WhatsApp media message's content: exactly one of Link and ID.
type Media struct {
	// Type is image, video, audio, document or sticker.
	Type string `json:"type"`
	// Link is the media's absolute http(s) URL, which Meta downloads when it
	// sends the message (at most 2,048 bytes).
	Link string `json:"link,omitempty"`
	// ID is a media ID from the Cloud API's media upload (digits).
	ID string `json:"id,omitempty"`
	// Caption is shown under an image, video or document: at most 1,024
	// characters (Cloud API; the spec's caption maxLength). Audio and
	// stickers have none.
	Caption string `json:"caption,omitempty"`
	// Filename is a document's file name as the recipient sees it, with
	// its extension ("invoice-1042.pdf"): at most 240 characters, without
	// '/', '\\' or control characters. Documents only.
	Filename string `json:"filename,omitempty"`
}

// Template is a pre-approved WhatsApp message template.
type Template struct {
	Name     string `json:"name"`     // "order_update"
	Language string `json:"language"` // BCP 47-like code as Meta spells it: "en_US"
	// Parameters fill the body component's {{1}}, {{2}}, … in order, as
	// text. BodyParams does the same with typed values; set one of them.
	Parameters []string `json:"parameters,omitempty"`
	// Header fills the template's header: its {{1}} (text), or its media
	// (image, video, document) or location. Only for a template that has
	// such a header.
	Header *TemplateHeader `json:"header,omitempty"`
	// BodyParams fill the body's {{1}}, {{2}}, … with text, currency or
	// date_time values (instead of Parameters).
	BodyParams []TemplateParam `json:"body_params,omitempty"`
	// Buttons fill the template's buttons that take a value, by index:
	// a quick reply's payload, a URL button's suffix, a copy-code button's
	// coupon code.
	Buttons []TemplateButton `json:"buttons,omitempty"`
}

// TemplateHeader is a template's header parameter: Type text (Text, at
// most 60 characters), image, video or document (one of Link and ID; a
// document's Filename), or location (Location).
type TemplateHeader struct {
	Type     string    `json:"type"`
	Text     string    `json:"text,omitempty"`
	Link     string    `json:"link,omitempty"`
	ID       string    `json:"id,omitempty"`
	Filename string    `json:"filename,omitempty"`
	Location *Location `json:"location,omitempty"`
}

// TemplateParam is a typed body parameter: Type text (Text), currency
// (Currency) or date_time (DateTime).
type TemplateParam struct {
	Type     string            `json:"type"`
	Text     string            `json:"text,omitempty"`
	Currency *TemplateCurrency `json:"currency,omitempty"`
	DateTime *TemplateDateTime `json:"date_time,omitempty"`
}

// TemplateCurrency is an amount: Code is ISO 4217 ("USD"), Amount1000 the
// amount times 1,000 (100990 for 100.99), FallbackValue the text shown
// ("$100.99").
type TemplateCurrency struct {
	FallbackValue string `json:"fallback_value"`
	Code          string `json:"code"`
	Amount1000    int64  `json:"amount_1000"`
}

// TemplateDateTime is a date and time shown as FallbackValue (the Cloud
// API always shows the fallback).
type TemplateDateTime struct {
	FallbackValue string `json:"fallback_value"`
}

// TemplateButton fills one of a template's buttons: Index is its position
// (0 to 9); SubType quick_reply (Payload, returned when tapped), url (Text,
// the suffix appended to the button's URL) or copy_code (CouponCode, at
// most 15 characters).
type TemplateButton struct {
	Index      int    `json:"index"`
	SubType    string `json:"sub_type"`
	Payload    string `json:"payload,omitempty"`
	Text       string `json:"text,omitempty"`
	CouponCode string `json:"coupon_code,omitempty"`
}

// SMSSend is the payload of an sms:send task (Twilio Programmable Messaging).
type SMSSend struct {
	V int `json:"v"`
	Delivery
	// From is the sending number in E.164; or set MessagingServiceSID (MG…) instead.
	From                string `json:"from,omitempty"`
	MessagingServiceSID string `json:"messaging_service_sid,omitempty"`
	To                  string `json:"to"` // E.164
	// Body is the text: required unless MediaURLs or ContentSID is set.
	Body string `json:"body,omitempty"`
	// MediaURLs make the message an MMS (or a WhatsApp media message
	// through Twilio): 1 to 10 absolute http(s) URLs that Twilio fetches
	// (MediaUrl; JPEG, GIF and PNG up to 5 MB, other accepted types 500
	// KB; Twilio Messages API). A whatsapp: sender takes one.
	MediaURLs []string `json:"media_urls,omitempty"`
	// ContentSID is a Content Template ("HX" + 32 hex digits; ContentSid),
	// which Twilio renders: instead of Body and MediaURLs. It is how a
	// WhatsApp template goes through Twilio.
	ContentSID string `json:"content_sid,omitempty"`
	// ContentVariables fill the template's variables by name ("1",
	// "name"): sent as ContentVariables, a JSON object of strings. Only
	// with ContentSID.
	ContentVariables map[string]string `json:"content_variables,omitempty"`
	// ValidityPeriod is how long, in seconds, Twilio may keep the message
	// in its outgoing queue before dropping it (ValidityPeriod, 1 to
	// 36,000); 0 leaves Twilio's default, 36,000.
	ValidityPeriod int    `json:"validity_period,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// WebhookDeliver is the payload of a webhook:deliver task: one event POSTed as
// JSON to a customer's endpoint, signed per Standard Webhooks.
type WebhookDeliver struct {
	V int `json:"v"`
	Delivery
	// URL is the absolute http(s) endpoint URL.
	URL string `json:"url"`
	// EventType is the event name ("order.updated"); sent as the body's "type".
	EventType string `json:"event_type"`
	// Payload is the event's JSON data; sent as the body's "data".
	Payload json.RawMessage `json:"payload"`
	// Endpoint names the customer endpoint (selects its signing secret).
	Endpoint string `json:"endpoint,omitempty"`
	// Timestamp is when the event happened: the body's "timestamp",
	// the same in every attempt of one webhook-id (Standard Webhooks: the
	// webhook-timestamp header is the attempt's time, the body's timestamp
	// the event's). NewWebhookDeliverTask sets it to the time of enqueue,
	// in UTC whole seconds, when it is zero; a task without one (made
	// before Sluice stamped it) is sent with the attempt's time.
	Timestamp time.Time `json:"timestamp,omitzero"`
	// IdempotencyKey is the Standard Webhooks webhook-id: stable across retries.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// HTTPCall is the payload of an http:call task: one request to a third-party API.
type HTTPCall struct {
	V int `json:"v"`
	Delivery
	Method         string            `json:"method"` // GET, POST, PUT, PATCH, DELETE
	URL            string            `json:"url"`    // absolute http(s) URL
	Headers        map[string]string `json:"headers,omitempty"`
	Body           string            `json:"body,omitempty"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
}
