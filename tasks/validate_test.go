package tasks

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNormalizePhone(t *testing.T) {
	t.Parallel()
	good := []struct{ in, want string }{
		{"+12025550123", "+12025550123"},
		{"+1 (202) 555-0123", "+12025550123"},
		{"+1-202-555-0123", "+12025550123"},
		{"  +1 202 555 0123\t", "+12025550123"},
		{"+61 491 570 006", "+61491570006"},
		{"+44 20 7946 0958", "+442079460958"},
	}
	for _, tc := range good {
		got, err := NormalizePhone(tc.in)
		require.NoError(t, err, "NormalizePhone(%q)", tc.in)
		require.Equal(t, tc.want, got, "NormalizePhone(%q)", tc.in)
	}
	bad := []string{
		"", "+", "+1555", "+1 202 555", "12025550123", "not-a-number",
		"+12025550123abc", "+1202555ABCD", "+1 202 555 0123 ext. 5", "tel:+12025550123",
		"+0 123", "+１２０２５５５０１２３", "+1 202.555.0123",
	}
	for _, in := range bad {
		_, err := NormalizePhone(in)
		require.Error(t, err, "NormalizePhone(%q)", in)
		require.Contains(t, err.Error(), "is not a valid E.164 phone number")
	}
}

func validWhatsApp() WhatsAppSend {
	return WhatsAppSend{V: 1, PhoneNumberID: "106540352242922", To: "+12025550123", Text: "Your order shipped"}
}

func validSMS() SMSSend {
	return SMSSend{V: 1, From: "+12025550100", To: "+12025550123", Body: "Your order shipped"}
}

func validWebhook() WebhookDeliver {
	return WebhookDeliver{V: 1, URL: "https://hooks.example.com/sluice", EventType: "order.updated", Payload: json.RawMessage(`{"id":1}`), IdempotencyKey: "evt-1",
		Timestamp: time.Date(2026, 3, 1, 8, 30, 0, 0, time.UTC)}
}

func validHTTP() HTTPCall {
	return HTTPCall{V: 1, Method: "POST", URL: "https://api.example.com/v1/orders", Headers: map[string]string{"Content-Type": "application/json"}}
}

// validationCase mutates a valid payload; wantErr is a substring of the
// error ("" means valid).
type validationCase[T any] struct {
	name    string
	mutate  func(*T)
	wantErr string
}

func runValidation[T interface{ Validate() error }](t *testing.T, valid func() T, cases []validationCase[T]) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := valid()
			tc.mutate(&p)
			err := p.Validate()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.wantErr)
		})
	}
}

func TestWhatsAppSendValidate(t *testing.T) {
	t.Parallel()
	tmpl := func(p *WhatsAppSend) { p.Text = ""; p.Template = &Template{Name: "order_update", Language: "en_US"} }
	runValidation(t, validWhatsApp, []validationCase[WhatsAppSend]{
		{"text", func(*WhatsAppSend) {}, ""},
		{"template", tmpl, ""},
		{"template with parameters", func(p *WhatsAppSend) { tmpl(p); p.Template.Parameters = []string{"Ava", "ORD-1"} }, ""},
		{"text at limit", func(p *WhatsAppSend) { p.Text = strings.Repeat("é", 4096) }, ""},
		{"idempotency key", func(p *WhatsAppSend) { p.IdempotencyKey = "cmp-1:whatsapp.row_2-A" }, ""},
		{"version 0", func(p *WhatsAppSend) { p.V = 0 }, "v: unsupported version 0 (want 1)"},
		{"version 2", func(p *WhatsAppSend) { p.V = 2 }, "v: unsupported version 2 (want 1)"},
		{"no phone_number_id", func(p *WhatsAppSend) { p.PhoneNumberID = "" }, "phone_number_id: required"},
		{"phone_number_id not digits", func(p *WhatsAppSend) { p.PhoneNumberID = "1065x" }, `phone_number_id: "1065x" must contain only digits`},
		{"no to", func(p *WhatsAppSend) { p.To = "" }, "to: required"},
		{"short to", func(p *WhatsAppSend) { p.To = "+1555" }, `to: "+1555" is not a valid E.164 phone number`},
		{"to without plus", func(p *WhatsAppSend) { p.To = "12025550123" }, `to: "12025550123" is not a valid E.164 phone number`},
		{"to not normalized", func(p *WhatsAppSend) { p.To = "+1 202 555 0123" }, `to: "+1 202 555 0123" is not in E.164 form (want "+12025550123")`},
		{"neither text nor template", func(p *WhatsAppSend) { p.Text = "" }, "text, template, media, interactive, location, contacts, reaction: set exactly one (got none)"},
		{"both text and template", func(p *WhatsAppSend) { p.Template = &Template{Name: "a", Language: "en"} }, "text, template: set exactly one of text, template, media, interactive, location, contacts and reaction (got text and template)"},
		{"blank text", func(p *WhatsAppSend) { p.Text = " \n" }, "text: required"},
		{"text too long", func(p *WhatsAppSend) { p.Text = strings.Repeat("a", 4097) }, "text: 4097 characters, want at most 4096"},
		{"text invalid utf-8", func(p *WhatsAppSend) { p.Text = "a\xffb" }, "text: not valid UTF-8"},
		{"text with a NUL byte", func(p *WhatsAppSend) { p.Text = "a\x00b" }, "text: contains a NUL byte at byte 1"},
		{"template parameter with a NUL byte", func(p *WhatsAppSend) { tmpl(p); p.Template.Parameters = []string{"A\x00va"} }, "template.parameters[0]: contains a NUL byte at byte 1"},
		{"template name upper", func(p *WhatsAppSend) { tmpl(p); p.Template.Name = "Order_Update" }, `template.name: "Order_Update" must match ^[a-z0-9_]+$`},
		{"template name dash", func(p *WhatsAppSend) { tmpl(p); p.Template.Name = "order-update" }, "template.name:"},
		{"template name empty", func(p *WhatsAppSend) { tmpl(p); p.Template.Name = "" }, "template.name: required"},
		{"template language empty", func(p *WhatsAppSend) { tmpl(p); p.Template.Language = "" }, "template.language: required"},
		{"template empty parameter", func(p *WhatsAppSend) { tmpl(p); p.Template.Parameters = []string{"Ava", ""} }, "template.parameters[1]: required"},
		// Meta error 132018: no new-line or tab, at most 4 consecutive spaces.
		{"template parameter 4 spaces", func(p *WhatsAppSend) { tmpl(p); p.Template.Parameters = []string{"a    b", "ok"} }, ""},
		{"template parameter unicode", func(p *WhatsAppSend) { tmpl(p); p.Template.Parameters = []string{"您好 😀", "مرحبا"} }, ""},
		{"template parameter newline", func(p *WhatsAppSend) { tmpl(p); p.Template.Parameters = []string{"ok", "line1\nline2"} },
			"template.parameters[1] ({{2}}): has a newline at byte 5; WhatsApp rejects new-line and tab characters in parameters (error 132018)"},
		{"template parameter crlf", func(p *WhatsAppSend) { tmpl(p); p.Template.Parameters = []string{"a\r\nb"} }, "template.parameters[0] ({{1}}): has a carriage return at byte 1"},
		{"template parameter tab", func(p *WhatsAppSend) { tmpl(p); p.Template.Parameters = []string{"a", "b", "c\td"} }, "template.parameters[2] ({{3}}): has a tab at byte 1"},
		{"template parameter 5 spaces", func(p *WhatsAppSend) { tmpl(p); p.Template.Parameters = []string{"a     b"} },
			"template.parameters[0] ({{1}}): has more than 4 consecutive spaces at byte 1; WhatsApp rejects them in parameters (error 132018)"},
		// Media messages (Cloud API messages reference: image, video, audio,
		// document, sticker; by link or media ID).
		{"image by link with caption", media(MediaImage, "https://cdn.example.com/a.jpg", "", "Your order", ""), ""},
		{"video by id", media(MediaVideo, "", "1166846181421424", "", ""), ""},
		{"audio by link", media(MediaAudio, "https://cdn.example.com/a.ogg", "", "", ""), ""},
		{"document with filename and caption", media(MediaDocument, "https://cdn.example.com/i.pdf?sig=x", "", "Invoice", "invoice-1042.pdf"), ""},
		{"sticker by id", media(MediaSticker, "", "798882015472548", "", ""), ""},
		{"caption at limit", media(MediaImage, "", "1", strings.Repeat("é", 1024), ""), ""},
		{"text with preview_url", func(p *WhatsAppSend) { p.PreviewURL = true }, ""},
		{"reply to a message", func(p *WhatsAppSend) { p.ReplyTo = "wamid.HBgLMTY1MDM4Nzk0MzkVAgARGBI5QTNDQTVCM0Q0Q0Q2RTY3RTcA" }, ""},
		{"text and media", func(p *WhatsAppSend) { p.Media = &Media{Type: MediaImage, ID: "1"} }, "text, media: set exactly one of text, template, media, interactive, location, contacts and reaction (got text and media)"},
		{"media without type", media("", "", "1", "", ""), "media.type: required: image, video, audio, document or sticker"},
		{"media type gif", media("gif", "", "1", "", ""), `media.type: "gif": want image, video, audio, document or sticker`},
		{"media with link and id", media(MediaImage, "https://cdn.example.com/a.jpg", "1", "", ""), "media.link, media.id: set exactly one (got both)"},
		{"media with neither link nor id", media(MediaImage, "", "", "", ""), "media.link, media.id: set exactly one (got neither)"},
		{"media link ftp", media(MediaImage, "ftp://cdn.example.com/a.jpg", "", "", ""), `media.link: "ftp://cdn.example.com/a.jpg" must be an absolute http or https URL`},
		{"media link relative", media(MediaImage, "/a.jpg", "", "", ""), "media.link:"},
		{"media link with userinfo", media(MediaImage, "https://u:p@cdn.example.com/a.jpg", "", "", ""), "media.link: must not contain userinfo"},
		{"media link too long", media(MediaImage, "https://cdn.example.com/"+strings.Repeat("a", 2030), "", "", ""), "media.link: 2054 bytes, want at most 2048"},
		{"media id not digits", media(MediaImage, "", "abc", "", ""), `media.id: "abc": want the digits of an uploaded media's ID`},
		{"caption on audio", media(MediaAudio, "", "1", "listen", ""), "media.caption: audio messages have no caption (WhatsApp takes one on image, video and document)"},
		{"caption on sticker", media(MediaSticker, "", "1", "hi", ""), "media.caption: sticker messages have no caption"},
		{"caption too long", media(MediaVideo, "", "1", strings.Repeat("a", 1025), ""), "media.caption: 1025 characters, want at most 1024"},
		{"filename on an image", media(MediaImage, "", "1", "", "a.jpg"), "media.filename: only a document has a file name (this is image)"},
		{"filename with a slash", media(MediaDocument, "", "1", "", "../etc/passwd"), `media.filename: has "/" at byte 2`},
		{"filename with a newline", media(MediaDocument, "", "1", "", "a\nb.pdf"), `media.filename: has "\n" at byte 1`},
		{"preview_url on a template", func(p *WhatsAppSend) { tmpl(p); p.PreviewURL = true }, "preview_url: only a text message has a link preview (this is a template message)"},
		{"reply_to with a space", func(p *WhatsAppSend) { p.ReplyTo = "wamid.a b" }, "reply_to: \"wamid.a b\" has a space, control or non-ASCII character at byte 7"},
		{"reply_to too long", func(p *WhatsAppSend) { p.ReplyTo = strings.Repeat("w", 257) }, "reply_to: 257 bytes, want at most 256"},
		// Interactive, location, contacts and reaction messages.
		{"reply buttons", interactive(func(m *Interactive) { *m = *buttonsMsg(3) }), ""},
		{"reply buttons with a text header and footer", interactive(func(m *Interactive) {
			*m = *buttonsMsg(2)
			m.Header, m.Footer = &InteractiveHeader{Type: "text", Text: "Order 1042"}, "Reply within 24 h"
		}), ""},
		{"reply buttons with an image header", interactive(func(m *Interactive) {
			*m = *buttonsMsg(1)
			m.Header = &InteractiveHeader{Type: "image", Link: "https://cdn.example.com/a.jpg"}
		}), ""},
		{"list", interactive(func(m *Interactive) { *m = *listMsg(2, 5) }), ""},
		{"cta url", interactive(func(m *Interactive) {
			*m = Interactive{Type: InteractiveCTAURL, Body: "Track your order", DisplayText: "Track", URL: "https://example.com/t/1042"}
		}), ""},
		{"four buttons", interactive(func(m *Interactive) { *m = *buttonsMsg(4) }), "interactive.buttons: 4 buttons, want 1 to 3"},
		{"button title too long", interactive(func(m *Interactive) { *m = *buttonsMsg(1); m.Buttons[0].Title = strings.Repeat("b", 21) }),
			"interactive.buttons[0].title: 21 characters, want at most 20"},
		{"duplicate button titles", interactive(func(m *Interactive) { *m = *buttonsMsg(2); m.Buttons[1].Title = m.Buttons[0].Title }),
			"interactive.buttons[1].title: \"Option 0\" is buttons[0]'s too: titles must be unique"},
		{"interactive without body", interactive(func(m *Interactive) { *m = *buttonsMsg(1); m.Body = "" }), "interactive.body: required"},
		{"interactive type unknown", interactive(func(m *Interactive) { *m = *buttonsMsg(1); m.Type = "carousel" }), `interactive.type: "carousel": want button, list or cta_url`},
		{"list without sections", interactive(func(m *Interactive) { *m = *listMsg(0, 3) }), ""},
		{"list with 11 rows", interactive(func(m *Interactive) { *m = *listMsg(2, 11) }), "interactive.rows: 11 rows, want 1 to 10"},
		{"list with a row out of the sections", interactive(func(m *Interactive) { *m = *listMsg(2, 4); m.Rows[2].Section = "" }),
			"interactive.rows[2].section: give every row a section, or none"},
		{"list with duplicate row ids", interactive(func(m *Interactive) { *m = *listMsg(1, 3); m.Rows[2].ID = m.Rows[0].ID }),
			"interactive.rows[2].id: \"slot-0\" is rows[0]'s too: row ids must be unique"},
		{"row title too long", interactive(func(m *Interactive) { *m = *listMsg(1, 1); m.Rows[0].Title = strings.Repeat("r", 25) }),
			"interactive.rows[0].title: 25 characters, want at most 24"},
		{"list with an image header", interactive(func(m *Interactive) {
			*m = *listMsg(1, 2)
			m.Header = &InteractiveHeader{Type: "image", ID: "1"}
		}), "interactive.header.type: a list message's header is text only (got image)"},
		{"list button too long", interactive(func(m *Interactive) { *m = *listMsg(1, 2); m.ListButton = strings.Repeat("c", 21) }),
			"interactive.list_button: 21 characters, want at most 20"},
		{"cta url not http", interactive(func(m *Interactive) {
			*m = Interactive{Type: InteractiveCTAURL, Body: "b", DisplayText: "Open", URL: "javascript:alert(1)"}
		}), `interactive.url: "javascript:alert(1)" must be an absolute http or https URL`},
		{"buttons on a cta url", interactive(func(m *Interactive) {
			*m = Interactive{Type: InteractiveCTAURL, Body: "b", DisplayText: "Open", URL: "https://example.com", Buttons: buttonsMsg(1).Buttons}
		}), "interactive: a cta_url message has display_text and url only"},
		{"header with link and id", interactive(func(m *Interactive) {
			*m = *buttonsMsg(1)
			m.Header = &InteractiveHeader{Type: "video", Link: "https://a.example/v.mp4", ID: "1"}
		}), "interactive.header.link, interactive.header.id: set exactly one (got both)"},
		{"location", func(p *WhatsAppSend) {
			p.Text = ""
			p.Location = &Location{Latitude: 37.4847, Longitude: -122.1486, Name: "Meta HQ", Address: "1 Hacker Way"}
		}, ""},
		{"location off the map", func(p *WhatsAppSend) { p.Text = ""; p.Location = &Location{Latitude: 91, Longitude: 0} }, "location.latitude: 91, want -90 to 90 degrees"},
		{"contacts", func(p *WhatsAppSend) { p.Text = ""; p.Contacts = []Contact{contactCard()} }, ""},
		{"six contacts", func(p *WhatsAppSend) { p.Text = ""; p.Contacts = make([]Contact, 6) }, "contacts: 6 contacts, want 1 to 5"},
		{"contact with formatted name only", func(p *WhatsAppSend) {
			p.Text = ""
			p.Contacts = []Contact{{Name: ContactName{FormattedName: "Ann Lee"}}}
		}, "contacts[0].name: want first_name, last_name, middle_name, prefix or suffix besides formatted_name"},
		{"contact with a bad email", func(p *WhatsAppSend) {
			p.Text = ""
			c := contactCard()
			c.Emails = []ContactEmail{{Email: "ann at example.com"}}
			p.Contacts = []Contact{c}
		}, `contacts[0].emails[0].email: "ann at example.com" is not an email address`},
		{"reaction", func(p *WhatsAppSend) { p.Text = ""; p.Reaction = &Reaction{MessageID: "wamid.ABC", Emoji: "👍"} }, ""},
		{"reaction removed", func(p *WhatsAppSend) { p.Text = ""; p.Reaction = &Reaction{MessageID: "wamid.ABC"} }, ""},
		{"reaction with words", func(p *WhatsAppSend) { p.Text = ""; p.Reaction = &Reaction{MessageID: "wamid.ABC", Emoji: "thumbs up"} }, `reaction.emoji: "thumbs up": want one emoji`},
		{"reaction of a digit", func(p *WhatsAppSend) { p.Text = ""; p.Reaction = &Reaction{MessageID: "wamid.ABC", Emoji: "1"} }, `reaction.emoji: "1": want one emoji`},
		{"reaction keycap", func(p *WhatsAppSend) {
			p.Text = ""
			p.Reaction = &Reaction{MessageID: "wamid.ABC", Emoji: "1\uFE0F\u20E3"}
		}, ""},
		{"reaction without message", func(p *WhatsAppSend) { p.Text = ""; p.Reaction = &Reaction{Emoji: "👍"} }, "reaction.message_id: required"},
		{"reaction as a reply", func(p *WhatsAppSend) {
			p.Text = ""
			p.Reaction = &Reaction{MessageID: "wamid.A", Emoji: "👍"}
			p.ReplyTo = "wamid.B"
		},
			"reply_to: a reaction names its message in reaction.message_id"},
		// Template components: header, typed body parameters, buttons.
		{"template with an image header and buttons", func(p *WhatsAppSend) {
			tmpl(p)
			p.Template.Header = &TemplateHeader{Type: "image", Link: "https://cdn.example.com/h.jpg"}
			p.Template.Buttons = []TemplateButton{{Index: 0, SubType: "quick_reply", Payload: "STOP"}, {Index: 1, SubType: "url", Text: "o/1042"},
				{Index: 2, SubType: "copy_code", CouponCode: "SAVE10"}}
		}, ""},
		{"template with typed body parameters", func(p *WhatsAppSend) {
			tmpl(p)
			p.Template.BodyParams = []TemplateParam{{Type: "text", Text: "Ann"},
				{Type: "currency", Currency: &TemplateCurrency{FallbackValue: "$100.99", Code: "USD", Amount1000: 100990}},
				{Type: "date_time", DateTime: &TemplateDateTime{FallbackValue: "May 1, 2026"}}}
		}, ""},
		{"template with a location header", func(p *WhatsAppSend) {
			tmpl(p)
			p.Template.Header = &TemplateHeader{Type: "location", Location: &Location{Latitude: 1, Longitude: 2}}
		}, ""},
		{"template header type sticker", func(p *WhatsAppSend) { tmpl(p); p.Template.Header = &TemplateHeader{Type: "sticker", ID: "1"} },
			`template.header.type: "sticker": want text, image, video, document or location`},
		{"template header text too long", func(p *WhatsAppSend) {
			tmpl(p)
			p.Template.Header = &TemplateHeader{Type: "text", Text: strings.Repeat("h", 61)}
		},
			"template.header.text: 61 characters, want at most 60"},
		{"template image header without media", func(p *WhatsAppSend) { tmpl(p); p.Template.Header = &TemplateHeader{Type: "image"} },
			"template.header.link, template.header.id: set exactly one (got neither)"},
		{"template parameters and body_params", func(p *WhatsAppSend) {
			tmpl(p)
			p.Template.Parameters = []string{"a"}
			p.Template.BodyParams = []TemplateParam{{Type: "text", Text: "b"}}
		}, "template.parameters, template.body_params: set one"},
		{"template currency code", func(p *WhatsAppSend) {
			tmpl(p)
			p.Template.BodyParams = []TemplateParam{{Type: "currency", Currency: &TemplateCurrency{FallbackValue: "$1", Code: "usd", Amount1000: 1000}}}
		}, `template.body_params[0].currency.code: "usd": want an ISO 4217 code (USD)`},
		{"a currency fallback with a newline", func(p *WhatsAppSend) {
			tmpl(p)
			p.Template.BodyParams = []TemplateParam{{Type: "text", Text: "Ann"}, {Type: "currency", Currency: &TemplateCurrency{FallbackValue: "$1\n(USD)", Code: "USD", Amount1000: 1000}}}
		}, "template.body_params[1].currency.fallback_value ({{2}}): has a newline at byte 2; WhatsApp rejects new-line and tab characters in parameters (error 132018)"},
		{"a date fallback with 5 spaces", func(p *WhatsAppSend) {
			tmpl(p)
			p.Template.BodyParams = []TemplateParam{{Type: "date_time", DateTime: &TemplateDateTime{FallbackValue: "May 1,     2026"}}}
		}, "template.body_params[0].date_time.fallback_value ({{1}}): has more than 4 consecutive spaces at byte 6"},
		{"eleven template buttons", func(p *WhatsAppSend) {
			tmpl(p)
			for i := range 11 {
				p.Template.Buttons = append(p.Template.Buttons, TemplateButton{Index: i % 10, SubType: "quick_reply", Payload: "p"})
			}
		}, "template.buttons: 11 buttons, want at most 10"},
		{"template button index twice", func(p *WhatsAppSend) {
			tmpl(p)
			p.Template.Buttons = []TemplateButton{{Index: 0, SubType: "quick_reply", Payload: "a"}, {Index: 0, SubType: "quick_reply", Payload: "b"}}
		}, "template.buttons[1].index: 0 is buttons[0]'s too"},
		{"template button index 10", func(p *WhatsAppSend) {
			tmpl(p)
			p.Template.Buttons = []TemplateButton{{Index: 10, SubType: "quick_reply", Payload: "a"}}
		}, "template.buttons[0].index: 10, want 0 to 9"},
		{"coupon code too long", func(p *WhatsAppSend) {
			tmpl(p)
			p.Template.Buttons = []TemplateButton{{Index: 0, SubType: "copy_code", CouponCode: "SUMMER-SALE-2026"}}
		}, "template.buttons[0].coupon_code: 16 characters, want at most 15"},
		{"url button with a payload", func(p *WhatsAppSend) {
			tmpl(p)
			p.Template.Buttons = []TemplateButton{{Index: 0, SubType: "url", Text: "x", Payload: "y"}}
		}, "template.buttons[0].payload: a url button takes text only"},
		{"three url buttons", func(p *WhatsAppSend) {
			tmpl(p)
			p.Template.Buttons = []TemplateButton{{Index: 0, SubType: "url", Text: "a"}, {Index: 1, SubType: "url", Text: "b"}, {Index: 2, SubType: "url", Text: "c"}}
		}, "template.buttons: 3 url buttons, want at most 2"},
		{"text may hold newlines", func(p *WhatsAppSend) { p.Text = "line1\n\tline2     x" }, ""},
		{"idempotency key space", func(p *WhatsAppSend) { p.IdempotencyKey = "a b" }, `idempotency_key: "a b" may only contain`},
		{"idempotency key slash", func(p *WhatsAppSend) { p.IdempotencyKey = "a/b" }, "idempotency_key:"},
		{"idempotency key too long", func(p *WhatsAppSend) { p.IdempotencyKey = strings.Repeat("k", 201) }, "idempotency_key: 201 characters, want at most 200"},
	})
}

// interactive makes a case's change into an interactive message, which
// edit fills.
func interactive(edit func(*Interactive)) func(*WhatsAppSend) {
	return func(p *WhatsAppSend) {
		p.Text = ""
		p.Interactive = &Interactive{}
		edit(p.Interactive)
	}
}

// buttonsMsg is a reply-button message with n buttons.
func buttonsMsg(n int) *Interactive {
	m := &Interactive{Type: InteractiveButton, Body: "Did your order arrive?"}
	for i := range n {
		m.Buttons = append(m.Buttons, ReplyButton{ID: fmt.Sprintf("answer-%d", i), Title: fmt.Sprintf("Option %d", i)})
	}
	return m
}

// listMsg is a list message with rows rows in sections sections (none
// titled when sections is 0).
func listMsg(sections, rows int) *Interactive {
	m := &Interactive{Type: InteractiveList, Body: "Pick a delivery slot", ListButton: "Slots"}
	for r := range rows {
		row := ListRow{ID: fmt.Sprintf("slot-%d", r), Title: fmt.Sprintf("%02d:00", 8+r), Description: "Two-hour window"}
		if sections > 0 {
			row.Section = fmt.Sprintf("Day %d", r*sections/rows+1)
		}
		m.Rows = append(m.Rows, row)
	}
	return m
}

// contactCard is a valid contact card.
func contactCard() Contact {
	return Contact{Name: ContactName{FormattedName: "Ann Lee", FirstName: "Ann", LastName: "Lee"},
		Phones: []ContactPhone{{Phone: "+1 (202) 555-0199", Type: "WORK", WaID: "12025550199"}},
		Emails: []ContactEmail{{Email: "ann@example.com"}}, Org: &ContactOrg{Company: "Acme"}, Birthday: "1990-04-01"}
}

// media makes a case's change into a media message.
func media(typ, link, id, caption, filename string) func(*WhatsAppSend) {
	return func(p *WhatsAppSend) {
		p.Text = ""
		p.Media = &Media{Type: typ, Link: link, ID: id, Caption: caption, Filename: filename}
	}
}

func TestSMSSendValidate(t *testing.T) {
	t.Parallel()
	const sid = "MG0123456789abcdef0123456789abcdef"
	runValidation(t, validSMS, []validationCase[SMSSend]{
		{"from", func(*SMSSend) {}, ""},
		{"messaging service", func(p *SMSSend) { p.From = ""; p.MessagingServiceSID = sid }, ""},
		{"body at limit", func(p *SMSSend) { p.Body = strings.Repeat("ü", 1600) }, ""},
		{"version", func(p *SMSSend) { p.V = 3 }, "v: unsupported version 3 (want 1)"},
		{"both senders", func(p *SMSSend) { p.MessagingServiceSID = sid }, "from, messaging_service_sid: set exactly one (got both)"},
		{"no sender", func(p *SMSSend) { p.From = "" }, "from, messaging_service_sid: set exactly one (got neither)"},
		{"bad from", func(p *SMSSend) { p.From = "+1555" }, `from: "+1555" is not a valid E.164 phone number`},
		{"short code 5", func(p *SMSSend) { p.From = "12345" }, ""},
		{"short code 6", func(p *SMSSend) { p.From = "898211" }, ""},
		{"short code 4", func(p *SMSSend) { p.From = "1234" }, `from: "1234" is not a Twilio sender: want an E.164 number`},
		{"short code 7", func(p *SMSSend) { p.From = "1234567" }, `from: "1234567" is not a Twilio sender`},
		{"alphanumeric", func(p *SMSSend) { p.From = "Acme" }, ""},
		{"alphanumeric 11 with space and digits", func(p *SMSSend) { p.From = "Acme Shop 1" }, ""},
		{"alphanumeric 12", func(p *SMSSend) { p.From = "AcmeShopping" }, `from: "AcmeShopping" is not a Twilio sender`},
		{"alphanumeric punctuation", func(p *SMSSend) { p.From = "Acme!" }, `from: "Acme!" is not a Twilio sender`},
		{"alphanumeric non-ascii", func(p *SMSSend) { p.From = "Café" }, `from: "Café" is not a Twilio sender`},
		{"alphanumeric leading space", func(p *SMSSend) { p.From = " Acme" }, `from: " Acme" is not a Twilio sender`},
		{"digits only, not a short code", func(p *SMSSend) { p.From = "12345678" }, `from: "12345678" is not a Twilio sender`},
		{"whatsapp sender", func(p *SMSSend) { p.From = "whatsapp:+12025550100"; p.To = "whatsapp:+12025550123" }, ""},
		{"whatsapp sender, sms recipient", func(p *SMSSend) { p.From = "whatsapp:+12025550100" },
			`to: "+12025550123" must be whatsapp:+E.164 like from "whatsapp:+12025550100" (Twilio requires both on one channel, error 21910)`},
		{"sms sender, whatsapp recipient", func(p *SMSSend) { p.To = "whatsapp:+12025550123" }, `to: "whatsapp:+12025550123" is a WhatsApp address but from "+12025550100" is not a whatsapp: sender`},
		{"service, whatsapp recipient", func(p *SMSSend) { p.From = ""; p.MessagingServiceSID = sid; p.To = "whatsapp:+12025550123" }, ""},
		{"whatsapp sender bad number", func(p *SMSSend) { p.From = "whatsapp:+1555"; p.To = "whatsapp:+12025550123" }, `from (after whatsapp:): "+1555" is not a valid E.164 phone number`},
		{"whatsapp recipient bad number", func(p *SMSSend) { p.From = "whatsapp:+12025550100"; p.To = "whatsapp:+1555" }, `to: "+1555" is not a valid E.164 phone number`},
		{"service sid as from", func(p *SMSSend) { p.From = sid }, ""},
		{"service sid as from and service", func(p *SMSSend) { p.From = sid; p.MessagingServiceSID = sid }, "from, messaging_service_sid: set exactly one (got both)"},
		{"sid short", func(p *SMSSend) { p.From = ""; p.MessagingServiceSID = "MG123" }, `messaging_service_sid: "MG123" must be "MG" followed by 32 hex digits`},
		{"sid prefix", func(p *SMSSend) { p.From = ""; p.MessagingServiceSID = "PN" + sid[2:] }, "messaging_service_sid:"},
		{"sid not hex", func(p *SMSSend) { p.From = ""; p.MessagingServiceSID = "MG0123456789abcdef0123456789abcdeg" }, "messaging_service_sid:"},
		{"bad to", func(p *SMSSend) { p.To = "not-a-number" }, `to: "not-a-number" is not a valid E.164 phone number`},
		{"empty body", func(p *SMSSend) { p.Body = "" }, "body: required"},
		{"body too long", func(p *SMSSend) { p.Body = strings.Repeat("x", 1601) }, "body: 1601 characters, want at most 1600"},
		{"body with a NUL byte", func(p *SMSSend) { p.Body = "hi\x00there" }, "body: contains a NUL byte at byte 2"},
		{"bad key", func(p *SMSSend) { p.IdempotencyKey = "ключ" }, "idempotency_key:"},
		// MMS, Content Templates and the validity period (Twilio Messages API).
		{"mms with body", func(p *SMSSend) { p.MediaURLs = []string{"https://cdn.example.com/a.jpg"} }, ""},
		{"mms without body", func(p *SMSSend) { p.Body = ""; p.MediaURLs = mediaURLs(10) }, ""},
		{"mms 11 urls", func(p *SMSSend) { p.MediaURLs = mediaURLs(11) }, "media_urls: 11 URLs, want at most 10 (Twilio MediaUrl)"},
		{"whatsapp media 2 urls", func(p *SMSSend) {
			p.From, p.To, p.MediaURLs = "whatsapp:+12025550100", "whatsapp:+12025550123", mediaURLs(2)
		}, "media_urls: 2 URLs, want at most 1 (Twilio MediaUrl; a WhatsApp message carries one)"},
		{"whatsapp media through a messaging service", func(p *SMSSend) {
			p.From, p.MessagingServiceSID, p.To, p.MediaURLs = "", sid, "whatsapp:+12025550123", mediaURLs(2)
		}, "media_urls: 2 URLs, want at most 1"},
		{"mms from alphanumeric", func(p *SMSSend) { p.From = "Acme"; p.MediaURLs = mediaURLs(1) }, `media_urls: from "Acme" is an alphanumeric sender ID, which cannot send MMS`},
		{"mms url not http", func(p *SMSSend) {
			p.MediaURLs = []string{"https://cdn.example.com/a.jpg", "data:image/png;base64,AAAA"}
		}, `media_urls[1]: "data:image/png;base64,AAAA" must be an absolute http or https URL`},
		{"content template", func(p *SMSSend) {
			p.Body, p.ContentSID, p.ContentVariables = "", contentSID, map[string]string{"1": "Ann", "order_id": "1042"}
		}, ""},
		{"content template with body", func(p *SMSSend) { p.ContentSID = contentSID }, "body, content_sid: set one"},
		{"content template with media", func(p *SMSSend) { p.Body, p.ContentSID, p.MediaURLs = "", contentSID, mediaURLs(1) }, "media_urls, content_sid: set one"},
		{"content sid malformed", func(p *SMSSend) { p.Body, p.ContentSID = "", "HX123" }, `content_sid: "HX123" must be "HX" followed by 32 hex digits`},
		{"content variables without template", func(p *SMSSend) { p.ContentVariables = map[string]string{"1": "a"} }, "content_variables: only with content_sid"},
		{"content variable name", func(p *SMSSend) {
			p.Body, p.ContentSID, p.ContentVariables = "", contentSID, map[string]string{"first name": "Ann"}
		}, `content_variables: name "first name": want 1 to 64 letters`},
		{"content variable empty", func(p *SMSSend) {
			p.Body, p.ContentSID, p.ContentVariables = "", contentSID, map[string]string{"1": ""}
		}, "content_variables.1: required"},
		{"validity period", func(p *SMSSend) { p.ValidityPeriod = 600 }, ""},
		{"validity period too long", func(p *SMSSend) { p.ValidityPeriod = 36001 }, "validity_period: 36001 seconds, want 1 to 36000"},
		{"validity period negative", func(p *SMSSend) { p.ValidityPeriod = -1 }, "validity_period: -1 seconds"},
	})
}

const contentSID = "HX0123456789abcdef0123456789abcdef"

// mediaURLs returns n distinct media URLs.
func mediaURLs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("https://cdn.example.com/m/%d.jpg", i)
	}
	return out
}

func TestWebhookDeliverValidate(t *testing.T) {
	t.Parallel()
	runValidation(t, validWebhook, []validationCase[WebhookDeliver]{
		{"object", func(*WebhookDeliver) {}, ""},
		{"array", func(p *WebhookDeliver) { p.Payload = json.RawMessage(` [1,2] `) }, ""},
		{"http with port", func(p *WebhookDeliver) { p.URL = "http://localhost:8080/hook?x=1" }, ""},
		{"version", func(p *WebhookDeliver) { p.V = 0 }, "v: unsupported version 0"},
		{"no url", func(p *WebhookDeliver) { p.URL = "" }, "url: required"},
		{"relative url", func(p *WebhookDeliver) { p.URL = "/hooks" }, `url: "/hooks" must be an absolute http or https URL`},
		{"ftp url", func(p *WebhookDeliver) { p.URL = "ftp://example.com/x" }, "url: \"ftp://example.com/x\" must be an absolute http or https URL"},
		{"no host", func(p *WebhookDeliver) { p.URL = "https:///path" }, `url: "https:///path" has no host`},
		{"port only", func(p *WebhookDeliver) { p.URL = "http://:80/x" }, "has no host"},
		{"userinfo", func(p *WebhookDeliver) { p.URL = "https://user:s3cret@example.com/" }, "url: must not contain userinfo"},
		{"unparsable", func(p *WebhookDeliver) { p.URL = "http://exa mple.com/" }, "url: \"http://exa mple.com/\" is not a valid URL"},
		{"no event type", func(p *WebhookDeliver) { p.EventType = "" }, "event_type: required"},
		{"empty payload", func(p *WebhookDeliver) { p.Payload = nil }, "payload: required"},
		{"blank payload", func(p *WebhookDeliver) { p.Payload = json.RawMessage("  ") }, "payload: required"},
		{"invalid payload", func(p *WebhookDeliver) { p.Payload = json.RawMessage(`{"a":`) }, "payload: not valid JSON"},
		{"string payload", func(p *WebhookDeliver) { p.Payload = json.RawMessage(`"hi"`) }, "payload: must be a JSON object or array"},
		{"null payload", func(p *WebhookDeliver) { p.Payload = json.RawMessage(`null`) }, "payload: must be a JSON object or array, got null"},
		{"unicode payload", func(p *WebhookDeliver) { p.Payload = json.RawMessage(`{"n":"您好 😀 \u00e9"}`) }, ""},
		{"invalid utf-8 payload", func(p *WebhookDeliver) { p.Payload = json.RawMessage(" {\"n\":\"a\xffb\"}") },
			"payload: not valid UTF-8 at byte 8; JSON must be UTF-8 (RFC 8259)"},
		{"latin-1 payload", func(p *WebhookDeliver) { p.Payload = json.RawMessage("{\"n\":\"caf\xe9\"}") }, "payload: not valid UTF-8 at byte 9"},
		{"no idempotency key", func(p *WebhookDeliver) { p.IdempotencyKey = "" },
			"idempotency_key: required for webhooks: it is the webhook-id receivers deduplicate by (CLI: --key)"},
	})
}

func TestWebhookUserinfoErrorHidesSecret(t *testing.T) {
	t.Parallel()
	p := validWebhook()
	p.URL = "https://user:s3cret@example.com/"
	require.NotContains(t, p.Validate().Error(), "s3cret")
}

func TestHTTPCallValidate(t *testing.T) {
	t.Parallel()
	runValidation(t, validHTTP, []validationCase[HTTPCall]{
		{"post", func(*HTTPCall) {}, ""},
		{"delete no headers", func(p *HTTPCall) { p.Method = "DELETE"; p.Headers = nil }, ""},
		{"token header", func(p *HTTPCall) { p.Headers = map[string]string{"X-Request-Id!#$%&'*+-.^_`|~": "1"} }, ""},
		{"version", func(p *HTTPCall) { p.V = 2 }, "v: unsupported version 2"},
		{"lower method", func(p *HTTPCall) { p.Method = "post" }, `method: "post" is not one of GET, POST, PUT, PATCH, DELETE`},
		{"head", func(p *HTTPCall) { p.Method = "HEAD" }, `method: "HEAD" is not one of`},
		{"empty method", func(p *HTTPCall) { p.Method = "" }, `method: "" is not one of`},
		{"relative url", func(p *HTTPCall) { p.URL = "api.example.com/v1" }, "url:"},
		{"header with space", func(p *HTTPCall) { p.Headers = map[string]string{"Bad Name": "x"} }, `headers: "Bad Name" is not a valid header name`},
		{"header colon", func(p *HTTPCall) { p.Headers = map[string]string{"X:Y": "x"} }, `headers: "X:Y" is not a valid header name`},
		{"header empty name", func(p *HTTPCall) { p.Headers = map[string]string{"": "x"} }, `headers: "" is not a valid header name`},
		{"header value newline", func(p *HTTPCall) { p.Headers = map[string]string{"X-A": "a\r\nX-Injected: 1"} }, `headers["X-A"]: value contains CR, LF or NUL`},
		{"bad key", func(p *HTTPCall) { p.IdempotencyKey = "a\nb" }, "idempotency_key:"},
	})
}
