package tasks

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

func BenchmarkDecodeWhatsAppSend(b *testing.B) {
	p := WhatsAppSend{PhoneNumberID: "106540300010017", To: "+14155550123", Text: "Your order 1234 has shipped and will arrive on Tuesday.",
		Delivery: Delivery{Tenant: "acme", Campaign: "c-2026-11-27"}, IdempotencyKey: "c-2026-11-27:row-000123"}
	p.V = PayloadVersion
	raw, err := json.Marshal(p)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%d bytes: %s", len(raw), raw)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeWhatsAppSend(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// exactNames, the fast check, never passes a payload that checkNames, the
// exact one, refuses: a name it cannot vouch for sends it to checkNames.
func FuzzExactNamesAgreeWithCheckNames(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"phone_number_id":"1","to":"+12025550123","text":"hi"}`,
		`{"v":1,"phone_number_id":"1","to":"+12025550123","template":{"Name":"t","language":"en"}}`,
		`{"v":1,"phone_number_id":"1","to":"+12025550123","template":{"name":"t","language":"en","parameters":["a","to"]}}`,
		"{\"v\":1,\"phone_number_id\":\"1\",\"to\":\"+12025550123\",\"text\":\"hi\",\"idempotency_\u212aey\":\"k\"}",
		`{"v":1,"phone_number_id":"1","\u0074o":"+12025550123","text":"hi"}`,
		`{"v":1,"phone_number_id":"1","to":"+12025550123","text":"a \"to\": b","Text":"x"}`,
		`{"V":1,"METHOD":"GET","URL":"https://h.example.com","HEADERS":{"Authorization":"Bearer s3cr3t"}}`,
		`{"v":1,"method":"GET","url":"https://h.example.com","headers":{"url":"x","URL":"y"}}`,
		`{"v":1,"url":"https://h.example.com","event_type":"e","payload":{"Url":{"V":1}},"idempotency_key":"k"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := []byte(s)
		for _, v := range []any{new(WhatsAppSend), new(SMSSend), new(WebhookDeliver), new(HTTPCall)} {
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields()
			if dec.Decode(v) != nil {
				continue // decodeStrict refuses it before either check
			}
			typ := reflect.TypeOf(v).Elem()
			n := namesOf(typ)
			flat := flatNamesOf(typ, n)
			if flat == nil {
				t.Fatalf("%v: names that differ by case alone: the fast check never runs", typ)
			}
			if exactNames(b, flat) {
				if err := checkNames("", b, n); err != nil {
					t.Fatalf("%v %s: exactNames passed what checkNames refuses: %v", typ, b, err)
				}
			}
		}
	})
}
