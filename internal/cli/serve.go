package cli

import (
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/app"
)

func newServeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "Run the worker, the limiter cleanup job, /healthz and /metrics",
		Long: `serve processes the channels' queues until SIGINT or SIGTERM, then shuts
down gracefully: in-flight sends finish within worker.shutdown_timeout or go
back to their queue. Credentials come from the environment variables the
configuration names (WHATSAPP_TOKEN, TWILIO_ACCOUNT_SID, ...).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.loadConfig()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return app.Serve(ctx, cfg, g.redisURL, g.logger())
		},
	}
}
