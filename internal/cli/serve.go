package cli

import (
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/server"
)

func newServeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "Run the worker, the cleanup job, the enqueue API, the dashboards and the callbacks",
		Long: `serve processes the channels' queues until SIGINT or SIGTERM, then shuts
down gracefully: in-flight sends finish within worker.shutdown_timeout or go
back to their queue. Credentials come from the environment variables the
configuration names (WHATSAPP_TOKEN, TWILIO_ACCOUNT_SID, ...).

On http.listen (default 127.0.0.1:9090) it serves the enqueue API (/v1/,
described at /v1/openapi.json), the queue dashboard (/queues/), the limits
dashboard (/limits/), the providers' delivery callbacks (/callbacks/),
/healthz and /metrics. API keys come from SLUICE_API_KEYS, comma-separated
"key" or "key:tenant" (at least 16 characters each): the API takes
"Authorization: Bearer KEY", the dashboards the same or HTTP Basic with any
user name and the key as password. Without keys serve listens only on a
loopback address, and the queue dashboard is read-only.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.loadConfig()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return server.Serve(ctx, cfg, g.redisURL, g.logger())
		},
	}
}
