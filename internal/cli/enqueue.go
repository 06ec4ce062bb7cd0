package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/producer"
	"github.com/sluice-dev/sluice/tasks"
)

func newEnqueueCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "enqueue whatsapp|sms|webhook|call",
		Short: "Enqueue one send (validated now, sent by a worker)",
		Long: `enqueue validates one send and puts it on its channel's queue, as the HTTP API
and send do (one producer). With --key, the idempotency key becomes the task
ID (with --tenant, after the tenant's namespace, as the API gives it:
"t-…:KEY"): enqueuing the same key again is refused and never sends twice
(completed tasks keep their ID for 24 h).`,
	}
	var key, priority, tenant, sendAt string
	var maxRetry int
	// enqueue sends the task build gives through the producer: a send it
	// refuses (its payload, its key, a disabled channel, its size, its
	// target) is a usage error before Redis is reached.
	enqueue := func(cmd *cobra.Command, build func() (*asynq.Task, error)) error {
		t, err := build()
		if err != nil {
			return usageErr("%v", err)
		}
		cfg, err := g.loadConfig()
		if err != nil {
			return err
		}
		items := []producer.Item{{Task: t, MaxRetry: max(maxRetry, 0)}}
		check, err := app.NewProducer(cfg, nil, nil, nil)
		if err != nil {
			return err
		}
		if err := check.Check(items)[0].Err; err != nil {
			return usageErr("%v", err)
		}
		rdb, err := g.connectRedis(cmd.Context(), cfg)
		if err != nil {
			return err
		}
		defer rdb.Close()
		prod, err := app.NewProducer(cfg, rdb, app.NewLimiter(cfg, rdb, nil), nil)
		if err != nil {
			return err
		}
		out, err := prod.Send(cmd.Context(), items)
		if err != nil {
			return err
		}
		r := out[0]
		switch {
		case errors.Is(r.Err, tasks.ErrDuplicate):
			fmt.Fprintf(g.stdout, "already enqueued: key %q, id %s (not sent again)\n", key, r.ID)
			return nil
		case errors.Is(r.Err, producer.ErrInvalid):
			return usageErr("%v", r.Err)
		case r.Err != nil:
			return r.Err
		}
		fmt.Fprintf(g.stdout, "enqueued %s id=%s queue=%s eta=%s (%s)\n", r.Info.Type, r.Info.ID, r.Info.Queue, r.ETA.Format(time.RFC3339Nano), eta(r.ETA))
		return nil
	}
	addCommon := func(c *cobra.Command) {
		help := "idempotency key (becomes the task ID)"
		if c.Name() == "webhook" {
			help = "idempotency key (becomes the task ID); required: it is the webhook-id receivers deduplicate by"
		}
		c.Flags().StringVar(&key, "key", "", help)
		c.Flags().IntVar(&maxRetry, "max-retry", 0, "most failed attempts (provider throttles, transient failures; Sluice's own limits never spend one); default worker.max_retry (100)")
		c.Flags().StringVar(&priority, "priority", "", "high: overtake planned bulk sends on the same limits (sent within the hold, 2s)")
		c.Flags().StringVar(&tenant, "tenant", "", "who the send is for: tenants backlogged on one limit share it by channels.*.tenant_weights")
		c.Flags().StringVar(&sendAt, "send-at", "", "hold the send until then (RFC 3339, 2026-12-01T09:00:00+01:00; at most 35 days ahead); it is planned among the others then")
	}

	var wa tasks.WhatsAppSend
	var tmpl tasks.Template
	var media tasks.Media
	var tmplParts templateFlags
	var interactiveJSON, contactsJSON, location, reactTo, emoji string
	var locName, locAddress string
	waCmd := &cobra.Command{
		Use: "whatsapp --phone-number-id ID --to E164 (--text T [--preview-url] | --template NAME [--param P]... |\n" +
			"  --media image|video|audio|document|sticker (--media-url URL | --media-id ID) [--caption T] [--filename F] |\n" +
			"  --interactive JSON|@FILE | --location LAT,LNG | --contacts JSON|@FILE | --react-to WAMID --emoji E) [--reply-to WAMID]",
		Short: "A WhatsApp Cloud API message: text, template or media",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return enqueue(cmd, func() (*asynq.Task, error) {
				if tmpl.Name != "" {
					if err := tmplParts.apply(&tmpl, nil); err != nil {
						return nil, err
					}
					wa.Template = &tmpl
				} else if tmplParts.given() {
					return nil, usageErr("--header-*, --button: give --template")
				}
				if media != (tasks.Media{}) {
					wa.Media = &media
				}
				if interactiveJSON != "" {
					in, err := readInteractive(interactiveJSON)
					if err != nil {
						return nil, err
					}
					wa.Interactive = in
				}
				if contactsJSON != "" {
					if err := readJSONFlag("--contacts", contactsJSON, &wa.Contacts); err != nil {
						return nil, err
					}
				}
				if location != "" {
					lat, lng, ok := strings.Cut(location, ",")
					la, err1 := strconv.ParseFloat(strings.TrimSpace(lat), 64)
					lo, err2 := strconv.ParseFloat(strings.TrimSpace(lng), 64)
					if !ok || err1 != nil || err2 != nil {
						return nil, usageErr("--location %q: want LATITUDE,LONGITUDE in degrees (37.4847,-122.1486)", location)
					}
					wa.Location = &tasks.Location{Latitude: la, Longitude: lo, Name: locName, Address: locAddress}
				} else if locName+locAddress != "" {
					return nil, usageErr("--location-name, --location-address: give --location")
				}
				if reactTo != "" || cmd.Flags().Changed("emoji") {
					wa.Reaction = &tasks.Reaction{MessageID: reactTo, Emoji: emoji}
				}
				wa.IdempotencyKey, wa.Priority, wa.Tenant = key, priority, tenant
				if err := parseSendAt(sendAt, &wa.SendAt); err != nil {
					return nil, err
				}
				return tasks.NewWhatsAppSendTask(wa)
			})
		},
	}
	waCmd.Flags().StringVar(&wa.PhoneNumberID, "phone-number-id", "", "sender's phone number ID")
	waCmd.Flags().StringVar(&wa.To, "to", "", "recipient, E.164")
	waCmd.Flags().StringVar(&wa.Text, "text", "", "free-form text")
	waCmd.Flags().StringVar(&tmpl.Name, "template", "", "template name")
	waCmd.Flags().StringVar(&tmpl.Language, "lang", "en_US", "template language code")
	waCmd.Flags().StringArrayVar(&tmpl.Parameters, "param", nil, "template body parameter, in order (repeat)")
	tmplParts.register(waCmd, "")
	waCmd.Flags().StringVar(&contactsJSON, "contacts", "", `contact cards as a JSON array, or @FILE: [{"name":{"formatted_name":"Ann Lee","first_name":"Ann"},"phones":[{"phone":"+1 202 555 0199"}]}]`)
	waCmd.Flags().StringVar(&location, "location", "", "a location message: LATITUDE,LONGITUDE in degrees")
	waCmd.Flags().StringVar(&locName, "location-name", "", "the location's name")
	waCmd.Flags().StringVar(&locAddress, "location-address", "", "the location's address")
	waCmd.Flags().StringVar(&reactTo, "react-to", "", "a reaction: the WhatsApp message ID (wamid.…) reacted to, with --emoji")
	waCmd.Flags().StringVar(&emoji, "emoji", "", `the reaction's emoji ("" removes an earlier reaction)`)
	waCmd.Flags().StringVar(&interactiveJSON, "interactive", "", `an interactive message as JSON, or @FILE: {"type":"button","body":"…","buttons":[{"id":"yes","title":"Yes"}]} (docs/whatsapp.md)`)
	waCmd.Flags().StringVar(&media.Type, "media", "", "media message type: image, video, audio, document or sticker")
	waCmd.Flags().StringVar(&media.Link, "media-url", "", "the media's http(s) URL (Meta downloads it)")
	waCmd.Flags().StringVar(&media.ID, "media-id", "", "an uploaded media's ID, instead of --media-url")
	waCmd.Flags().StringVar(&media.Caption, "caption", "", "caption of an image, video or document (at most 1,024 characters)")
	waCmd.Flags().StringVar(&media.Filename, "filename", "", "a document's file name as the recipient sees it")
	waCmd.Flags().BoolVar(&wa.PreviewURL, "preview-url", false, "render a preview of the first URL in --text")
	waCmd.Flags().StringVar(&wa.ReplyTo, "reply-to", "", "the WhatsApp message ID (wamid.…) this message replies to")
	addCommon(waCmd)

	var sms tasks.SMSSend
	var smsVars []string
	var smsValidity time.Duration
	smsCmd := &cobra.Command{
		Use: "sms (--from SENDER | --messaging-service MG…) --to E164 (--body TEXT [--media-url URL]... |\n" +
			"  --content-sid HX… [--var NAME=VALUE]...) [--validity-period D]",
		Short: "A Twilio SMS, MMS or Content Template message",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			vars, err := contentVars("--var", smsVars)
			if err != nil {
				return err
			}
			sms.ContentVariables = vars
			if sms.ValidityPeriod, err = validitySeconds(smsValidity); err != nil {
				return err
			}
			return enqueue(cmd, func() (*asynq.Task, error) {
				sms.IdempotencyKey, sms.Priority, sms.Tenant = key, priority, tenant
				if err := parseSendAt(sendAt, &sms.SendAt); err != nil {
					return nil, err
				}
				return tasks.NewSMSSendTask(sms)
			})
		},
	}
	smsCmd.Flags().StringVar(&sms.From, "from", "", "sender: E.164 number, short code, alphanumeric sender ID, whatsapp:+E164 or a Messaging Service SID (MG…)")
	smsCmd.Flags().StringVar(&sms.MessagingServiceSID, "messaging-service", "", "Messaging Service SID")
	smsCmd.Flags().StringVar(&sms.To, "to", "", "recipient, E.164 (whatsapp:+E164 for a whatsapp: sender)")
	smsCmd.Flags().StringVar(&sms.Body, "body", "", "message text")
	smsCmd.Flags().StringArrayVar(&sms.MediaURLs, "media-url", nil, "an MMS: a media URL Twilio fetches (repeat, at most 10; one for a whatsapp: sender)")
	smsCmd.Flags().StringVar(&sms.ContentSID, "content-sid", "", "a Content Template's SID (HX…), instead of --body and --media-url")
	smsCmd.Flags().StringArrayVar(&smsVars, "var", nil, "a Content Template variable, NAME=VALUE (repeat)")
	smsCmd.Flags().DurationVar(&smsValidity, "validity-period", 0, "how long Twilio may keep the message queued before dropping it (1s to 10h; default Twilio's 10h)")
	addCommon(smsCmd)

	var hook tasks.WebhookDeliver
	var hookPayload string
	hookCmd := &cobra.Command{
		Use:   "webhook --url URL --event TYPE --payload JSON --key ID",
		Short: "A signed webhook delivery (Standard Webhooks)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return enqueue(cmd, func() (*asynq.Task, error) {
				hook.IdempotencyKey, hook.Priority, hook.Tenant = key, priority, tenant
				if err := parseSendAt(sendAt, &hook.SendAt); err != nil {
					return nil, err
				}
				hook.Payload = json.RawMessage(hookPayload)
				return tasks.NewWebhookDeliverTask(hook)
			})
		},
	}
	hookCmd.Flags().StringVar(&hook.URL, "url", "", "endpoint URL")
	hookCmd.Flags().StringVar(&hook.EventType, "event", "", "event type, e.g. order.updated")
	hookCmd.Flags().StringVar(&hookPayload, "payload", "", "event data, JSON")
	hookCmd.Flags().StringVar(&hook.Endpoint, "endpoint", "", "endpoint name: selects its signing secrets (channels.webhook.endpoints)")
	addCommon(hookCmd)

	var call tasks.HTTPCall
	var headers []string
	callCmd := &cobra.Command{
		Use:   "call --method M --url URL [--header 'K: V']... [--body B]",
		Short: "A request to a third-party HTTP API",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return enqueue(cmd, func() (*asynq.Task, error) {
				call.IdempotencyKey, call.Priority, call.Tenant = key, priority, tenant
				if err := parseSendAt(sendAt, &call.SendAt); err != nil {
					return nil, err
				}
				call.Headers = map[string]string{}
				for _, h := range headers {
					k, v, ok := strings.Cut(h, ":")
					if !ok {
						return nil, fmt.Errorf("--header %q: want 'Name: value'", h)
					}
					call.Headers[strings.TrimSpace(k)] = strings.TrimSpace(v)
				}
				return tasks.NewHTTPCallTask(call)
			})
		},
	}
	callCmd.Flags().StringVar(&call.Method, "method", "POST", "HTTP method")
	callCmd.Flags().StringVar(&call.URL, "url", "", "absolute http(s) URL")
	callCmd.Flags().StringArrayVar(&headers, "header", nil, "request header 'Name: value' (repeat)")
	callCmd.Flags().StringVar(&call.Body, "body", "", "request body")
	addCommon(callCmd)

	cmd.AddCommand(waCmd, smsCmd, hookCmd, callCmd)
	return cmd
}

// contentVars reads NAME=VALUE pairs of a flag into a Content Template's
// variables; nil for none. The error names the flag.
func contentVars(flag string, pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		name, value, ok := strings.Cut(p, "=")
		if !ok || name == "" {
			return nil, usageErr("%s %q: want NAME=VALUE", flag, p)
		}
		if _, dup := out[name]; dup {
			return nil, usageErr("%s: variable %q given twice", flag, name)
		}
		out[name] = value
	}
	return out, nil
}

// validitySeconds turns --validity-period into Twilio's whole seconds; 0
// for none. The range (1 to 36,000) is the payload's to check.
func validitySeconds(d time.Duration) (int, error) {
	if d%time.Second != 0 {
		return 0, usageErr("--validity-period %v: want whole seconds (Twilio counts in seconds)", d)
	}
	return int(d / time.Second), nil
}

// templateFlags are the flags that fill a template's header and buttons:
// --header-text, --header-image, --header-video, --header-document (a URL,
// or a media ID when all digits) and --button SUBTYPE:INDEX=VALUE
// (quick_reply:0=STOP, url:1=o/1042, copy_code:2=SAVE10). `sluice send`
// renders each value's {column} placeholders per row.
type templateFlags struct {
	headerText, headerImage, headerVideo, headerDocument string
	buttons                                              []string
}

// register adds the flags to cmd; hint ends their help.
func (f *templateFlags) register(cmd *cobra.Command, hint string) {
	fl := cmd.Flags()
	fl.StringVar(&f.headerText, "header-text", "", "template: the text header's {{1}}"+hint)
	fl.StringVar(&f.headerImage, "header-image", "", "template: the image header, a URL or a media ID"+hint)
	fl.StringVar(&f.headerVideo, "header-video", "", "template: the video header, a URL or a media ID"+hint)
	fl.StringVar(&f.headerDocument, "header-document", "", "template: the document header, a URL or a media ID"+hint)
	fl.StringArrayVar(&f.buttons, "button", nil, "template: a button's value, SUBTYPE:INDEX=VALUE with SUBTYPE quick_reply, url or copy_code (repeat)"+hint)
}

// given reports whether any of the flags was set.
func (f *templateFlags) given() bool {
	return f.headerText+f.headerImage+f.headerVideo+f.headerDocument != "" || len(f.buttons) > 0
}

// apply sets t's header and buttons from the flags, each value passed
// through render first (nil: as given). The error names the flag.
func (f *templateFlags) apply(t *tasks.Template, render func(string) (string, error)) error {
	if render == nil {
		render = func(s string) (string, error) { return s, nil }
	}
	n := 0
	for _, h := range []struct{ typ, v string }{{"text", f.headerText}, {"image", f.headerImage}, {"video", f.headerVideo}, {"document", f.headerDocument}} {
		if h.v == "" {
			continue
		}
		n++
		v, err := render(h.v)
		if err != nil {
			return usageErr("--header-%s: %v", h.typ, err)
		}
		hd := &tasks.TemplateHeader{Type: h.typ}
		switch {
		case h.typ == "text":
			hd.Text = v
		case v != "" && strings.Trim(v, "0123456789") == "":
			hd.ID = v
		default:
			hd.Link = v
		}
		t.Header = hd
	}
	if n > 1 {
		return usageErr("--header-text, --header-image, --header-video, --header-document: give one")
	}
	t.Buttons = nil
	for _, b := range f.buttons {
		spec, value, ok := strings.Cut(b, "=")
		sub, idx, ok2 := strings.Cut(spec, ":")
		i, err := strconv.Atoi(idx)
		if !ok || !ok2 || err != nil {
			return usageErr("--button %q: want SUBTYPE:INDEX=VALUE (quick_reply:0=STOP, url:1=o/1042, copy_code:2=SAVE10)", b)
		}
		v, err := render(value)
		if err != nil {
			return usageErr("--button %s: %v", spec, err)
		}
		tb := tasks.TemplateButton{Index: i, SubType: sub}
		switch sub {
		case "quick_reply":
			tb.Payload = v
		case "url":
			tb.Text = v
		case "copy_code":
			tb.CouponCode = v
		default:
			return usageErr("--button %q: subtype %q: want quick_reply, url or copy_code", b, sub)
		}
		t.Buttons = append(t.Buttons, tb)
	}
	return nil
}

// readInteractive reads --interactive (see readJSONFlag).
func readInteractive(v string) (*tasks.Interactive, error) {
	var in tasks.Interactive
	if err := readJSONFlag("--interactive", v, &in); err != nil {
		return nil, err
	}
	return &in, nil
}

// readJSONFlag decodes flag's value v, JSON or @FILE holding it, into dst,
// strictly (an unknown member is an error naming it).
func readJSONFlag(flag, v string, dst any) error {
	src := []byte(v)
	if name, ok := strings.CutPrefix(v, "@"); ok {
		b, err := os.ReadFile(name)
		if err != nil {
			return usageErr("%s: %v", flag, err)
		}
		src = b
	}
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return usageErr("%s: %v", flag, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return usageErr("%s: data after the JSON value", flag)
	}
	return nil
}

// parseSendAt reads --send-at (RFC 3339) into dst; "" leaves it zero.
func parseSendAt(v string, dst *time.Time) error {
	if v == "" {
		return nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return usageErr("--send-at %q: want RFC 3339, 2026-12-01T09:00:00Z or with an offset", v)
	}
	*dst = t
	return nil
}
