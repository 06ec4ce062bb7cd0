// Command sluice runs Sluice: the throttled delivery worker (serve), the
// end-to-end demo, the provider emulators, enqueueing and bulk sends, and
// limiter administration. See `sluice --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluice-dev/sluice/internal/cli"
)

func main() {
	// The first SIGINT or SIGTERM ends the command's context: serve and
	// demo --serve shut down gracefully, send --wait stops watching. A
	// second one kills the process.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	code := cli.Execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
