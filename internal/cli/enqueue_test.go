package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/producer"
)

// TestEnqueueRefusesWhatProvidersReject: what a worker would archive (a
// webhook without its webhook-id, a payload that is not UTF-8) or the
// provider would refuse for good (Meta 132018, a From Twilio does not
// know) is refused at enqueue with the field named, before Redis is
// reached (the --redis URL points at a closed port).
func TestEnqueueRefusesWhatProvidersReject(t *testing.T) {
	t.Parallel()
	hook := []string{"enqueue", "webhook", "--url", "https://hooks.example.com/h", "--event", "order.updated"}
	wa := []string{"enqueue", "whatsapp", "--phone-number-id", "106540352242922", "--to", "+12025550123", "--template", "order_update"}
	sms := []string{"enqueue", "sms", "--to", "+12025550123", "--body", "hi"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append(hook, "--payload", `{"id":1}`), "idempotency_key: required for webhooks: it is the webhook-id receivers deduplicate by (CLI: --key)"},
		{append(hook, "--payload", "{\"n\":\"caf\xe9\"}", "--key", "evt-1"), "payload: not valid UTF-8 at byte 9"},
		{append(wa, "--param", "Ann", "--param", "line 1\nline 2"), "template.parameters[1] ({{2}}): has a newline at byte 6; WhatsApp rejects new-line and tab characters in parameters (error 132018)"},
		{append(wa, "--param", "a\tb"), "template.parameters[0] ({{1}}): has a tab"},
		{append(wa, "--param", "a     b"), "template.parameters[0] ({{1}}): has more than 4 consecutive spaces"},
		{append(sms, "--from", "Acme-Shop"), `from: "Acme-Shop" is not a Twilio sender`},
		{append(sms, "--from", "whatsapp:+12025550100", "--to", "+1555"), `to: "+1555" is not a valid E.164 phone number`},
	} {
		r := run(t, append(tc.args, "--redis", "redis://127.0.0.1:1")...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: exit %d, want 2 and %q:\n%s", tc.args, r.code, tc.want, r.stderr)
		}
	}
}

// TestEnqueueSMSSenders: short codes, alphanumeric sender IDs, whatsapp:
// senders and a Messaging Service SID given as --from are enqueued, in
// canonical form.
func TestEnqueueSMSSenders(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	insp := asynq.NewInspectorFromRedisClient(srv.Client(t))
	const sid = "MG0123456789abcdef0123456789abcdef"
	want := map[string]string{
		"sc":    `{"v":1,"from":"898211","to":"+12025550123","body":"hi","idempotency_key":"sc"}`,
		"alpha": `{"v":1,"from":"Acme Shop","to":"+12025550123","body":"hi","idempotency_key":"alpha"}`,
		"wa":    `{"v":1,"from":"whatsapp:+12025550100","to":"whatsapp:+12025550123","body":"hi","idempotency_key":"wa"}`,
		"mg":    `{"v":1,"messaging_service_sid":"` + sid + `","to":"+12025550123","body":"hi","idempotency_key":"mg"}`,
	}
	for key, from := range map[string]string{"sc": "898211", "alpha": "Acme Shop", "wa": "whatsapp:+1 202 555 0100", "mg": sid} {
		r := run(t, "enqueue", "sms", "--from", from, "--to", "+12025550123", "--body", "hi", "--key", key, "--redis", srv.URL())
		require.Equal(t, 0, r.code, "--from %q: %s", from, r.stderr)
	}
	for key, payload := range want {
		info, err := insp.GetTaskInfo("sms", key)
		require.NoError(t, err, key)
		var got, exp any
		require.NoError(t, json.Unmarshal(info.Payload, &got))
		require.NoError(t, json.Unmarshal([]byte(payload), &exp))
		require.Equal(t, exp, got, key)
	}
}

// TestSendRejectsTemplateParameterRows: a CSV cell with a line break (valid
// CSV, quoted) cannot fill a template parameter (Meta 132018): its row is
// rejected with its line, the others are built.
func TestSendRejectsTemplateParameterRows(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "params.csv", "to,name\n+12025550101,Ann\n+12025550102,\"Bob\nSmith\"\n+12025550103,Cy     Five\n")
	r := run(t, "send", "--dry-run", "--channel", "whatsapp", "--csv", path, "--phone-number-id", "106540352242922",
		"--template", "order_update", "--params", "name", "--redis", "redis://127.0.0.1:1")
	require.Equal(t, 3, r.code, "some rows rejected:\n%s\n%s", r.stdout, r.stderr)
	require.Contains(t, r.stderr, path+":3: template.parameters[0] ({{1}}): has a newline")
	require.Contains(t, r.stderr, path+":5: template.parameters[0] ({{1}}): has more than 4 consecutive spaces")
	require.Contains(t, r.stdout, "3 rows: 1 would be enqueued, 2 rejected (dry run: nothing was enqueued)")
}

// A channel's configured queue is where the CLI enqueues: the workers serve
// that queue, not the channel's default name.
func TestEnqueueUsesTheChannelsQueue(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cfg := writeFile(t, "sluice.yaml", "channels:\n  sms:\n    queue: texts\n")
	r := run(t, "--config", cfg, "enqueue", "sms", "--from", "+12025550100", "--to", "+12025550123", "--body", "hi", "--key", "q-1", "--redis", srv.URL())
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "queue=texts")
	info, err := asynq.NewInspectorFromRedisClient(srv.Client(t)).GetTaskInfo("texts", "q-1")
	require.NoError(t, err)
	require.Equal(t, "sms:send", info.Type)
}

// A channel the configuration disables is refused by enqueue and send, as
// the API refuses it (422), before Redis is reached: no worker with this
// configuration would send it, and one with another configuration must not.
func TestEnqueueAndSendRefuseADisabledChannel(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, "nosms.yaml", "channels:\n  sms:\n    enabled: false\n")
	csv := writeFile(t, "c.csv", "to,name\n+12025550123,Ann\n")
	for _, args := range [][]string{
		{"enqueue", "sms", "--from", "+12025550100", "--to", "+12025550123", "--body", "hi"},
		{"send", "--channel", "sms", "--csv", csv, "--from", "+12025550100", "--body", "hi {name}"},
	} {
		r := run(t, append([]string{"--config", cfg, "--redis", "redis://127.0.0.1:1"}, args...)...)
		require.Equal(t, 2, r.code, "%q", args)
		require.Contains(t, r.stderr, "channel: sms is disabled in this configuration (channels.sms.enabled)")
	}
}

// A body template that names a column the file lacks is one error (exit
// 2) before any row is read into a task, not the same reject once per row.
func TestSendTemplateTypoIsOneError(t *testing.T) {
	t.Parallel()
	rows := "to,name\n"
	for i := range 5 {
		rows += fmt.Sprintf("+120255501%02d,Ann\n", 10+i)
	}
	csv := writeFile(t, "c.csv", rows)
	srv := redistest.Start(t)
	r := run(t, "send", "--channel", "sms", "--csv", csv, "--from", "+12025550100", "--body", "Hi {nme}", "--redis", srv.URL(), "--log-level", "warn")
	require.Equal(t, 2, r.code)
	require.Equal(t, "sluice: --body: template: unknown column \"nme\" (have: name, to)\n", r.stderr)
	require.NoFileExists(t, strings.TrimSuffix(csv, ".csv")+".rejects.csv")
}

// A tenant's idempotency key names one task whichever way it is sent:
// `sluice enqueue --tenant` and the HTTP API both go through the producer,
// which puts the tenant's namespace before the key. The API answers the
// CLI's send as its own (a duplicate, 200, the same ID), and GET
// /v1/tasks/{key} with the tenant's API key finds it by the key it sent.
func TestTenantKeyNamesOneTaskFromTheCLIAndTheAPI(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	r := run(t, "enqueue", "sms", "--from", "+12025550100", "--to", "+12025550123", "--body", "hi", "--key", "order-1", "--tenant", "acme", "--redis", srv.URL())
	require.Equal(t, 0, r.code, r.stderr)
	id := producer.TenantNamespace("acme") + "order-1"
	require.Contains(t, r.stdout, "id="+id)

	const acmeKey = "acme-00123456789abcdef0123456789"
	keys, err := api.ParseKeys(acmeKey + ":acme")
	require.NoError(t, err)
	h, err := api.New(api.Options{Config: config.Default(), Redis: srv.Client(t), Keys: keys})
	require.NoError(t, err)
	do := func(method, path, body string) (int, api.Accepted) {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+acmeKey)
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		var a api.Accepted
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &a), w.Body.String())
		return w.Code, a
	}
	code, a := do("POST", "/v1/messages", `{"channel":"sms","from":"+12025550100","to":"+12025550123","body":"hi","idempotency_key":"order-1"}`)
	require.Equal(t, http.StatusOK, code, "the CLI's task is the API's: a duplicate")
	require.True(t, a.Duplicate)
	require.Equal(t, id, a.ID)
	code, a = do("GET", "/v1/tasks/order-1", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, id, a.ID)

	r = run(t, "enqueue", "sms", "--from", "+12025550100", "--to", "+12025550123", "--body", "hi", "--key", "order-1", "--tenant", "acme", "--redis", srv.URL())
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "already enqueued")
}

// WhatsApp media messages from the CLI reach the provider: `sluice send`
// builds each row's image from its media_url and caption cells (a row whose
// link is not http(s) is rejected with its line, as Meta would refuse it),
// `sluice enqueue` a document that replies to a message; a worker sends
// them to the emulator, which checks each media object on its own. A
// caption on audio is refused at enqueue with the field named.
func TestWhatsAppMediaFromTheCLI(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	emu := startWorker(t, srv.Client(t), nil)
	path := writeFile(t, "media.csv", "to,name,media_url\n"+
		"+12025550101,Ann,https://cdn.example.com/p/1.jpg\n"+
		"+12025550102,Bob,ftp://cdn.example.com/p/2.jpg\n"+
		"+12025550103,Cy,https://cdn.example.com/p/3.jpg\n")
	r := run(t, "send", "--channel", "whatsapp", "--csv", path, "--phone-number-id", "106540352242922",
		"--media", "image", "--media-url", "{media_url}", "--caption", "Hi {name}, your order", "--redis", srv.URL())
	require.Equal(t, 3, r.code, "a row rejected:\n%s\n%s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, path+": 3 rows: 2 enqueued, 0 already enqueued, 1 rejected")
	require.Contains(t, r.stderr, path+`:3: media.link: "ftp://cdn.example.com/p/2.jpg" must be an absolute http or https URL`)

	r = run(t, "enqueue", "whatsapp", "--phone-number-id", "106540352242922", "--to", "+12025550104",
		"--media", "document", "--media-url", "https://cdn.example.com/i/1042.pdf", "--caption", "Invoice 1042",
		"--filename", "invoice-1042.pdf", "--reply-to", "wamid.HBgLMTIwMjU1NTAxMDQVAgARGBI", "--key", "inv-1042", "--redis", srv.URL())
	require.Equal(t, 0, r.code, r.stderr)

	r = run(t, "enqueue", "whatsapp", "--phone-number-id", "106540352242922", "--to", "+12025550105",
		"--media", "audio", "--media-id", "1166846181421424", "--caption", "listen", "--redis", srv.URL())
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "media.caption: audio messages have no caption")

	got := kindsByRecipient(t, emu, 3)
	require.Equal(t, map[string]string{"+12025550101": "image", "+12025550103": "image", "+12025550104": "document"}, got)
}

// Twilio MMS and Content Templates from the CLI reach the provider:
// `sluice enqueue sms` an MMS of two images with a validity period,
// `sluice send` a Content Template whose variables come from each row's
// cells; a worker sends them to the emulator, which checks MediaUrl,
// ContentSid and ContentVariables on its own. Eleven media URLs, or a
// variable without a template, are refused at enqueue with the field
// named.
func TestTwilioMMSAndContentFromTheCLI(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	emu := startWorker(t, srv.Client(t), nil)
	const hx = "HX0123456789abcdef0123456789abcdef"
	r := run(t, "enqueue", "sms", "--from", "+12025550100", "--to", "+12025550111", "--body", "Your photos",
		"--media-url", "https://cdn.example.com/1.jpg", "--media-url", "https://cdn.example.com/2.png",
		"--validity-period", "10m", "--key", "mms-1", "--redis", srv.URL())
	require.Equal(t, 0, r.code, r.stderr)
	info, err := asynq.NewInspectorFromRedisClient(srv.Client(t)).GetTaskInfo("sms", "mms-1")
	require.NoError(t, err)
	require.JSONEq(t, `{"v":1,"from":"+12025550100","to":"+12025550111","body":"Your photos","media_urls":["https://cdn.example.com/1.jpg","https://cdn.example.com/2.png"],"validity_period":600,"idempotency_key":"mms-1"}`, string(info.Payload))

	path := writeFile(t, "content.csv", "to,name,order_id\n+12025550112,Ann,1042\n+12025550113,Bob,1043\n")
	r = run(t, "send", "--channel", "sms", "--csv", path, "--from", "+12025550101", "--content-sid", hx,
		"--var", "1={name}", "--var", "2={order_id}", "--redis", srv.URL())
	require.Equal(t, 0, r.code, "%s\n%s", r.stdout, r.stderr)

	var eleven []string
	for i := range 11 {
		eleven = append(eleven, "--media-url", fmt.Sprintf("https://cdn.example.com/%d.jpg", i))
	}
	r = run(t, append([]string{"enqueue", "sms", "--from", "+12025550100", "--to", "+12025550114", "--redis", srv.URL()}, eleven...)...)
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "media_urls: 11 URLs, want at most 10 (Twilio MediaUrl)")
	r = run(t, "enqueue", "sms", "--from", "+12025550100", "--to", "+12025550115", "--body", "hi", "--var", "1=Ann", "--redis", srv.URL())
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "content_variables: only with content_sid")

	got := kindsByRecipient(t, emu, 3)
	require.Equal(t, map[string]string{"+12025550111": "mms", "+12025550112": "content", "+12025550113": "content"}, got)
}

// Template headers and buttons from the CLI reach the provider: `sluice
// send` fills each row's image header and quick-reply payload from its
// cells (a media ID cell is sent as an id), `sluice enqueue` a text header
// and a copy-code button; the emulator checks each component. Three URL
// buttons, or a coupon code over 15 characters, are refused at enqueue.
func TestTemplateComponentsFromTheCLI(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	emu := startWorker(t, srv.Client(t), nil)
	path := writeFile(t, "promo.csv", "to,name,header_image,button_payload\n"+
		"+12025550121,Ann,https://cdn.example.com/h/1.jpg,STOP-ANN\n"+
		"+12025550122,Bob,1166846181421424,STOP-BOB\n")
	r := run(t, "send", "--channel", "whatsapp", "--csv", path, "--phone-number-id", "106540352242922",
		"--template", "spring_promo", "--params", "name", "--header-image", "{header_image}", "--button", "quick_reply:0={button_payload}", "--redis", srv.URL())
	require.Equal(t, 0, r.code, "%s\n%s", r.stdout, r.stderr)

	r = run(t, "enqueue", "whatsapp", "--phone-number-id", "106540352242922", "--to", "+12025550123", "--template", "coupon",
		"--header-text", "Ann", "--param", "10%", "--button", "copy_code:0=SAVE10", "--key", "coupon-ann", "--redis", srv.URL())
	require.Equal(t, 0, r.code, r.stderr)
	info, err := asynq.NewInspectorFromRedisClient(srv.Client(t)).GetTaskInfo("whatsapp", "coupon-ann")
	require.NoError(t, err)
	require.JSONEq(t, `{"v":1,"phone_number_id":"106540352242922","to":"+12025550123","template":{"name":"coupon","language":"en_US","parameters":["10%"],"header":{"type":"text","text":"Ann"},"buttons":[{"index":0,"sub_type":"copy_code","coupon_code":"SAVE10"}]},"idempotency_key":"coupon-ann"}`, string(info.Payload))

	wa := []string{"enqueue", "whatsapp", "--phone-number-id", "106540352242922", "--to", "+12025550124", "--template", "t", "--redis", srv.URL()}
	r = run(t, append(wa, "--button", "url:0=a", "--button", "url:1=b", "--button", "url:2=c")...)
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "template.buttons: 3 url buttons, want at most 2")
	r = run(t, append(wa, "--button", "copy_code:0=SUMMER-SALE-2026")...)
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "template.buttons[0].coupon_code: 16 characters, want at most 15")

	got := kindsByRecipient(t, emu, 3)
	require.Equal(t, map[string]string{"+12025550121": "template", "+12025550122": "template", "+12025550123": "template"}, got)
}

// Interactive, location, contacts and reaction messages from `sluice
// enqueue` reach the emulator, each with its kind.
func TestOtherWhatsAppKindsFromTheCLI(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	emu := startWorker(t, srv.Client(t), nil)
	list := writeFile(t, "list.json", `{"type":"list","body":"Pick a slot","list_button":"Slots",
		"rows":[{"section":"Mon","id":"m8","title":"08:00"},{"section":"Tue","id":"t8","title":"08:00"}]}`)
	wa := func(to string, args ...string) {
		t.Helper()
		r := run(t, append([]string{"enqueue", "whatsapp", "--phone-number-id", "106540352242922", "--to", to, "--redis", srv.URL()}, args...)...)
		require.Equal(t, 0, r.code, "%v: %s", args, r.stderr)
	}
	wa("+12025550151", "--interactive", `{"type":"button","body":"Arrived?","buttons":[{"id":"yes","title":"Yes"},{"id":"no","title":"Not yet"}]}`)
	wa("+12025550152", "--interactive", "@"+list)
	wa("+12025550153", "--interactive", `{"type":"cta_url","body":"Track it","display_text":"Track","url":"https://example.com/t/1"}`)
	wa("+12025550154", "--location", "37.4847,-122.1486", "--location-name", "Meta HQ")
	wa("+12025550155", "--contacts", `[{"name":{"formatted_name":"Ann Lee","first_name":"Ann"},"phones":[{"phone":"+1 202 555 0199"}]}]`)
	wa("+12025550156", "--react-to", "wamid.HBgLMTIwMjU1NTAxNTYVAgARGBI", "--emoji", "👍")

	r := run(t, "enqueue", "whatsapp", "--phone-number-id", "106540352242922", "--to", "+12025550158",
		"--interactive", `{"type":"cta_url","body":"b","display_text":"Go","url":"https://example.com"}}`, "--redis", srv.URL())
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "--interactive: data after the JSON value")
	r = run(t, "enqueue", "whatsapp", "--phone-number-id", "106540352242922", "--to", "+12025550157", "--location", "91,0", "--redis", srv.URL())
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "location.latitude: 91, want -90 to 90 degrees")

	got := kindsByRecipient(t, emu, 6)
	require.Equal(t, map[string]string{"+12025550151": "interactive", "+12025550152": "interactive", "+12025550153": "interactive",
		"+12025550154": "location", "+12025550155": "contacts", "+12025550156": "reaction"}, got)
}

// --send-at holds a send until then: the emulator gets it no earlier, and
// a worker sends it then as any other (it is planned when it comes due).
func TestSendAtHoldsTheSend(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	emu := startWorker(t, srv.Client(t), nil)
	at := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
	r := run(t, "enqueue", "sms", "--from", "+12025550100", "--to", "+12025550161", "--body", "Your appointment is at 9",
		"--send-at", at.Format(time.RFC3339), "--key", "appt-1", "--redis", srv.URL())
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "eta="+at.UTC().Format(time.RFC3339Nano))
	kindsByRecipient(t, emu, 1)
	rec := emu.Records()[0]
	require.False(t, rec.At.Before(at), "sent at %v, held until %v", rec.At, at)

	r = run(t, "enqueue", "sms", "--from", "+12025550100", "--to", "+12025550162", "--body", "x", "--send-at", "tomorrow", "--redis", srv.URL())
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, `--send-at "tomorrow": want RFC 3339`)
}
