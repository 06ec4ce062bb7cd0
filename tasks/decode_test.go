package tasks

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

func TestDecodeRoundTrip(t *testing.T) {
	t.Parallel()
	wa := validWhatsApp()
	wa.IdempotencyKey = "k1"
	task, err := NewWhatsAppSendTask(wa)
	require.NoError(t, err)
	gotWA, err := DecodeWhatsAppSend(task.Payload())
	require.NoError(t, err)
	if diff := cmp.Diff(wa, gotWA); diff != "" {
		t.Errorf("whatsapp (-want +got):\n%s", diff)
	}

	task, err = NewSMSSendTask(validSMS())
	require.NoError(t, err)
	gotSMS, err := DecodeSMSSend(task.Payload())
	require.NoError(t, err)
	if diff := cmp.Diff(validSMS(), gotSMS); diff != "" {
		t.Errorf("sms (-want +got):\n%s", diff)
	}

	// Every kind of Twilio sender survives the worker's decoder.
	for _, p := range []SMSSend{
		{V: 1, From: "898211", To: "+12025550123", Body: "hi"},
		{V: 1, From: "Acme Shop", To: "+442079460958", Body: "hi"},
		{V: 1, From: "whatsapp:+12025550100", To: "whatsapp:+12025550123", Body: "hi"},
		{V: 1, MessagingServiceSID: testServiceSID, To: "whatsapp:+12025550123", Body: "hi"},
	} {
		task, err = NewSMSSendTask(p)
		require.NoError(t, err, p.From)
		got, err := DecodeSMSSend(task.Payload())
		require.NoError(t, err, p.From)
		require.Equal(t, p, got)
	}
	// A Messaging Service SID as From, from a producer that bypassed the
	// constructor, is accepted too (the Twilio client sends it as
	// MessagingServiceSid).
	_, err = DecodeSMSSend([]byte(`{"v":1,"from":"` + testServiceSID + `","to":"+12025550123","body":"hi"}`))
	require.NoError(t, err)

	task, err = NewWebhookDeliverTask(validWebhook())
	require.NoError(t, err)
	gotHook, err := DecodeWebhookDeliver(task.Payload())
	require.NoError(t, err)
	if diff := cmp.Diff(validWebhook(), gotHook); diff != "" {
		t.Errorf("webhook (-want +got):\n%s", diff)
	}

	task, err = NewHTTPCallTask(validHTTP())
	require.NoError(t, err)
	gotHTTP, err := DecodeHTTPCall(task.Payload())
	require.NoError(t, err)
	if diff := cmp.Diff(validHTTP(), gotHTTP); diff != "" {
		t.Errorf("http (-want +got):\n%s", diff)
	}
}

func TestDecodeRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		decode  func([]byte) error
		in      string
		wantErr string
	}{
		{"unknown field", decodeWA, `{"v":1,"phone_number_id":"1","to":"+12025550123","text":"hi","foo":1}`, `payload: json: unknown field "foo"`},
		{"version 2", decodeWA, `{"v":2,"phone_number_id":"1","to":"+12025550123","text":"hi"}`, "payload: v: unsupported version 2 (want 1)"},
		{"version 2 with new fields", decodeWA, `{"v":2,"phone_number_id":"1","to":"+12025550123","text":"hi","media":{}}`, "payload: v: unsupported version 2 (want 1)"},
		{"no version", decodeWA, `{"phone_number_id":"1","to":"+12025550123","text":"hi"}`, "payload: v: unsupported version 0 (want 1)"},
		{"invalid number", decodeWA, `{"v":1,"phone_number_id":"1","to":"+1555","text":"hi"}`, `payload: to: "+1555" is not an E.164 phone number`},
		{"unnormalized number", decodeWA, `{"v":1,"phone_number_id":"1","to":"+1 202 555 0123","text":"hi"}`, `payload: to: "+1 202 555 0123" is not an E.164 phone number`},
		{"wrong type", decodeWA, `{"v":1,"phone_number_id":1}`, "payload: json: cannot unmarshal number"},
		{"syntax", decodeWA, `{"v":1,`, "payload: unexpected EOF"},
		{"empty", decodeWA, ``, "payload: empty"},
		{"array", decodeWA, `[]`, "payload: json: cannot unmarshal array"},
		{"trailing data", decodeWA, `{"v":1,"phone_number_id":"1","to":"+12025550123","text":"hi"} {}`, "payload: json: unexpected data after the top-level value"},
		{"sms unknown field", decodeSMS, `{"v":1,"from":"+12025550100","to":"+12025550123","body":"x","media_url":"x"}`, `payload: json: unknown field "media_url"`},
		{"sms invalid from", decodeSMS, `{"v":1,"from":"+1 202 555","to":"+12025550123","body":"x"}`, `payload: from: "+1 202 555" is not an E.164 phone number`},
		{"webhook empty payload", decodeHook, `{"v":1,"url":"https://h.example.com","event_type":"e","payload":null}`, "payload: payload: must be a JSON object or array"},
		{"bad priority", decodeWA, `{"v":1,"phone_number_id":"1","to":"+12025550123","text":"hi","priority":"urgent"}`, `payload: priority: "urgent": want "high" or "bulk"`},
		{"tenant with a control character", decodeSMS, `{"v":1,"from":"+12025550100","to":"+12025550123","body":"x","tenant":"ac\nme"}`, `payload: tenant: "ac\nme" has a control character`},
		{"tenant too long", decodeHook, `{"v":1,"url":"https://h.example.com","event_type":"e","payload":{},"tenant":"` + strings.Repeat("t", 129) + `"}`, "payload: tenant: 129 bytes, want at most 128"},
		{"campaign with a control character", decodeSMS, `{"v":1,"from":"+12025550100","to":"+12025550123","body":"x","campaign":"q4\tpromo"}`, `payload: campaign: "q4\tpromo" has a control character`},
		{"campaign too long", decodeHook, `{"v":1,"url":"https://h.example.com","event_type":"e","payload":{},"campaign":"` + strings.Repeat("c", 129) + `"}`, "payload: campaign: 129 bytes, want at most 128"},
		// What a producer that bypasses the constructors sends is archived
		// by the worker with the same reason the constructor gives.
		{"webhook without key", decodeHook, `{"v":1,"url":"https://h.example.com","event_type":"e","payload":{}}`, "payload: idempotency_key: required for webhooks"},
		{"webhook latin-1 payload", decodeHook, "{\"v\":1,\"url\":\"https://h.example.com\",\"event_type\":\"e\",\"payload\":{\"n\":\"caf\xe9\"},\"idempotency_key\":\"k\"}", "payload: payload: not valid UTF-8"},
		{"template parameter newline", decodeWA, `{"v":1,"phone_number_id":"1","to":"+12025550123","template":{"name":"t","language":"en","parameters":["a\nb"]}}`, "payload: template.parameters[0] ({{1}}): has a newline"},
		{"sms bad sender", decodeSMS, `{"v":1,"from":"Acme-Shop","to":"+12025550123","body":"x"}`, `payload: from: "Acme-Shop" is not a Twilio sender`},
		{"http bad method", decodeHTTP, `{"v":1,"method":"get","url":"https://h.example.com"}`, `payload: method: "get" is not one of`},
		// encoding/json would take these names (it matches case-insensitively);
		// the queue dashboard redacts "url" and "headers" by name, so the
		// worker refuses any spelling but the canonical one.
		{"http upper-case names", decodeHTTP, `{"V":1,"METHOD":"GET","URL":"https://h.example.com","HEADERS":{"Authorization":"Bearer s3cr3t"}}`,
			`payload: json: field "V": want "v" (field names are case-sensitive)`},
		{"http headers in title case", decodeHTTP, `{"v":1,"method":"GET","url":"https://h.example.com","Headers":{"Authorization":"Bearer s3cr3t"}}`,
			`payload: json: field "Headers": want "headers" (field names are case-sensitive)`},
		{"webhook url in upper case", decodeHook, `{"v":1,"URL":"https://h.example.com/T0/B0/s3cr3t","event_type":"e","payload":{},"idempotency_key":"k"}`,
			`payload: json: field "URL": want "url"`},
		{"embedded delivery field", decodeSMS, `{"v":1,"from":"+12025550100","to":"+12025550123","body":"x","Tenant":"acme"}`,
			`payload: json: field "Tenant": want "tenant"`},
		{"nested template field", decodeWA, `{"v":1,"phone_number_id":"1","to":"+12025550123","template":{"Name":"t","language":"en"}}`,
			`payload: json: field "template.Name": want "template.name"`},
		{"kelvin sign", decodeWA, "{\"v\":1,\"phone_number_id\":\"1\",\"to\":\"+12025550123\",\"text\":\"hi\",\"idempotency_\u212aey\":\"k\"}",
			`want "idempotency_key"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.decode([]byte(tc.in))
			require.ErrorIs(t, err, ErrMalformed)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestDecodeErrorUnwrapsCause(t *testing.T) {
	t.Parallel()
	_, err := DecodeWhatsAppSend([]byte(`{"v":1,"to":true}`))
	var typeErr *json.UnmarshalTypeError
	require.True(t, errors.As(err, &typeErr), "errors.As(%v, *json.UnmarshalTypeError)", err)
}

func decodeWA(b []byte) error   { _, err := DecodeWhatsAppSend(b); return err }
func decodeSMS(b []byte) error  { _, err := DecodeSMSSend(b); return err }
func decodeHook(b []byte) error { _, err := DecodeWebhookDeliver(b); return err }
func decodeHTTP(b []byte) error { _, err := DecodeHTTPCall(b); return err }

// FuzzDecodeWhatsAppSend checks that decoding never panics, that every error
// is ErrMalformed, and that an accepted payload survives re-encoding.
func FuzzDecodeWhatsAppSend(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"phone_number_id":"106540352242922","to":"+12025550123","text":"hi"}`,
		`{"v":1,"phone_number_id":"1","to":"+61491570006","template":{"name":"order_update","language":"en_US","parameters":["Ava"]},"idempotency_key":"k"}`,
		`{"v":2}`, `{"v":1,"foo":1}`, `[]`, `null`, ``, `{"v":1,"template":null,"text":""}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodeWhatsAppSend(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		again, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("re-encode accepted payload: %v", err)
		}
		q, err := DecodeWhatsAppSend(again)
		if err != nil {
			t.Fatalf("re-decode %s: %v", again, err)
		}
		if diff := cmp.Diff(p, q); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}
