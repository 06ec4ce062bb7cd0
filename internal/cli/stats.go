package cli

import (
	"fmt"
	"maps"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/control"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/throttle"
)

// statsJSON is what `limits stats --json` prints.
type statsJSON struct {
	Keys        int64            `json:"keys"`
	ByType      map[string]int64 `json:"by_type"`
	Bytes       int64            `json:"bytes"`
	BytesPerKey float64          `json:"bytes_per_key"`
	Top         []keyUseJSON     `json:"top"`
}

type keyUseJSON struct {
	Key   string  `json:"key"`
	Name  string  `json:"name"`
	Used  int64   `json:"used"`
	Limit int64   `json:"limit"`
	Share float64 `json:"share"`
	Bytes int64   `json:"bytes"`
}

// limitForConfig says which configured limit governs a limiter key.
func limitForConfig(cfg *config.Config) func(key string) (throttle.Limit, bool) {
	return func(key string) (throttle.Limit, bool) {
		r, ok := cfg.MatchRule(key)
		return r.Limit, ok
	}
}

func newLimitsStatsCmd(g *globals) *cobra.Command {
	var prefix string
	var top int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats [--prefix P] [--top N]",
		Short: "Count limiter keys and their memory, and show the most used keys",
		Long: `Stats walks the limiter keys once (SCAN, never KEYS): how many there are, by
Redis type, their total and mean MEMORY USAGE, and the --top keys using the
largest share of their limit (the limit comes from the configured rule that
matches the key, with runtime overrides applied; distinct limits are not
ranked). Each ranked key costs one round trip.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if top < 0 {
				return usageErr("limits stats: --top: want >= 0, got %d", top)
			}
			if prefix != "" {
				if err := rules.CheckKey(prefix, false); err != nil {
					return usageErr("limits stats: --prefix: %v", err)
				}
			}
			ctx := cmd.Context()
			lim, cfg, rdb, err := g.limiterFor(ctx)
			if err != nil {
				return err
			}
			defer rdb.Close()
			var limitFor func(string) (throttle.Limit, bool)
			if top > 0 {
				limitFor = limitForConfig(cfg)
			}
			st, err := control.Stats(ctx, lim, prefix, top, limitFor)
			if err != nil {
				return err
			}
			if asJSON {
				out := statsJSON{Keys: st.Keys, ByType: st.ByType, Bytes: st.Bytes, BytesPerKey: st.BytesPerKey(), Top: []keyUseJSON{}}
				for _, u := range st.Top {
					out.Top = append(out.Top, keyUseJSON(u))
				}
				return printJSON(g.stdout, out)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintf(w, "keys\t%d\n", st.Keys)
			for _, t := range slices.Sorted(maps.Keys(st.ByType)) {
				fmt.Fprintf(w, "  %s\t%d\n", t, st.ByType[t])
			}
			fmt.Fprintf(w, "memory\t%d bytes (%.0f bytes per key)\n", st.Bytes, st.BytesPerKey())
			if err := w.Flush(); err != nil {
				return err
			}
			if len(st.Top) == 0 {
				return nil
			}
			fmt.Fprintf(g.stdout, "\ntop %d keys by use of their limit:\n", len(st.Top))
			w = tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "KEY\tLIMIT\tUSED\tOF\tSHARE\tBYTES")
			for _, u := range st.Top {
				fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%.0f%%\t%d\n", u.Key, u.Name, u.Used, u.Limit, 100*u.Share, u.Bytes)
			}
			return w.Flush()
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&prefix, "prefix", "", "only keys starting with this (e.g. whatsapp:pair:)")
	fl.IntVar(&top, "top", 10, "show this many most used keys (0: none)")
	fl.BoolVar(&asJSON, "json", false, "print {keys, by_type, bytes, bytes_per_key, top: [{key, name, used, limit, share, bytes}]}")
	return cmd
}
