package tasks

import (
	"errors"
	"fmt"
	"math"
	"net/mail"
	"strings"
	"time"
	"unicode/utf8"
)

// Interactive message types (Interactive.Type; Cloud API "Interactive
// messages"): reply buttons, a list, a call-to-action URL button.
const (
	InteractiveButton = "button"
	InteractiveList   = "list"
	InteractiveCTAURL = "cta_url"
)

// Interactive is an interactive message (free-form: inside the 24 h window).
// Body is required; Header and Footer are optional. By Type:
//   - button: 1 to 3 Buttons, each an ID (at most 256 characters) and a
//     Title (at most 20, unique);
//   - list: ListButton (the button that opens the list, at most 20
//     characters) and 1 to 10 Rows, each an ID (at most 200 characters,
//     unique), a Title (at most 24), an optional Description (at most 72)
//     and a Section: the title (at most 24 characters) of the section it
//     is listed under, consecutive rows of one Section forming one section
//     (Meta's sections[].rows[]); either every row has a Section or none
//     does (one untitled section); a list has no media header;
//   - cta_url: DisplayText (at most 20 characters) and URL (absolute
//     http(s)).
type Interactive struct {
	Type string `json:"type"`
	// Header is text (at most 60 characters) or an image, video or
	// document by link or media ID.
	Header *InteractiveHeader `json:"header,omitempty"`
	// Body is the message's text: at most 1,024 characters.
	Body string `json:"body"`
	// Footer is a line under the body: at most 60 characters.
	Footer      string        `json:"footer,omitempty"`
	Buttons     []ReplyButton `json:"buttons,omitempty"`
	ListButton  string        `json:"list_button,omitempty"`
	Rows        []ListRow     `json:"rows,omitempty"`
	DisplayText string        `json:"display_text,omitempty"`
	URL         string        `json:"url,omitempty"`
}

// InteractiveHeader is an interactive message's header: Type text with
// Text, or image, video or document with one of Link and ID.
type InteractiveHeader struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
	Link string `json:"link,omitempty"`
	ID   string `json:"id,omitempty"`
}

// ReplyButton is one reply button: ID comes back in the user's reply.
type ReplyButton struct {
	ID    string `json:"id"`
	Title string `json:"title"`
}

// ListRow is one choice of a list message: ID comes back in the reply.
// Section is the title of the section it is listed under ("": none).
type ListRow struct {
	Section     string `json:"section,omitempty"`
	ID          string `json:"id"`
	Title       string `json:"title"`
	Description string `json:"description,omitempty"`
}

// ListSection is one section of a list message as Meta takes it
// (sections[]: title, rows[]): ListSections groups Interactive.Rows.
type ListSection struct {
	Title string           `json:"title,omitempty"`
	Rows  []ListSectionRow `json:"rows"`
}

// ListSectionRow is a row of a ListSection.
type ListSectionRow struct {
	ID          string `json:"id"`
	Title       string `json:"title"`
	Description string `json:"description,omitempty"`
}

// ListSections groups a list message's rows into sections: consecutive
// rows with one Section form one section, titled with it.
func (m *Interactive) ListSections() []ListSection {
	var out []ListSection
	for i, r := range m.Rows {
		if i == 0 || r.Section != m.Rows[i-1].Section {
			out = append(out, ListSection{Title: r.Section})
		}
		last := &out[len(out)-1]
		last.Rows = append(last.Rows, ListSectionRow{ID: r.ID, Title: r.Title, Description: r.Description})
	}
	return out
}

// Location is a location message: a point and, optionally, its name and
// address.
type Location struct {
	// Latitude and Longitude are degrees (WGS 84): -90 to 90 and -180 to
	// 180.
	Latitude  float64 `json:"latitude"`
	Longitude float64 `json:"longitude"`
	Name      string  `json:"name,omitempty"`
	Address   string  `json:"address,omitempty"`
}

// Reaction is an emoji reaction to a message the business received or
// sent: MessageID is its wamid; an empty Emoji removes the reaction.
type Reaction struct {
	MessageID string `json:"message_id"`
	Emoji     string `json:"emoji"`
}

// Contact is one contact card of a contacts message (1 to 5 a message).
// Name.FormattedName is required, and one of its other parts.
type Contact struct {
	Name     ContactName    `json:"name"`
	Phones   []ContactPhone `json:"phones,omitempty"`
	Emails   []ContactEmail `json:"emails,omitempty"`
	URLs     []ContactURL   `json:"urls,omitempty"`
	Org      *ContactOrg    `json:"org,omitempty"`
	Birthday string         `json:"birthday,omitempty"` // YYYY-MM-DD
}

// ContactName is a contact's name.
type ContactName struct {
	FormattedName string `json:"formatted_name"`
	FirstName     string `json:"first_name,omitempty"`
	LastName      string `json:"last_name,omitempty"`
	MiddleName    string `json:"middle_name,omitempty"`
	Prefix        string `json:"prefix,omitempty"`
	Suffix        string `json:"suffix,omitempty"`
}

// ContactPhone is a contact's phone: Type is HOME, WORK or "". Meta's
// contacts-message guide also names CELL, MAIN and IPHONE, but the Cloud
// API spec's PhoneObject enum (../shared/specs, v23.0) has HOME and WORK
// only, and every request Sluice sends must be valid against the spec;
// put the kind in Phone's own text if it matters.
type ContactPhone struct {
	Phone string `json:"phone"`
	Type  string `json:"type,omitempty"`
	WaID  string `json:"wa_id,omitempty"`
}

// ContactEmail is a contact's email address: Type is HOME, WORK or "".
type ContactEmail struct {
	Email string `json:"email"`
	Type  string `json:"type,omitempty"`
}

// ContactURL is a contact's web address: Type is HOME, WORK or "".
type ContactURL struct {
	URL  string `json:"url"`
	Type string `json:"type,omitempty"`
}

// ContactOrg is a contact's organization.
type ContactOrg struct {
	Company    string `json:"company,omitempty"`
	Department string `json:"department,omitempty"`
	Title      string `json:"title,omitempty"`
}

// Limits of interactive, location, contacts and reaction messages (Cloud
// API messages reference; the spec's maxLength and maxItems).
const (
	maxInteractiveBody   = 1024
	maxInteractiveShort  = 60 // header text, footer
	maxButtonTitle       = 20 // reply button title, list button, CTA display text
	maxButtonID          = 256
	maxReplyButtons      = 3
	maxListRows          = 10 // in all sections together
	maxSectionTitle      = 24
	maxRowID             = 200
	maxRowTitle          = 24
	maxRowDescription    = 72
	maxContacts          = 5
	maxContactField      = 256 // Sluice's bound on a card's text fields
	maxContactEntries    = 20  // phones, emails or URLs of one card (Sluice's bound)
	maxLocationText      = 1000
	maxReactionEmojiRune = 8 // an emoji with its modifiers and joiners (Sluice's bound)
)

func (m *Interactive) validate() error {
	if err := checkText("interactive.body", m.Body, maxInteractiveBody); err != nil {
		return err
	}
	if m.Footer != "" {
		if err := checkText("interactive.footer", m.Footer, maxInteractiveShort); err != nil {
			return err
		}
	}
	if m.Header != nil {
		if err := m.Header.validate(m.Type); err != nil {
			return err
		}
	}
	listFields := m.ListButton != "" || len(m.Rows) > 0
	ctaFields := m.DisplayText != "" || m.URL != ""
	switch m.Type {
	case InteractiveButton:
		if listFields || ctaFields {
			return errors.New("interactive: a button message has buttons only (no list_button, rows, display_text or url)")
		}
		return checkReplyButtons(m.Buttons)
	case InteractiveList:
		if len(m.Buttons) > 0 || ctaFields {
			return errors.New("interactive: a list message has list_button and rows only (no buttons, display_text or url)")
		}
		if err := checkText("interactive.list_button", m.ListButton, maxButtonTitle); err != nil {
			return err
		}
		return checkRows(m.Rows)
	case InteractiveCTAURL:
		if listFields || len(m.Buttons) > 0 {
			return errors.New("interactive: a cta_url message has display_text and url only (no buttons, list_button or rows)")
		}
		if err := checkText("interactive.display_text", m.DisplayText, maxButtonTitle); err != nil {
			return err
		}
		return checkLink("interactive.url", m.URL)
	case "":
		return errors.New("interactive.type: required: button, list or cta_url")
	}
	return fmt.Errorf("interactive.type: %.40q: want button, list or cta_url", m.Type)
}

func (h *InteractiveHeader) validate(msgType string) error {
	switch h.Type {
	case "text":
		if h.Link != "" || h.ID != "" {
			return errors.New("interactive.header: a text header has no link or id")
		}
		return checkText("interactive.header.text", h.Text, maxInteractiveShort)
	case MediaImage, MediaVideo, MediaDocument:
		if msgType == InteractiveList {
			return fmt.Errorf("interactive.header.type: a list message's header is text only (got %s)", h.Type)
		}
		if h.Text != "" {
			return fmt.Errorf("interactive.header.text: a %s header has no text", h.Type)
		}
		m := Media{Type: h.Type, Link: h.Link, ID: h.ID}
		if err := m.validate(); err != nil {
			return errors.New(strings.ReplaceAll(err.Error(), "media.", "interactive.header."))
		}
		return nil
	case "":
		return errors.New("interactive.header.type: required: text, image, video or document")
	}
	return fmt.Errorf("interactive.header.type: %.40q: want text, image, video or document", h.Type)
}

func checkReplyButtons(bs []ReplyButton) error {
	if len(bs) == 0 || len(bs) > maxReplyButtons {
		return fmt.Errorf("interactive.buttons: %d buttons, want 1 to %d", len(bs), maxReplyButtons)
	}
	ids, titles := map[string]int{}, map[string]int{}
	for i, b := range bs {
		f := fmt.Sprintf("interactive.buttons[%d]", i)
		if err := checkText(f+".id", b.ID, maxButtonID); err != nil {
			return err
		}
		if strings.TrimSpace(b.ID) != b.ID {
			return fmt.Errorf("%s.id: has leading or trailing spaces", f)
		}
		if err := checkText(f+".title", b.Title, maxButtonTitle); err != nil {
			return err
		}
		if j, dup := ids[b.ID]; dup {
			return fmt.Errorf("%s.id: %.40q is buttons[%d]'s too: ids must be unique", f, b.ID, j)
		}
		if j, dup := titles[b.Title]; dup {
			return fmt.Errorf("%s.title: %.40q is buttons[%d]'s too: titles must be unique", f, b.Title, j)
		}
		ids[b.ID], titles[b.Title] = i, i
	}
	return nil
}

func checkRows(rows []ListRow) error {
	if len(rows) == 0 || len(rows) > maxListRows {
		return fmt.Errorf("interactive.rows: %d rows, want 1 to %d", len(rows), maxListRows)
	}
	ids := map[string]int{}
	titled := rows[0].Section != ""
	for i, r := range rows {
		f := fmt.Sprintf("interactive.rows[%d]", i)
		if (r.Section != "") != titled {
			return fmt.Errorf("%s.section: give every row a section, or none (one untitled section)", f)
		}
		if titled {
			if err := checkText(f+".section", r.Section, maxSectionTitle); err != nil {
				return err
			}
		}
		if err := checkText(f+".id", r.ID, maxRowID); err != nil {
			return err
		}
		if j, dup := ids[r.ID]; dup {
			return fmt.Errorf("%s.id: %.40q is rows[%d]'s too: row ids must be unique", f, r.ID, j)
		}
		ids[r.ID] = i
		if err := checkText(f+".title", r.Title, maxRowTitle); err != nil {
			return err
		}
		if r.Description != "" {
			if err := checkText(f+".description", r.Description, maxRowDescription); err != nil {
				return err
			}
		}
	}
	return nil
}

func (l *Location) validate() error {
	switch {
	case math.IsNaN(l.Latitude) || l.Latitude < -90 || l.Latitude > 90:
		return fmt.Errorf("location.latitude: %v, want -90 to 90 degrees", l.Latitude)
	case math.IsNaN(l.Longitude) || l.Longitude < -180 || l.Longitude > 180:
		return fmt.Errorf("location.longitude: %v, want -180 to 180 degrees", l.Longitude)
	}
	for _, f := range []struct{ name, v string }{{"location.name", l.Name}, {"location.address", l.Address}} {
		if f.v != "" {
			if err := checkText(f.name, f.v, maxLocationText); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *Reaction) validate() error {
	if r.MessageID == "" {
		return errors.New("reaction.message_id: required: the wamid of the message reacted to")
	}
	if err := checkMessageID("reaction.message_id", r.MessageID); err != nil {
		return err
	}
	if r.Emoji == "" {
		return nil // removes the reaction
	}
	n := utf8.RuneCountInString(r.Emoji)
	ascii := !strings.ContainsFunc(r.Emoji, func(c rune) bool { return c >= 0x80 })
	if !utf8.ValidString(r.Emoji) || n > maxReactionEmojiRune || ascii ||
		strings.ContainsFunc(r.Emoji, func(c rune) bool { return c < 0x80 && c != '#' && c != '*' && (c < '0' || c > '9') }) {
		return fmt.Errorf("reaction.emoji: %.40q: want one emoji (or \"\" to remove the reaction)", r.Emoji)
	}
	return nil
}

func checkContacts(cs []Contact) error {
	if len(cs) == 0 || len(cs) > maxContacts {
		return fmt.Errorf("contacts: %d contacts, want 1 to %d", len(cs), maxContacts)
	}
	for i, c := range cs {
		f := fmt.Sprintf("contacts[%d]", i)
		if err := checkText(f+".name.formatted_name", c.Name.FormattedName, maxContactField); err != nil {
			return err
		}
		n := c.Name
		if n.FirstName+n.LastName+n.MiddleName+n.Prefix+n.Suffix == "" {
			return fmt.Errorf("%s.name: want first_name, last_name, middle_name, prefix or suffix besides formatted_name (WhatsApp requires one)", f)
		}
		for _, p := range []struct{ name, v string }{{"first_name", n.FirstName}, {"last_name", n.LastName}, {"middle_name", n.MiddleName}, {"prefix", n.Prefix}, {"suffix", n.Suffix}} {
			if p.v != "" {
				if err := checkText(f+".name."+p.name, p.v, maxContactField); err != nil {
					return err
				}
			}
		}
		if len(c.Phones) > maxContactEntries || len(c.Emails) > maxContactEntries || len(c.URLs) > maxContactEntries {
			return fmt.Errorf("%s: at most %d phones, emails or urls each", f, maxContactEntries)
		}
		for j, p := range c.Phones {
			pf := fmt.Sprintf("%s.phones[%d]", f, j)
			if err := checkText(pf+".phone", p.Phone, maxContactField); err != nil {
				return err
			}
			if err := checkCardType(pf+".type", p.Type); err != nil {
				return err
			}
			if p.WaID != "" && (!allDigits(p.WaID) || len(p.WaID) > 15) {
				return fmt.Errorf("%s.wa_id: %.40q: want the digits of a WhatsApp ID (an E.164 number without +)", pf, p.WaID)
			}
		}
		for j, e := range c.Emails {
			ef := fmt.Sprintf("%s.emails[%d]", f, j)
			if a, err := mail.ParseAddress(e.Email); err != nil || a.Address != e.Email || len(e.Email) > maxContactField {
				return fmt.Errorf("%s.email: %.60q is not an email address", ef, e.Email)
			}
			if err := checkCardType(ef+".type", e.Type); err != nil {
				return err
			}
		}
		for j, u := range c.URLs {
			uf := fmt.Sprintf("%s.urls[%d]", f, j)
			if err := checkLink(uf+".url", u.URL); err != nil {
				return err
			}
			if err := checkCardType(uf+".type", u.Type); err != nil {
				return err
			}
		}
		if c.Org != nil {
			for _, p := range []struct{ name, v string }{{"company", c.Org.Company}, {"department", c.Org.Department}, {"title", c.Org.Title}} {
				if p.v != "" {
					if err := checkText(f+".org."+p.name, p.v, maxContactField); err != nil {
						return err
					}
				}
			}
		}
		if c.Birthday != "" {
			if _, err := time.Parse(time.DateOnly, c.Birthday); err != nil {
				return fmt.Errorf("%s.birthday: %.40q: want a date, YYYY-MM-DD", f, c.Birthday)
			}
		}
	}
	return nil
}

// checkCardType checks a contact card entry's type: HOME, WORK or none.
func checkCardType(field, t string) error {
	switch t {
	case "", "HOME", "WORK":
		return nil
	}
	return fmt.Errorf("%s: %.40q: want HOME or WORK (or none)", field, t)
}

// Limits of template components (Cloud API template messages reference).
const (
	maxTemplateHeaderText = 60
	maxTemplateButtons    = 10 // a template's buttons
	maxURLButtons         = 2
	maxCopyCodeButtons    = 1
	maxCouponCode         = 15
	maxButtonPayload      = 1000 // Sluice's bound on a quick reply's payload
	maxURLSuffix          = 2000 // Sluice's bound on a URL button's suffix
	maxFallbackValue      = 1000 // Sluice's bound on a currency or date's text
)

// validateComponents checks a template's header, typed body parameters
// and buttons.
func (t *Template) validateComponents() error {
	if len(t.Parameters) > 0 && len(t.BodyParams) > 0 {
		return errors.New("template.parameters, template.body_params: set one (both fill the body's {{n}})")
	}
	if h := t.Header; h != nil {
		if err := h.validate(); err != nil {
			return err
		}
	}
	for i, p := range t.BodyParams {
		if err := p.validate(fmt.Sprintf("template.body_params[%d]", i), i); err != nil {
			return err
		}
	}
	if len(t.Buttons) > maxTemplateButtons {
		return fmt.Errorf("template.buttons: %d buttons, want at most %d", len(t.Buttons), maxTemplateButtons)
	}
	seen := map[int]int{}
	count := map[string]int{}
	for i, b := range t.Buttons {
		f := fmt.Sprintf("template.buttons[%d]", i)
		if b.Index < 0 || b.Index >= maxTemplateButtons {
			return fmt.Errorf("%s.index: %d, want 0 to %d (the button's position in the template)", f, b.Index, maxTemplateButtons-1)
		}
		if j, dup := seen[b.Index]; dup {
			return fmt.Errorf("%s.index: %d is buttons[%d]'s too: one value a button", f, b.Index, j)
		}
		seen[b.Index] = i
		count[b.SubType]++
		var field, v string
		var max int
		switch b.SubType {
		case "quick_reply":
			field, v, max = "payload", b.Payload, maxButtonPayload
		case "url":
			field, v, max = "text", b.Text, maxURLSuffix
		case "copy_code":
			field, v, max = "coupon_code", b.CouponCode, maxCouponCode
		case "":
			return fmt.Errorf("%s.sub_type: required: quick_reply, url or copy_code", f)
		default:
			return fmt.Errorf("%s.sub_type: %.40q: want quick_reply, url or copy_code", f, b.SubType)
		}
		for _, other := range []struct{ name, v string }{{"payload", b.Payload}, {"text", b.Text}, {"coupon_code", b.CouponCode}} {
			if other.name != field && other.v != "" {
				return fmt.Errorf("%s.%s: a %s button takes %s only", f, other.name, b.SubType, field)
			}
		}
		if err := checkParamText(f+"."+field, 0, v, max); err != nil {
			return err
		}
	}
	switch {
	case count["url"] > maxURLButtons:
		return fmt.Errorf("template.buttons: %d url buttons, want at most %d (a template has at most %d)", count["url"], maxURLButtons, maxURLButtons)
	case count["copy_code"] > maxCopyCodeButtons:
		return fmt.Errorf("template.buttons: %d copy_code buttons, want at most %d", count["copy_code"], maxCopyCodeButtons)
	}
	return nil
}

func (h *TemplateHeader) validate() error {
	switch h.Type {
	case "text":
		if h.Link+h.ID+h.Filename != "" || h.Location != nil {
			return errors.New("template.header: a text header has text only")
		}
		if err := checkParamText("template.header.text", 0, h.Text, maxTemplateHeaderText); err != nil {
			return err
		}
	case MediaImage, MediaVideo, MediaDocument:
		if h.Text != "" || h.Location != nil {
			return fmt.Errorf("template.header: a %s header has link or id (and a document's filename) only", h.Type)
		}
		m := Media{Type: h.Type, Link: h.Link, ID: h.ID, Filename: h.Filename}
		if err := m.validate(); err != nil {
			return errors.New(strings.ReplaceAll(err.Error(), "media.", "template.header."))
		}
	case "location":
		if h.Text+h.Link+h.ID+h.Filename != "" {
			return errors.New("template.header: a location header has location only")
		}
		if h.Location == nil {
			return errors.New("template.header.location: required for a location header")
		}
		if err := h.Location.validate(); err != nil {
			return errors.New(strings.Replace(err.Error(), "location.", "template.header.location.", 1))
		}
	case "":
		return errors.New("template.header.type: required: text, image, video, document or location")
	default:
		return fmt.Errorf("template.header.type: %.40q: want text, image, video, document or location", h.Type)
	}
	return nil
}

func (p *TemplateParam) validate(f string, i int) error {
	switch p.Type {
	case "text":
		if p.Currency != nil || p.DateTime != nil {
			return fmt.Errorf("%s: a text parameter has text only", f)
		}
		if err := checkParamText(f+".text", i+1, p.Text, maxWhatsAppText); err != nil {
			return err
		}
	case "currency":
		c := p.Currency
		switch {
		case p.Text != "" || p.DateTime != nil:
			return fmt.Errorf("%s: a currency parameter has currency only", f)
		case c == nil:
			return fmt.Errorf("%s.currency: required for a currency parameter", f)
		case len(c.Code) != 3 || strings.ToUpper(c.Code) != c.Code || !isASCIILetters(c.Code):
			return fmt.Errorf("%s.currency.code: %.40q: want an ISO 4217 code (USD)", f, c.Code)
		}
		// (the fallback stands in for {{n}}, so Meta holds it to 132018 too)
		if err := checkParamText(f+".currency.fallback_value", i+1, c.FallbackValue, maxFallbackValue); err != nil {
			return err
		}
	case "date_time":
		switch {
		case p.Text != "" || p.Currency != nil:
			return fmt.Errorf("%s: a date_time parameter has date_time only", f)
		case p.DateTime == nil:
			return fmt.Errorf("%s.date_time: required for a date_time parameter", f)
		}
		if err := checkParamText(f+".date_time.fallback_value", i+1, p.DateTime.FallbackValue, maxFallbackValue); err != nil {
			return err
		}
	case "":
		return fmt.Errorf("%s.type: required: text, currency or date_time", f)
	default:
		return fmt.Errorf("%s.type: %.40q: want text, currency or date_time", f, p.Type)
	}
	return nil
}

// isASCIILetters reports whether s is ASCII letters only.
func isASCIILetters(s string) bool {
	for _, r := range s {
		if !isASCIILetter(r) {
			return false
		}
	}
	return s != ""
}

// TemplateShape is what an approved WhatsApp template takes
// (channels.whatsapp.templates.<name>): its header's type ("" for none,
// or text, image, video, document, location), its body's number of
// parameters, and by index the sub_type of each of its buttons (quick_reply,
// url, copy_code, or "none" for a button that takes no value, such as a
// phone-number or static URL button). Check holds a send to it, as Meta
// would (errors 132000, "number of parameters does not match", and 132012,
// "parameter format does not match").
type TemplateShape struct {
	Header     string
	BodyParams int
	Buttons    []string
}

// Validate checks the shape itself; the error names the field.
func (s TemplateShape) Validate() error {
	switch s.Header {
	case "", "text", MediaImage, MediaVideo, MediaDocument, "location":
	default:
		return fmt.Errorf("header: %.40q: want none, text, image, video, document or location", s.Header)
	}
	if s.BodyParams < 0 {
		return fmt.Errorf("body_params: %d, want 0 or more", s.BodyParams)
	}
	if len(s.Buttons) > maxTemplateButtons {
		return fmt.Errorf("buttons: %d, want at most %d", len(s.Buttons), maxTemplateButtons)
	}
	for i, b := range s.Buttons {
		switch b {
		case "quick_reply", "url", "copy_code", "none":
		default:
			return fmt.Errorf("buttons[%d]: %.40q: want quick_reply, url, copy_code or none", i, b)
		}
	}
	return nil
}

// Check reports where t does not fit the template's shape: a header of
// another type, or one missing or extra; another number of body
// parameters; a button value at an index where the template has no such
// button; a URL or copy-code button left without its value. The error
// names the field.
func (s TemplateShape) Check(t *Template) error {
	want := s.Header
	got := ""
	if t.Header != nil {
		got = t.Header.Type
	}
	switch {
	case want == "" && got != "":
		return fmt.Errorf("template.header: template %s has no header (channels.whatsapp.templates; Meta error 132000)", t.Name)
	case want != "" && got == "":
		return fmt.Errorf("template.header: template %s's header is %s: give its value (Meta error 132000)", t.Name, want)
	case want != got:
		return fmt.Errorf("template.header.type: %s, but template %s's header is %s (Meta error 132012)", got, t.Name, want)
	}
	if n := len(t.Parameters) + len(t.BodyParams); n != s.BodyParams {
		field := "template.parameters"
		if len(t.BodyParams) > 0 {
			field = "template.body_params"
		}
		return fmt.Errorf("%s: %d, but template %s's body has %d (Meta error 132000)", field, n, t.Name, s.BodyParams)
	}
	given := map[int]bool{}
	for i, b := range t.Buttons {
		switch {
		case b.Index >= len(s.Buttons) || s.Buttons[b.Index] == "none":
			return fmt.Errorf("template.buttons[%d].index: template %s has no button at index %d that takes a value", i, t.Name, b.Index)
		case s.Buttons[b.Index] != b.SubType:
			return fmt.Errorf("template.buttons[%d].sub_type: %s, but template %s's button %d is %s (Meta error 132012)", i, b.SubType, t.Name, b.Index, s.Buttons[b.Index])
		}
		given[b.Index] = true
	}
	for i, b := range s.Buttons {
		if (b == "url" || b == "copy_code") && !given[i] {
			return fmt.Errorf("template.buttons: template %s's %s button %d needs its value (Meta error 132000)", t.Name, b, i)
		}
	}
	return nil
}
