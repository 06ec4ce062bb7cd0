package campaign

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluice-dev/sluice/tasks"
)

// Message says how campaign rows become tasks on one channel: the fields of
// `sluice send` and of the demo. Validate it against the file's columns,
// then build one task per valid row with Task.
type Message struct {
	Channel  string // whatsapp, sms or webhook
	Campaign string // part of every idempotency key

	// whatsapp: the sender's phone number ID, and a template (name,
	// language code, the columns filling {{1}}, {{2}}, …) or Text.
	PhoneNumberID string
	Template      string
	Language      string
	Params        []string
	// TemplateHeader and TemplateButtons fill the template's header and
	// buttons; their text values (header text, link or id, button payload,
	// suffix or coupon code) hold {column} placeholders, rendered per row.
	// A media header whose rendered link is all digits is a media ID.
	TemplateHeader  *tasks.TemplateHeader
	TemplateButtons []tasks.TemplateButton
	// Text is whatsapp's free text or sms's body, with {column}
	// placeholders (see Render).
	Text string
	// whatsapp media messages (instead of Template and Text): MediaType
	// (image, video, audio, document, sticker), and MediaURL or MediaID,
	// Caption and Filename, each with {column} placeholders, so that a
	// row's cells give its link, caption and file name
	// (--media-url "{media_url}").
	MediaType, MediaURL, MediaID, Caption, Filename string
	// whatsapp interactive messages (instead of the others): every text
	// value holds {column} placeholders, rendered per row.
	Interactive *tasks.Interactive

	// sms: From numbers used in turn (row i uses Senders[i % n]), or a
	// Messaging Service SID.
	Senders          []string
	MessagingService string
	// sms: an MMS's media URLs (each with {column} placeholders, so a
	// row's cell may give it), or a Content Template (ContentSID) and its
	// variables by name (values with {column} placeholders); and the
	// validity period in seconds (0: Twilio's default).
	SMSMediaURLs   []string
	ContentSID     string
	ContentVars    map[string]string
	ValidityPeriod int

	// webhook: endpoint URLs used in turn, the event type, and the
	// endpoint whose signing secret signs them (channels.webhook.endpoints;
	// "" for the default secret).
	URLs      []string
	EventType string
	Endpoint  string

	// Priority is every row's priority ("high", "bulk" or ""); a
	// "priority" column, when the file has one, sets it per row (an empty
	// cell keeps this one).
	Priority string

	// Tenant is every row's tenant (tasks.Delivery.Tenant): tenants
	// backlogged on one limit share it by weight. "" means Campaign, so
	// two campaigns on one number take turns instead of the later one
	// waiting for the earlier to finish.
	Tenant string

	// SendAt holds every row's send until then (tasks.Delivery.SendAt);
	// zero: now.
	SendAt time.Time

	// MaxRetry is each task's retry budget; 0 keeps tasks.DefaultMaxRetry.
	MaxRetry int
	// CheckURL, when set, checks each of URLs once in Validate (a worker's
	// egress policy); its error is returned as `--url …: …`.
	CheckURL func(url string) error
	// Check, when set, checks every task Task builds (a channel's payload
	// cap); its error makes the row's Task fail.
	Check func(*asynq.Task) error
}

// PriorityColumn is the optional column that sets a row's priority
// ("high" or "bulk"; empty keeps Message.Priority).
const PriorityColumn = "priority"

// Validate checks m against the file's columns; errors name the flag:
// `--params: column "nme" is not in the file (have: to, name)`.
func (m *Message) Validate(columns []string) error {
	have := map[string]bool{}
	for _, c := range columns {
		have[c] = true
	}
	for _, p := range m.Params {
		if !have[p] {
			return fmt.Errorf("--params: column %q is not in the file (have: %s)", p, strings.Join(columns, ", "))
		}
	}
	if err := tasks.ValidTenant(m.TaskTenant()); err != nil {
		flag := "--tenant"
		if m.Tenant == "" {
			flag = "--campaign (the default tenant)"
		}
		return fmt.Errorf("%s: %w", flag, err)
	}
	// A template error is the same on every row: one error, not one
	// reject per row.
	params := map[string]string{"to": ""}
	for _, c := range columns {
		if !isAnnotation(c) {
			params[c] = ""
		}
	}
	if m.Text != "" && m.Channel != "webhook" {
		if _, err := Render(m.Text, Row{Params: params}); err != nil {
			flag := "--body"
			if m.Channel == "whatsapp" {
				flag = "--text"
			}
			return fmt.Errorf("%s: %w", flag, err)
		}
	}
	parts := []struct{ flag, tmpl string }{{"--media-url", m.MediaURL}, {"--media-id", m.MediaID}, {"--caption", m.Caption}, {"--filename", m.Filename}}
	if h := m.TemplateHeader; h != nil {
		parts = append(parts, struct{ flag, tmpl string }{"--header-" + h.Type, h.Text + h.Link + h.ID})
	}
	for _, b := range m.TemplateButtons {
		parts = append(parts, struct{ flag, tmpl string }{fmt.Sprintf("--button %s:%d", b.SubType, b.Index), b.Payload + b.Text + b.CouponCode})
	}
	if (m.TemplateHeader != nil || len(m.TemplateButtons) > 0) && m.Template == "" {
		return fmt.Errorf("--header-*, --button: give --template")
	}
	for _, f := range parts {
		if _, err := Render(f.tmpl, Row{Params: params}); f.tmpl != "" && err != nil {
			return fmt.Errorf("%s: %w", f.flag, err)
		}
	}
	if m.Channel != "whatsapp" && m.MediaType+m.MediaURL+m.MediaID+m.Caption+m.Filename != "" {
		return fmt.Errorf("--media, --media-url, --media-id, --caption, --filename: whatsapp only (an MMS: --channel sms --media-url)")
	}
	for _, u := range m.SMSMediaURLs {
		if _, err := Render(u, Row{Params: params}); err != nil {
			return fmt.Errorf("--media-url: %w", err)
		}
	}
	for name, v := range m.ContentVars {
		if _, err := Render(v, Row{Params: params}); err != nil {
			return fmt.Errorf("--var %s: %w", name, err)
		}
	}
	if m.Channel != "sms" && (len(m.SMSMediaURLs) > 0 || m.ContentSID != "" || len(m.ContentVars) > 0 || m.ValidityPeriod != 0) {
		return fmt.Errorf("--content-sid, --var, --validity-period (and several --media-url): sms only")
	}
	switch m.Channel {
	case "whatsapp":
		if m.PhoneNumberID == "" {
			return fmt.Errorf("--phone-number-id is required for whatsapp")
		}
		n := 0
		for _, set := range []bool{m.Template != "", m.Text != "", m.MediaType != "", m.Interactive != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("whatsapp: give one of --template (with --params), --text, --media (with --media-url or --media-id) and --interactive")
		}
		if m.Interactive != nil {
			if _, err := renderInteractive(m.Interactive, Row{Params: params}); err != nil {
				return fmt.Errorf("--interactive: %w", err)
			}
		}
		if m.MediaType == "" && m.MediaURL+m.MediaID+m.Caption+m.Filename != "" {
			return fmt.Errorf("--media-url, --media-id, --caption, --filename: give --media (image, video, audio, document or sticker)")
		}
	case "sms":
		if (len(m.Senders) == 0) == (m.MessagingService == "") {
			return fmt.Errorf("sms: give --from (one or more numbers) or --messaging-service")
		}
		switch {
		case m.ContentSID != "" && (m.Text != "" || len(m.SMSMediaURLs) > 0):
			return fmt.Errorf("sms: --content-sid stands alone (the Content Template holds the text and media): no --body or --media-url")
		case m.ContentSID == "" && len(m.ContentVars) > 0:
			return fmt.Errorf("sms: --var needs --content-sid")
		case m.Text == "" && len(m.SMSMediaURLs) == 0 && m.ContentSID == "":
			return fmt.Errorf("sms: give --body, --media-url (an MMS) or --content-sid")
		}
	case "webhook":
		if len(m.URLs) == 0 || m.EventType == "" {
			return fmt.Errorf("webhook: --url and --event are required")
		}
		if m.CheckURL != nil {
			for _, u := range m.URLs {
				if err := m.CheckURL(u); err != nil {
					return err
				}
			}
		}
	default:
		return fmt.Errorf("--channel %q: want whatsapp, sms or webhook", m.Channel)
	}
	return nil
}

// TaskTenant is the rows' tenant: Tenant, else the campaign's name.
func (m *Message) TaskTenant() string {
	if m.Tenant != "" {
		return m.Tenant
	}
	return m.Campaign
}

// Task builds the task for the i-th valid row. Its ID is the row's
// content-based IdempotencyKey, so enqueuing the same row twice is refused
// as a duplicate and never sends twice. The error is a template's (Render),
// the payload's (tasks' Validate) or Check's.
func (m *Message) Task(row Row, i int, columns []string) (*asynq.Task, error) {
	key := IdempotencyKey(m.Campaign, m.Channel, row, columns)
	var opts []asynq.Option
	if m.MaxRetry > 0 {
		opts = append(opts, asynq.MaxRetry(m.MaxRetry))
	}
	var t *asynq.Task
	var err error
	d := tasks.Delivery{Priority: m.Priority, Tenant: m.TaskTenant(), Campaign: m.Campaign, SendAt: m.SendAt}
	if v := strings.TrimSpace(row.Params[PriorityColumn]); v != "" {
		d.Priority = strings.ToLower(v)
	}
	switch m.Channel {
	case "whatsapp":
		p := tasks.WhatsAppSend{Delivery: d, PhoneNumberID: m.PhoneNumberID, To: row.To, IdempotencyKey: key}
		if m.Template != "" {
			tmpl := &tasks.Template{Name: m.Template, Language: m.Language}
			for _, c := range m.Params {
				tmpl.Parameters = append(tmpl.Parameters, row.Params[c])
			}
			if err := m.renderTemplateParts(tmpl, row); err != nil {
				return nil, err
			}
			p.Template = tmpl
		} else if m.Interactive != nil {
			if p.Interactive, err = renderInteractive(m.Interactive, row); err != nil {
				return nil, err
			}
		} else if m.MediaType != "" {
			md := &tasks.Media{Type: m.MediaType}
			for _, f := range []struct {
				dst  *string
				tmpl string
			}{{&md.Link, m.MediaURL}, {&md.ID, m.MediaID}, {&md.Caption, m.Caption}, {&md.Filename, m.Filename}} {
				if *f.dst, err = Render(f.tmpl, row); err != nil {
					return nil, err
				}
			}
			p.Media = md
		} else if p.Text, err = Render(m.Text, row); err != nil {
			return nil, err
		}
		t, err = tasks.NewWhatsAppSendTask(p, opts...)
	case "sms":
		p := tasks.SMSSend{Delivery: d, To: row.To, IdempotencyKey: key, MessagingServiceSID: m.MessagingService,
			ContentSID: m.ContentSID, ValidityPeriod: m.ValidityPeriod}
		if p.Body, err = Render(m.Text, row); err != nil {
			return nil, err
		}
		for _, u := range m.SMSMediaURLs {
			r, err := Render(u, row)
			if err != nil {
				return nil, err
			}
			p.MediaURLs = append(p.MediaURLs, r)
		}
		if len(m.ContentVars) > 0 {
			p.ContentVariables = make(map[string]string, len(m.ContentVars))
			for name, v := range m.ContentVars {
				if p.ContentVariables[name], err = Render(v, row); err != nil {
					return nil, err
				}
			}
		}
		if len(m.Senders) > 0 {
			p.From = m.Senders[i%len(m.Senders)]
		}
		t, err = tasks.NewSMSSendTask(p, opts...)
	case "webhook":
		data, merr := json.Marshal(row.Params)
		if merr != nil {
			return nil, merr
		}
		url := m.URLs[i%len(m.URLs)]
		t, err = tasks.NewWebhookDeliverTask(tasks.WebhookDeliver{Delivery: d, URL: url, EventType: m.EventType, Payload: data, Endpoint: m.Endpoint, IdempotencyKey: key}, opts...)
	default:
		return nil, fmt.Errorf("channel %q", m.Channel)
	}
	if err != nil {
		return nil, err
	}
	if m.Check != nil {
		if err := m.Check(t); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// renderTemplateParts gives t the row's header and buttons.
func (m *Message) renderTemplateParts(t *tasks.Template, row Row) error {
	render := func(dst *string) error {
		v, err := Render(*dst, row)
		*dst = v
		return err
	}
	if m.TemplateHeader != nil {
		h := *m.TemplateHeader
		for _, f := range []*string{&h.Text, &h.Link, &h.ID} {
			if err := render(f); err != nil {
				return err
			}
		}
		if h.Type != "text" && h.Link != "" && strings.Trim(h.Link, "0123456789") == "" {
			h.ID, h.Link = h.Link, ""
		}
		t.Header = &h
	}
	for _, b := range m.TemplateButtons {
		for _, f := range []*string{&b.Payload, &b.Text, &b.CouponCode} {
			if err := render(f); err != nil {
				return err
			}
		}
		t.Buttons = append(t.Buttons, b)
	}
	return nil
}

// renderInteractive is a copy of in with the row's cells in its text
// values.
func renderInteractive(in *tasks.Interactive, row Row) (*tasks.Interactive, error) {
	out := *in
	var err error
	render := func(dst *string) {
		if err == nil {
			*dst, err = Render(*dst, row)
		}
	}
	render(&out.Body)
	render(&out.Footer)
	render(&out.ListButton)
	render(&out.DisplayText)
	render(&out.URL)
	if in.Header != nil {
		h := *in.Header
		render(&h.Text)
		render(&h.Link)
		render(&h.ID)
		out.Header = &h
	}
	out.Buttons = append([]tasks.ReplyButton(nil), in.Buttons...)
	for i := range out.Buttons {
		render(&out.Buttons[i].ID)
		render(&out.Buttons[i].Title)
	}
	out.Rows = append([]tasks.ListRow(nil), in.Rows...)
	for i := range out.Rows {
		r := &out.Rows[i]
		render(&r.Section)
		render(&r.ID)
		render(&r.Title)
		render(&r.Description)
	}
	return &out, err
}
