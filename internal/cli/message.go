package cli

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/hibiken/asynq"

	"github.com/sluice-dev/sluice/internal/campaign"
	"github.com/sluice-dev/sluice/tasks"
)

// message says how campaign rows become tasks on one channel.
type message struct {
	channel  string // whatsapp, sms or webhook
	campaign string // part of every idempotency key

	// whatsapp
	phoneNumberID string
	template      string   // template name; or text below
	language      string   // template language code
	params        []string // columns filling the template's {{1}}, {{2}}, …
	// whatsapp text, sms body: a text with {column} placeholders
	text string

	// sms: From numbers used in turn (row i uses senders[i % n]), or a
	// messaging service
	senders          []string
	messagingService string

	// webhook: endpoint URLs used in turn; the event type
	urls      []string
	eventType string

	maxRetry int
}

func (m *message) validate(columns []string) error {
	have := map[string]bool{}
	for _, c := range columns {
		have[c] = true
	}
	for _, p := range m.params {
		if !have[p] {
			return fmt.Errorf("--params: column %q is not in the file (have: %s)", p, strings.Join(columns, ", "))
		}
	}
	switch m.channel {
	case "whatsapp":
		if m.phoneNumberID == "" {
			return fmt.Errorf("--phone-number-id is required for whatsapp")
		}
		if (m.template == "") == (m.text == "") {
			return fmt.Errorf("whatsapp: give --template (with --params) or --text")
		}
	case "sms":
		if (len(m.senders) == 0) == (m.messagingService == "") {
			return fmt.Errorf("sms: give --from (one or more numbers) or --messaging-service")
		}
		if m.text == "" {
			return fmt.Errorf("sms: --body is required")
		}
	case "webhook":
		if len(m.urls) == 0 || m.eventType == "" {
			return fmt.Errorf("webhook: --url and --event are required")
		}
	default:
		return fmt.Errorf("--channel %q: want whatsapp, sms or webhook", m.channel)
	}
	return nil
}

// task builds the task for the i-th valid row. Its ID is the row's
// content-based idempotency key, so enqueuing the same row twice is refused
// as a duplicate and never sends twice.
func (m *message) task(row campaign.Row, i int, columns []string) (*asynq.Task, error) {
	key := campaign.IdempotencyKey(m.campaign, m.channel, row, columns)
	opts := []asynq.Option{}
	if m.maxRetry > 0 {
		opts = append(opts, asynq.MaxRetry(m.maxRetry))
	}
	switch m.channel {
	case "whatsapp":
		p := tasks.WhatsAppSend{PhoneNumberID: m.phoneNumberID, To: row.To, IdempotencyKey: key}
		if m.template != "" {
			t := &tasks.Template{Name: m.template, Language: m.language}
			for _, c := range m.params {
				t.Parameters = append(t.Parameters, row.Params[c])
			}
			p.Template = t
		} else {
			text, err := campaign.Render(m.text, row)
			if err != nil {
				return nil, err
			}
			p.Text = text
		}
		return tasks.NewWhatsAppSendTask(p, opts...)
	case "sms":
		body, err := campaign.Render(m.text, row)
		if err != nil {
			return nil, err
		}
		p := tasks.SMSSend{To: row.To, Body: body, IdempotencyKey: key, MessagingServiceSID: m.messagingService}
		if len(m.senders) > 0 {
			p.From = m.senders[i%len(m.senders)]
		}
		return tasks.NewSMSSendTask(p, opts...)
	case "webhook":
		data, err := json.Marshal(row.Params)
		if err != nil {
			return nil, err
		}
		url := m.urls[i%len(m.urls)]
		return tasks.NewWebhookDeliverTask(tasks.WebhookDeliver{URL: url, EventType: m.eventType, Payload: data, Endpoint: url, IdempotencyKey: key}, opts...)
	}
	return nil, fmt.Errorf("channel %q", m.channel)
}
