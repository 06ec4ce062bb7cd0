package cli

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/hibiken/asynq"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/campaign"
	"github.com/sluice-dev/sluice/internal/redact"
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
	// cfg holds the channels' payload caps and the egress allowlist that
	// every task is checked against (checkTask); nil means config.Default().
	cfg *config.Config
}

// checkTask holds a built task to what a worker with cfg would accept, so a
// refusal comes now, naming the flag, and not as an archived task later:
// the channel's max_payload_bytes, and for webhook and http tasks the
// target against egress (loopback, private, link-local and the rest, unless
// egress.allow_cidrs admits them). URLs in errors show scheme and host only.
func checkTask(cfg *config.Config, t *asynq.Task) error {
	if err := checkSize(cfg, t); err != nil {
		return err
	}
	var target string
	switch t.Type() {
	case tasks.TypeWebhookDeliver:
		p, err := tasks.DecodeWebhookDeliver(t.Payload())
		if err != nil {
			return err
		}
		target = p.URL
	case tasks.TypeHTTPCall:
		p, err := tasks.DecodeHTTPCall(t.Payload())
		if err != nil {
			return err
		}
		target = p.URL
	default:
		return nil
	}
	return checkTarget(cfg, "url", target)
}

// checkSize holds t to its channel's max_payload_bytes in cfg (nil:
// config.Default()).
func checkSize(cfg *config.Config, t *asynq.Task) error {
	if cfg == nil {
		cfg = config.Default()
	}
	ch := tasks.DefaultQueue(t.Type())
	if cc := cfg.Channels[ch]; cc != nil && cc.MaxPayloadBytes > 0 && len(t.Payload()) > cc.MaxPayloadBytes {
		return fmt.Errorf("payload: %d bytes encoded, over channels.%s.max_payload_bytes (%d)", len(t.Payload()), ch, cc.MaxPayloadBytes)
	}
	return nil
}

// checkTarget holds a webhook or HTTP-call target to cfg's egress policy
// (nil: config.Default()); the error names field and shows the URL's scheme
// and host only.
func checkTarget(cfg *config.Config, field, target string) error {
	if cfg == nil {
		cfg = config.Default()
	}
	if err := (channels.Egress{Allow: cfg.Egress.AllowCIDRs}).CheckURL(target); err != nil {
		return fmt.Errorf("%s %s: %w", field, redact.URL(target), err)
	}
	return nil
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
		for _, u := range m.urls {
			if err := checkTarget(m.cfg, "--url", u); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("--channel %q: want whatsapp, sms or webhook", m.channel)
	}
	return nil
}

// checked returns a func passing a constructor's result through checkSize
// (validate has checked the targets, the same for every row).
func checked(cfg *config.Config) func(*asynq.Task, error) (*asynq.Task, error) {
	return func(t *asynq.Task, err error) (*asynq.Task, error) {
		if err != nil {
			return nil, err
		}
		if err := checkSize(cfg, t); err != nil {
			return nil, err
		}
		return t, nil
	}
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
		return checked(m.cfg)(tasks.NewWhatsAppSendTask(p, opts...))
	case "sms":
		body, err := campaign.Render(m.text, row)
		if err != nil {
			return nil, err
		}
		p := tasks.SMSSend{To: row.To, Body: body, IdempotencyKey: key, MessagingServiceSID: m.messagingService}
		if len(m.senders) > 0 {
			p.From = m.senders[i%len(m.senders)]
		}
		return checked(m.cfg)(tasks.NewSMSSendTask(p, opts...))
	case "webhook":
		data, err := json.Marshal(row.Params)
		if err != nil {
			return nil, err
		}
		url := m.urls[i%len(m.urls)]
		return checked(m.cfg)(tasks.NewWebhookDeliverTask(tasks.WebhookDeliver{URL: url, EventType: m.eventType, Payload: data, Endpoint: url, IdempotencyKey: key}, opts...))
	}
	return nil, fmt.Errorf("channel %q", m.channel)
}
