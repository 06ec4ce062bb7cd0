// Command sluice runs Sluice: the throttled delivery worker (serve), the
// end-to-end demo, the provider emulators, enqueueing and bulk sends, and
// limiter administration. See `sluice --help`.
package main

import (
	"context"
	"os"

	"github.com/sluice-dev/sluice/internal/cli"
)

func main() {
	os.Exit(cli.Execute(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
