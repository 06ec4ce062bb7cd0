package cli

import (
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/demo"
)

func newDemoCmd(g *globals) *cobra.Command {
	var o demo.Options
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a sample campaign end to end against local provider emulators",
		Long: `demo runs the main job in one process with nothing to install: its own
Redis unless --redis, REDIS_URL or the redis section of --config names a real
one, a Redis Cluster or a Sentinel (a private redis-server on a free loopback
port when one is installed, else an embedded miniredis; of --config only the
redis section is used: the demo runs the built-in limits, on a cluster with
spread_by set for every channel), local
emulators of the WhatsApp Cloud API, Twilio and webhook receivers that enforce
the providers' real limits, and the worker with the default channel limits.
It enqueues the bundled campaign (examples/recipients.csv) on the WhatsApp,
SMS and webhook channels through the HTTP enqueue API that serve runs
(POST /v1/messages/batch, /v1/webhooks/batch), shows a progress bar per
channel and ends with a summary: per channel, delivered, duplicates, lost,
provider throttle responses, and the achieved rate at the bottleneck limit
against its cap.

With --serve the server, the worker and the emulators stay up after the
campaign, until Ctrl-C, and the dashboards' URLs are printed: /limits/,
/queues/ (read-only: the demo has no API keys, so it listens on loopback
only) and the API at /v1/.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.ListenSet = cmd.Flags().Changed("listen")
			o.RedisURL = g.redisURL
			if g.configPath != "" && o.RedisURL == "" {
				// the file's redis section, for a cluster or a Sentinel
				cfg, err := g.loadConfig()
				if err != nil {
					return err
				}
				o.Redis = &cfg.Redis
			}
			if o.RedisURL == "" && (o.Redis == nil || o.Redis.Mode == config.RedisSingle) {
				o.RedisURL = os.Getenv("REDIS_URL")
			}
			o.Stdout, o.Stderr, o.Progress, o.Logger = g.stdout, g.stderr, terminalOrNil(g.stderr), g.logger()
			return demo.Run(cmd.Context(), o)
		},
	}
	cmd.Flags().IntVar(&o.Recipients, "recipients", 0, "generate a campaign of N rows instead of the bundled 1,000")
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the summary as JSON")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 10*time.Minute, "give up on the campaign after this long")
	cmd.Flags().BoolVar(&o.Serve, "serve", false, "keep the server, worker and emulators up after the campaign (Ctrl-C ends) and print the dashboard URLs")
	cmd.Flags().BoolVar(&o.Embedded, "embedded-redis", false, "use the embedded miniredis even when redis-server is installed")
	cmd.Flags().StringVar(&o.Listen, "listen", demo.DefaultListen, "loopback host:port of the API and dashboards (port 0: any free port)")
	return cmd
}
