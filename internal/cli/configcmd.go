package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/tasks"
)

func newConfigCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Check configuration files"}
	cmd.AddCommand(noConfig(&cobra.Command{
		Use:   "check FILE",
		Short: "Validate a configuration file; print every problem as file:line:col: field: reason",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(args[0])
			if err != nil {
				fmt.Fprintln(g.stdout, err)
				return &ExitError{Code: 1, Err: fmt.Errorf("%s: invalid configuration", args[0])}
			}
			n := 0
			for _, name := range tasks.Channels() {
				if c := cfg.Channels[name]; c != nil && c.Enabled {
					n++
					for _, r := range c.Rules() {
						fmt.Fprintf(g.stdout, "%-9s %-12s %-13s %-40s %s\n", name, r.Limit.Name, r.Limit.Algorithm, r.Key, r.Describe())
					}
				}
			}
			fmt.Fprintf(g.stdout, "%s: ok (%d channels enabled)\n", args[0], n)
			return nil
		},
	}, "it validates the FILE argument"))
	return cmd
}
