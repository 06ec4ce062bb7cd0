package cli

import (
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/emulator"
)

func newEmulateCmd(g *globals) *cobra.Command {
	var opts emulator.Options
	cmd := &cobra.Command{
		Use:   "emulate",
		Short: "Run the WhatsApp, Twilio and webhook emulators so a real `sluice serve` can point at them",
		Long: `emulate serves local emulators of the WhatsApp Cloud API, the Twilio Messages
API and customers' webhook receivers. They check auth and request shape,
enforce the providers' limits (80 messages/s per phone number → 130429,
~1 per 6 s per recipient → 131056, Twilio 1/s per From and concurrent
requests → 20429, webhooks 10/s per receiver → 429), and record every
accepted message: GET /_emulator/stats and /_emulator/records on the WhatsApp
port. It prints the URLs and credentials to use; stop it with Ctrl-C.

The per-second caps hold in any 1-second span, wherever it starts (a sliding
window on arrival time, the strictest reading); --calendar-seconds counts them
per calendar second instead. The pair interval is exact.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return emulator.Run(ctx, opts, g.stdout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Addr, "addr", "127.0.0.1", "listen address")
	f.IntVar(&opts.Ports.WhatsApp, "whatsapp-port", 0, "WhatsApp port (0: any free port)")
	f.IntVar(&opts.Ports.Twilio, "twilio-port", 0, "Twilio port (0: any free port)")
	f.IntVar(&opts.Ports.WebhookBase, "webhook-port", 0, "first webhook receiver's port; receiver i uses port+i (0: any)")
	f.IntVar(&opts.WebhookEndpoints, "webhook-endpoints", 1, "number of webhook receivers (each its own host:port)")
	f.IntVar(&opts.WhatsAppMPS, "whatsapp-mps", 80, "WhatsApp messages/s per phone number")
	f.IntVar(&opts.TwilioMPS, "twilio-mps", 1, "Twilio messages/s per From")
	f.IntVar(&opts.WebhookRPS, "webhook-rps", 10, "webhook requests/s per receiver")
	f.StringVar(&opts.WhatsAppWebhookURL, "whatsapp-webhook", "", "URL to post WhatsApp message statuses to, signed with the app secret (serve's /callbacks/whatsapp; \"\": none)")
	f.BoolVar(&opts.CalendarSeconds, "calendar-seconds", false, "count the per-second caps per calendar second instead of in any 1-s span (sliding window)")
	return cmd
}
