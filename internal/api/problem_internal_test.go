package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFieldErrors(t *testing.T) {
	t.Parallel()
	known := whatsAppKind.known
	for name, k := range map[string]*kind{"sms": smsKind, "webhook": webhookKind, "http": callKind} {
		for f := range k.known {
			if name != "webhook" && f == "payload" {
				continue
			}
			known = mapWith(known, f)
		}
	}
	for _, tc := range []struct {
		msg  string
		want []string
	}{
		{`to: "+1555" is not a valid E.164 phone number`, []string{"/items/2/to"}},
		{`text, template: set exactly one (got both)`, []string{"/items/2/text", "/items/2/template"}},
		{`template.parameters[1] ({{2}}): has a tab at byte 3; WhatsApp rejects ...`, []string{"/items/2/template/parameters/1"}},
		{`template.name: required`, []string{"/items/2/template/name"}},
		{`headers["X-A/b~c"]: value contains CR, LF or NUL`, []string{"/items/2/headers/X-A~1b~0c"}},
		{`headers: "a b" is not a valid header name`, []string{"/items/2/headers"}},
		{`from (after whatsapp:): "+1" is not a valid E.164 phone number`, []string{"/items/2/from"}},
		{`url https://10.0.0.1: egress: 10.0.0.1 is in a private range`, []string{"/items/2/url"}},
		{`payload: 9 bytes encoded, over channels.webhook.max_payload_bytes (8)`, []string{"/items/2/payload"}},
		{`nosuchfield: whatever`, []string{"/items/2"}},
		{`enqueue whatsapp:send: redis down`, []string{"/items/2"}},
		{``, []string{"/items/2"}},
		{`to`, []string{"/items/2"}},
		{`headers["unterminated: x`, []string{"/items/2"}},
		{`template.parameters[x]: y`, []string{"/items/2"}},
	} {
		got := fieldErrors("/items/2", tc.msg, known)
		var ptrs []string
		for _, e := range got {
			ptrs = append(ptrs, e.Pointer)
			if e.Detail != tc.msg {
				t.Errorf("%q: detail %q", tc.msg, e.Detail)
			}
		}
		if d := cmp.Diff(tc.want, ptrs); d != "" {
			t.Errorf("%q: pointers (-want +got):\n%s", tc.msg, d)
		}
	}
	// A type without a payload field: the payload size error is the item's.
	if got := fieldErrors("", "payload: 70000 bytes encoded, want at most 65536 for whatsapp:send", whatsAppKind.known); got[0].Pointer != "" {
		t.Errorf("whatsapp payload size: pointer %q, want the whole item", got[0].Pointer)
	}
}

func mapWith(m map[string]bool, k string) map[string]bool {
	out := map[string]bool{k: true}
	for x := range m {
		out[x] = true
	}
	return out
}

func FuzzFieldErrors(f *testing.F) {
	for _, s := range []string{`to: x`, `a, b: c`, `headers["x"]: y`, `t.p[1] (x): y`, `[`, `a[`, `a["\`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		errs := fieldErrors("/items/0", msg, callKind.known)
		if len(errs) == 0 {
			t.Fatal("no field error")
		}
		for _, e := range errs {
			if !strings.HasPrefix(e.Pointer, "/items/0") || e.Detail != msg {
				t.Fatalf("%q: %+v", msg, e)
			}
		}
	})
}

func TestShape(t *testing.T) {
	t.Parallel()
	got := whatsAppKind.shape
	for _, name := range []string{"channel", "priority", "tenant", "phone_number_id", "to", "text", "template", "idempotency_key"} {
		if _, ok := got[name]; !ok {
			t.Errorf("whatsapp shape lacks %q", name)
		}
	}
	if _, ok := got["v"]; ok {
		t.Error(`whatsapp shape has "v": the API sets it`)
	}
	loc := shape{"latitude": nil, "longitude": nil, "name": nil, "address": nil}
	want := shape{"name": nil, "language": nil, "parameters": nil, "body_params": nil, "buttons": nil,
		"header": shape{"type": nil, "text": nil, "link": nil, "id": nil, "filename": nil, "location": loc}}
	if d := cmp.Diff(want, got["template"]); d != "" {
		t.Errorf("template shape (-want +got):\n%s", d)
	}
	if _, ok := webhookKind.shape["channel"]; ok {
		t.Error("webhook shape has channel")
	}
}

func TestUnknownFieldsAreBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"to":"+12025550123"`)
	for i := range 5000 {
		fmt.Fprintf(&b, `,"made-up-%d":0`, i)
	}
	b.WriteString(`,"` + strings.Repeat("n", 100000) + `":0}`)
	errs := unknownFields("", json.RawMessage(b.String()), shape{"to": nil})
	if len(errs) != maxUnknownFields {
		t.Fatalf("%d field errors for 5,001 unknown members, want %d", len(errs), maxUnknownFields)
	}
	long := unknownFields("", json.RawMessage(`{"`+strings.Repeat("n", 100000)+`":0}`), shape{})
	if len(long) != 1 || len(long[0].Pointer) > 80 || len(long[0].Detail) > 80 {
		t.Fatalf("a 100,000-byte name gave %+v", long)
	}
}
