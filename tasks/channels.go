package tasks

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// channels is the one channel registry: per channel, its task type, the
// names of the fields its limit-key templates may name (the keys of the
// payload's Fields; TestFields holds the two together) and its payload cap.
// The channel name is also the task type's default queue. config, the worker
// and the CLI read it through Channels, ChannelTaskType, DefaultQueue,
// FieldNames and MaxPayloadBytes.
var channels = []struct {
	name, taskType string
	fields         []string
	maxPayload     int      // bytes of encoded JSON; see MaxPayloadBytes
	costFields     []string // fields holding a whole number; see CostFieldNames
}{
	{"whatsapp", TypeWhatsAppSend, []string{"phone_number_id", "to"}, 64 << 10, nil},
	{"sms", TypeSMSSend, []string{"from", "messaging_service_sid", "to", "sender", "account_sid", "segments"}, 16 << 10, []string{"segments"}},
	{"webhook", TypeWebhookDeliver, []string{"url", "host", "endpoint", "event_type"}, 1 << 20, nil},
	{"http", TypeHTTPCall, []string{"method", "url", "host"}, 1 << 20, nil},
}

// CostFieldNames returns the fields of a task type whose value is a whole
// number a limit may charge as the task's cost (rules.Rule.CostField):
// "segments" for sms:send, none for the others or an unknown type.
func CostFieldNames(taskType string) []string {
	for _, c := range channels {
		if c.taskType == taskType {
			return slices.Clone(c.costFields)
		}
	}
	return nil
}

// MaxPayloadBytes returns the largest encoded payload, in bytes of JSON, that
// the constructors build and the decoders accept for a task type, or 0 for
// an unknown type:
//
//   - whatsapp:send 64 KiB: a 4,096-character text body (Cloud API limit)
//     takes at most 24 KiB even if every character is JSON-escaped;
//   - sms:send 16 KiB: a 1,600-character body (Twilio) takes at most 9.6 KiB;
//   - webhook:deliver and http:call 1 MiB: an event or request body; Standard
//     Webhooks advises small payloads, and a large one is better fetched by
//     the receiver than pushed through a queue.
//
// A channel's configuration may lower its cap (channels.<name>.max_payload_bytes),
// never raise it. A producer that bypasses the constructors is held to the
// same cap by the worker, which archives a larger task without decoding it.
func MaxPayloadBytes(taskType string) int {
	for _, c := range channels {
		if c.taskType == taskType {
			return c.maxPayload
		}
	}
	return 0
}

// checkSize reports an encoded payload over MaxPayloadBytes(taskType).
func checkSize(taskType string, n int) error {
	if max := MaxPayloadBytes(taskType); n > max {
		return fmt.Errorf("payload: %d bytes encoded, want at most %d for %s", n, max, taskType)
	}
	return nil
}

// Channels returns the channel names, in a fixed order:
// "whatsapp", "sms", "webhook", "http".
func Channels() []string {
	names := make([]string, len(channels))
	for i, c := range channels {
		names[i] = c.name
	}
	return names
}

// ChannelTaskType returns the task type sent on a channel ("sms" →
// TypeSMSSend), or false if channel is not one of Channels().
func ChannelTaskType(channel string) (string, bool) {
	for _, c := range channels {
		if c.name == channel {
			return c.taskType, true
		}
	}
	return "", false
}

// DefaultQueue returns the asynq queue the constructors put a task type in:
// its channel's name ("whatsapp", "sms", "webhook", "http"), one queue per
// channel so that one channel's backlog never delays another. It returns ""
// for an unknown task type.
func DefaultQueue(taskType string) string {
	for _, c := range channels {
		if c.taskType == taskType {
			return c.name
		}
	}
	return ""
}

// FieldNames returns the names of the fields that the task type's Fields
// method returns, i.e. the placeholders a limit-key template may use for it,
// or false for an unknown task type. The slice is the caller's to modify.
func FieldNames(taskType string) ([]string, bool) {
	for _, c := range channels {
		if c.taskType == taskType {
			return slices.Clone(c.fields), true
		}
	}
	return nil, false
}

// Fields returns the values limit-key templates may use: "phone_number_id"
// and "to".
func (p WhatsAppSend) Fields() map[string]string {
	return map[string]string{
		"phone_number_id": p.PhoneNumberID,
		"to":              p.To,
	}
}

// Fields returns the values limit-key templates may use: "from",
// "messaging_service_sid" (also when the payload gives the SID as From),
// "to", "sender" (From if set, else MessagingServiceSID), "account_sid",
// which the payload does not carry: it is "" here and the worker fills it
// with its Twilio client's account (the 20429 concurrency cap is per
// account), and "segments", the body's SMS segment count in decimal
// (CountSegments), the cost of a rule with `cost: segments`. Unset fields
// map to "".
func (p SMSSend) Fields() map[string]string {
	sender := p.From
	if sender == "" {
		sender = p.MessagingServiceSID
	}
	_, service := p.Sender()
	return map[string]string{
		"from":                  p.From,
		"messaging_service_sid": service,
		"to":                    p.To,
		"sender":                sender,
		"account_sid":           "",
		"segments":              strconv.Itoa(p.Segments()),
	}
}

// Segments is what the message costs against a sender's MPS, which Twilio
// counts in segments: the SMS segments of the body (CountSegments); 1 for
// an MMS (media_urls: one message, its body not split into segments) and
// for a Content Template, whose rendered text Sluice does not see (one
// that renders to several segments is undercounted; Twilio queues what
// goes over a sender's MPS, it does not refuse it).
func (p SMSSend) Segments() int {
	if len(p.MediaURLs) > 0 || p.ContentSID != "" {
		return 1
	}
	return CountSegments(p.Body).Count
}

// Fields returns the values limit-key templates may use: "url", "host" (the
// URL's host with its port if it has one, lower-cased: "api.example.com:8443"),
// "endpoint" and "event_type".
func (p WebhookDeliver) Fields() map[string]string {
	return map[string]string{
		"url":        p.URL,
		"host":       urlHost(p.URL),
		"endpoint":   p.Endpoint,
		"event_type": p.EventType,
	}
}

// Fields returns the values limit-key templates may use: "method", "url" and
// "host" (as for WebhookDeliver).
func (p HTTPCall) Fields() map[string]string {
	return map[string]string{
		"method": p.Method,
		"url":    p.URL,
		"host":   urlHost(p.URL),
	}
}

// urlHost returns the lower-cased host[:port] of s, or "" if s does not parse.
func urlHost(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Host)
}
