package cli

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/limitview"
	"github.com/sluice-dev/sluice/throttle"
)

// showEffective prints a rate limit's effective rate beside its configured
// one (overrides applied), in the limit's own period: a daily cap reads
// "250/day", not "0.002894/s".
func showEffective(w io.Writer, k limitview.Key) {
	if !k.RateLimited {
		return
	}
	per := k.Limit.Rate.Period
	if a := k.Adaptation; a != nil {
		fmt.Fprintf(w, "effective rate\t%s of %s configured (%s)\n", ratePer(k.Effective, per), ratePer(k.Configured, per), limitview.AdaptedWhy(*a))
		return
	}
	if k.Override != nil {
		fmt.Fprintf(w, "effective rate\t%s, as overridden by `limits set` %s (not adapted)\n", ratePer(k.Configured, per), k.OverridePattern)
		return
	}
	fmt.Fprintf(w, "effective rate\t%s, as configured (not adapted)\n", ratePer(k.Configured, per))
}

// ratePer writes perSecond, a rate in units per second, per period when
// that is a whole number of minutes (250/day, 20/m, 1000/h; up to 4
// significant digits), else per second (80/s, 0.1667/s).
func ratePer(perSecond float64, period time.Duration) string {
	if period < time.Minute || period%time.Minute != 0 {
		return throttle.FormatPerSecond(perSecond)
	}
	unit := throttle.FormatPeriod(period)
	if unit == "d" {
		unit = "day"
	}
	return strconv.FormatFloat(perSecond*period.Seconds(), 'g', 4, 64) + "/" + unit
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
				return printJSON(g.stdout, out)
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
