package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/throttle"
)

// showEffective prints a rate limit's effective rate beside its configured
// one (l, overrides applied) and returns l at its effective rate.
func showEffective(ctx context.Context, w io.Writer, lim *throttle.Redis, key string, l throttle.Limit, cost int64) (throttle.Limit, error) {
	switch l.Algorithm {
	case throttle.GCRA, throttle.FixedWindow, throttle.SlidingWindowLog, throttle.SlidingWindowCounter:
	default:
		return l, nil
	}
	ads, err := lim.AdaptationOf(ctx, key)
	if err != nil {
		return l, err
	}
	cfg := throttle.PerSecondOf(l.Rate)
	for _, a := range ads {
		if a.Limit != l.Name {
			continue
		}
		eff := a.Effective(cfg)
		fmt.Fprintf(w, "effective rate\t%s of %s configured (%s)\n", throttle.FormatPerSecond(eff), throttle.FormatPerSecond(cfg), adaptedWhy(a))
		return a.Apply(l, cost), nil
	}
	fmt.Fprintf(w, "effective rate\t%s, as configured (not adapted)\n", throttle.FormatPerSecond(cfg))
	return l, nil
}

// adaptedWhy says why and since when a limit is adapted.
func adaptedWhy(a throttle.Adaptation) string {
	s := "adapted"
	if a.Code != 0 {
		s += fmt.Sprintf(", last lowered after provider code %d at %s", a.Code, a.Decreased.UTC().Format(time.RFC3339))
	} else if !a.Decreased.IsZero() {
		s += ", last lowered at " + a.Decreased.UTC().Format(time.RFC3339)
	}
	if a.Ceiling > 0 {
		s += "; ceiling " + throttle.FormatPerSecond(a.Ceiling)
	}
	if a.Reason == throttle.ReasonQuiet {
		s += "; raised after a quiet period at " + a.Changed.UTC().Format(time.RFC3339)
	}
	return s
}

// adaptedJSON is one entry of `limits adapted --json`: rates in units per
// second, times in Unix ms.
type adaptedJSON struct {
	Key        string  `json:"key"`
	Limit      string  `json:"limit"`
	Configured float64 `json:"configured"`
	Effective  float64 `json:"effective"`
	Ceiling    float64 `json:"ceiling,omitempty"`
	Code       int     `json:"code,omitempty"`
	Decreased  int64   `json:"decreased,omitempty"`
	Changed    int64   `json:"changed"`
	Reason     string  `json:"reason,omitempty"`
}

func newLimitsAdaptedCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "adapted",
		Short: "List the limits adaptive limits lowered after provider throttles, effective beside configured",
		Long: `Adapted lists every limit whose rate a provider's throttle lowered (see
docs/adaptive.md), with its effective and configured rates in units per second,
the lowest rate throttled (the ceiling the rate stays under) and the last change.
'limits reset KEY' forgets a key's adaptation.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			lim, _, rdb, err := g.limiterFor(cmd.Context())
			if err != nil {
				return err
			}
			defer rdb.Close()
			all, err := lim.Adaptations(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				out := make([]adaptedJSON, 0, len(all))
				for _, a := range all {
					j := adaptedJSON{Key: a.Key, Limit: a.Limit, Configured: a.Configured, Effective: a.Effective(a.Configured),
						Ceiling: a.Ceiling, Code: a.Code, Changed: a.Changed.UnixMilli(), Reason: a.Reason}
					if !a.Decreased.IsZero() {
						j.Decreased = a.Decreased.UnixMilli()
					}
					out = append(out, j)
				}
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			if len(all) == 0 {
				fmt.Fprintln(g.stderr, "no adapted limits")
				return nil
			}
			w := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "KEY\tLIMIT\tEFFECTIVE\tCONFIGURED\tCEILING\tCODE\tCHANGED")
			for _, a := range all {
				code := "-"
				if a.Code != 0 {
					code = fmt.Sprint(a.Code)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s (%s)\n", a.Key, a.Limit, throttle.FormatPerSecond(a.Effective(a.Configured)),
					throttle.FormatPerSecond(a.Configured), orDash(a.Ceiling > 0, throttle.FormatPerSecond(a.Ceiling)), code,
					a.Changed.UTC().Format(time.RFC3339), orDash(a.Reason != "", a.Reason))
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array of {key, limit, configured, effective, ceiling, code, decreased, changed, reason}")
	return cmd
}
