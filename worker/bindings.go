package worker

import (
	"context"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
)

// Pause scopes of the bundled channels (Channel.PauseScopes; docs/providers.md).
var (
	// WhatsAppPauseScopes: 130429 and 131048 pause the business phone
	// number, 131056 the pair, 4 and 80007 the app (the whole channel).
	WhatsAppPauseScopes = map[string]string{channels.ScopeSender: "{phone_number_id}",
		channels.ScopePair: "{phone_number_id}:{to}", channels.ScopeAccount: ""}
	// SMSPauseScopes: 30022, 21611 and 30023 pause the sender (From or
	// Messaging Service), 14107 the pair, 20429 and 63038 the account.
	SMSPauseScopes = map[string]string{channels.ScopeSender: "{sender}",
		channels.ScopePair: "{sender}:{to}", channels.ScopeAccount: "{account_sid}"}
	// HostPauseScopes: a 429 or 503 of a webhook or HTTP endpoint pauses
	// its host.
	HostPauseScopes = map[string]string{channels.ScopeSender: "{host}"}
)

// BundledPauseScopes returns the pause scopes of the bundled channel
// named ("whatsapp", "sms", "webhook", "http"), as its Channel has them,
// or nil: a producer given them plans sends past their scopes' pauses.
func BundledPauseScopes(channel string) map[string]string {
	switch channel {
	case "whatsapp":
		return WhatsAppPauseScopes
	case "sms":
		return SMSPauseScopes
	case "webhook", "http":
		return HostPauseScopes
	}
	return nil
}

// WhatsAppChannel sends whatsapp:send tasks through the WhatsApp Cloud API.
// Key fields: phone_number_id, to.
func WhatsAppChannel(c *channels.WhatsApp, rs []rules.Rule) Channel {
	return Channel{Name: "whatsapp", TaskType: tasks.TypeWhatsAppSend, Rules: rs, PauseScopes: WhatsAppPauseScopes, Retry: DefaultProviderRetry,
		Prepare: func(b []byte) (Prepared, error) {
			p, err := tasks.DecodeWhatsAppSend(b)
			if err != nil {
				return Prepared{}, err
			}
			return Prepared{Fields: p.Fields(), Priority: priority(p.Delivery), Tenant: p.Tenant, Campaign: p.Campaign, Send: func(ctx context.Context) (channels.Response, error) { return c.Send(ctx, p) }}, nil
		},
		Probe: func(ctx context.Context, f map[string]string) error { return c.Probe(ctx, f["phone_number_id"]) }}
}

// SMSChannel sends sms:send tasks through Twilio Programmable Messaging.
// Key fields: from, messaging_service_sid, sender (from, else the service),
// to, and account_sid (the client's account).
func SMSChannel(c *channels.Twilio, rs []rules.Rule) Channel {
	return Channel{Name: "sms", TaskType: tasks.TypeSMSSend, Rules: rs, PauseScopes: SMSPauseScopes, Retry: DefaultProviderRetry,
		Prepare: func(b []byte) (Prepared, error) {
			p, err := tasks.DecodeSMSSend(b)
			if err != nil {
				return Prepared{}, err
			}
			f := p.Fields()
			f["account_sid"] = c.AccountSID
			return Prepared{Fields: f, Priority: priority(p.Delivery), Tenant: p.Tenant, Campaign: p.Campaign, Send: func(ctx context.Context) (channels.Response, error) { return c.Send(ctx, p) }}, nil
		},
		Probe: func(ctx context.Context, _ map[string]string) error { return c.Probe(ctx) }}
}

// WebhookChannel delivers webhook:deliver tasks, signed per Standard Webhooks.
// Key fields: url, host, endpoint, event_type.
func WebhookChannel(c *channels.Webhook, rs []rules.Rule) Channel {
	return Channel{Name: "webhook", TaskType: tasks.TypeWebhookDeliver, Rules: rs, PauseScopes: HostPauseScopes,
		Retry: DefaultWebhookRetry, Endpoint: "webhook:endpoint:{host}",
		Prepare: func(b []byte) (Prepared, error) {
			p, err := tasks.DecodeWebhookDeliver(b)
			if err != nil {
				return Prepared{}, err
			}
			return Prepared{Fields: p.Fields(), Priority: priority(p.Delivery), Tenant: p.Tenant, Campaign: p.Campaign, Send: func(ctx context.Context) (channels.Response, error) { return c.Deliver(ctx, p) }}, nil
		}}
}

// HTTPChannel makes http:call tasks' requests. Key fields: method, url, host.
func HTTPChannel(c *channels.HTTPCaller, rs []rules.Rule) Channel {
	return Channel{Name: "http", TaskType: tasks.TypeHTTPCall, Rules: rs, PauseScopes: HostPauseScopes,
		Retry: DefaultWebhookRetry, Endpoint: "http:endpoint:{host}",
		Prepare: func(b []byte) (Prepared, error) {
			p, err := tasks.DecodeHTTPCall(b)
			if err != nil {
				return Prepared{}, err
			}
			return Prepared{Fields: p.Fields(), Priority: priority(p.Delivery), Tenant: p.Tenant, Campaign: p.Campaign, Send: func(ctx context.Context) (channels.Response, error) { return c.Call(ctx, p) }}, nil
		}}
}

// priority maps a payload's priority to the limiter's.
func priority(d tasks.Delivery) throttle.Priority {
	if d.High() {
		return throttle.High
	}
	return throttle.Bulk
}
