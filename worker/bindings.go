package worker

import (
	"context"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
)

// WhatsAppChannel sends whatsapp:send tasks through the WhatsApp Cloud API.
// Key fields: phone_number_id, to.
func WhatsAppChannel(c *channels.WhatsApp, rs []rules.Rule) Channel {
	return Channel{Name: "whatsapp", TaskType: tasks.TypeWhatsAppSend, Rules: rs,
		Prepare: func(b []byte) (Prepared, error) {
			p, err := tasks.DecodeWhatsAppSend(b)
			if err != nil {
				return Prepared{}, err
			}
			return Prepared{Fields: p.Fields(), Priority: priority(p.Delivery), Tenant: p.Tenant, Send: func(ctx context.Context) (channels.Response, error) { return c.Send(ctx, p) }}, nil
		}}
}

// SMSChannel sends sms:send tasks through Twilio Programmable Messaging.
// Key fields: from, messaging_service_sid, sender (from, else the service),
// to, and account_sid (the client's account).
func SMSChannel(c *channels.Twilio, rs []rules.Rule) Channel {
	return Channel{Name: "sms", TaskType: tasks.TypeSMSSend, Rules: rs,
		Prepare: func(b []byte) (Prepared, error) {
			p, err := tasks.DecodeSMSSend(b)
			if err != nil {
				return Prepared{}, err
			}
			f := p.Fields()
			f["account_sid"] = c.AccountSID
			return Prepared{Fields: f, Priority: priority(p.Delivery), Tenant: p.Tenant, Send: func(ctx context.Context) (channels.Response, error) { return c.Send(ctx, p) }}, nil
		}}
}

// WebhookChannel delivers webhook:deliver tasks, signed per Standard Webhooks.
// Key fields: url, host, endpoint, event_type.
func WebhookChannel(c *channels.Webhook, rs []rules.Rule) Channel {
	return Channel{Name: "webhook", TaskType: tasks.TypeWebhookDeliver, Rules: rs,
		Prepare: func(b []byte) (Prepared, error) {
			p, err := tasks.DecodeWebhookDeliver(b)
			if err != nil {
				return Prepared{}, err
			}
			return Prepared{Fields: p.Fields(), Priority: priority(p.Delivery), Tenant: p.Tenant, Send: func(ctx context.Context) (channels.Response, error) { return c.Deliver(ctx, p) }}, nil
		}}
}

// HTTPChannel makes http:call tasks' requests. Key fields: method, url, host.
func HTTPChannel(c *channels.HTTPCaller, rs []rules.Rule) Channel {
	return Channel{Name: "http", TaskType: tasks.TypeHTTPCall, Rules: rs,
		Prepare: func(b []byte) (Prepared, error) {
			p, err := tasks.DecodeHTTPCall(b)
			if err != nil {
				return Prepared{}, err
			}
			return Prepared{Fields: p.Fields(), Priority: priority(p.Delivery), Tenant: p.Tenant, Send: func(ctx context.Context) (channels.Response, error) { return c.Call(ctx, p) }}, nil
		}}
}

// priority maps a payload's priority to the limiter's.
func priority(d tasks.Delivery) throttle.Priority {
	if d.High() {
		return throttle.High
	}
	return throttle.Bulk
}
