package cli

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/throttle"
)

// overrideFlags are the flags of `limits set`.
type overrideFlags struct {
	rate     string
	burst    int64
	max      int64
	interval time.Duration
}

// parse turns the flags into an Override; an error is a usage error.
func (f overrideFlags) parse(cmd *cobra.Command) (throttle.Override, error) {
	var o throttle.Override
	fl := cmd.Flags()
	if fl.Changed("rate") {
		r, err := throttle.ParseRate(f.rate)
		if err != nil {
			return o, fmt.Errorf("--rate: %w", err)
		}
		o.Rate = r
	}
	if fl.Changed("burst") {
		if f.burst < 1 {
			return o, fmt.Errorf("--burst: want >= 1, got %d", f.burst)
		}
		o.Burst = f.burst
	}
	if fl.Changed("max") {
		if f.max < 1 {
			return o, fmt.Errorf("--max: want >= 1, got %d", f.max)
		}
		o.Max = f.max
	}
	if fl.Changed("interval") {
		if f.interval < time.Millisecond {
			return o, fmt.Errorf("--interval: want a duration >= 1ms such as 6s, got %v", f.interval)
		}
		o.Interval = f.interval
	}
	if o == (throttle.Override{}) {
		return o, fmt.Errorf("nothing to set: give --rate, --burst, --max or --interval")
	}
	return o, nil
}

// overrideError words a throttle.CheckOverride error for rule r in terms
// of the command's flags.
func overrideError(r rules.Rule, err error) error {
	if fe, ok := throttle.IsFieldError(err); ok && errors.Is(err, throttle.ErrNotTaken) {
		return fmt.Errorf("rule %q (%s) does not use --%s (it uses --%s)", r.Limit.Name, r.Limit.Algorithm, fe.Field,
			strings.Join(r.Limit.Algorithm.OverrideFields(), " and --"))
	}
	return fmt.Errorf("rule %q: %w", r.Limit.Name, err)
}

func newLimitsSetCmd(g *globals) *cobra.Command {
	var f overrideFlags
	cmd := &cobra.Command{
		Use:   "set KEY --rate N/period [--burst N] [--max N] [--interval D]",
		Short: "Override a key's configured limit at runtime, for every worker (within 1s)",
		Long: `Set stores a runtime override in Redis: every worker using the same Redis and
key prefix applies it within 1s, until 'limits unset'. Flags not given keep the
configured value. KEY is a limiter key (whatsapp:daily:106540352242922) or a
prefix pattern ending in '*' (whatsapp:number:*); an exact key wins over a
pattern, and the longest pattern wins over shorter ones.

The override is checked against the configured rules the key can match (use
--config with the workers' file): a flag the rule's algorithm does not use, or a
limit the algorithm cannot have (a 6s fixed window), is refused.`,
		Example: `  sluice limits set whatsapp:number:106540352242922 --rate 1000/s
  sluice limits set 'whatsapp:daily:*' --rate 1000/1d
  sluice limits set whatsapp:pair:106540352242922:+12025550123 --rate 1/10s`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := rules.CheckKey(key, true); err != nil {
				return usageErr("limits set: %v", err)
			}
			o, err := f.parse(cmd)
			if err != nil {
				return usageErr("limits set %s: %v", key, err)
			}
			cfg, err := g.loadConfig()
			if err != nil {
				return err
			}
			var matched []rules.Rule
			if p, ok := strings.CutSuffix(key, "*"); ok {
				matched = cfg.MatchPattern(p)
			} else if r, ok := cfg.MatchRule(key); ok {
				matched = []rules.Rule{r}
			}
			for _, r := range matched {
				if err := throttle.CheckOverride(o, r.Limit, r.Cost); err != nil {
					return usageErr("limits set %s: %v", key, overrideError(r, err))
				}
			}
			if len(matched) == 0 {
				fmt.Fprintf(g.stderr, "note: no configured rule matches %s; the override applies to whichever limit uses the key\n", key)
			}
			lim, rdb, err := g.connect(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer rdb.Close()
			if err := lim.SetOverride(cmd.Context(), key, o); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "override %s: %s (every worker within %v)\n", key, o, 2*app.OverrideRefresh)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.rate, "rate", "", "N/period, such as 10000/1d or 1000/s (gcra and the windowed algorithms)")
	fl.Int64Var(&f.burst, "burst", 0, "units at once (gcra)")
	fl.Int64Var(&f.max, "max", 0, "leases at once (concurrency)")
	fl.DurationVar(&f.interval, "interval", 0, "least time between two tasks, such as 10s (min_interval)")
	return cmd
}

func newLimitsUnsetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "unset KEY",
		Short: "Remove a runtime override: the configured limit applies again (within 1s)",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := rules.CheckKey(key, true); err != nil {
				return usageErr("limits unset: %v", err)
			}
			lim, _, rdb, err := g.limiterFor(cmd.Context())
			if err != nil {
				return err
			}
			defer rdb.Close()
			ok, err := lim.UnsetOverride(cmd.Context(), key)
			if err != nil {
				return err
			}
			if !ok {
				fmt.Fprintf(g.stdout, "no override for %s\n", key)
				return nil
			}
			fmt.Fprintf(g.stdout, "removed override %s\n", key)
			return nil
		},
	}
}

// overrideJSON is one line of `limits overrides --json`.
type overrideJSON struct {
	Key      string `json:"key"`
	Rate     string `json:"rate,omitempty"`
	Burst    int64  `json:"burst,omitempty"`
	Max      int64  `json:"max,omitempty"`
	Interval string `json:"interval,omitempty"`
	SetAt    string `json:"set_at,omitempty"`
}

func newLimitsOverridesCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "overrides",
		Short: "List the runtime overrides set with 'limits set'",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			lim, _, rdb, err := g.limiterFor(cmd.Context())
			if err != nil {
				return err
			}
			defer rdb.Close()
			all, err := lim.Overrides(cmd.Context())
			if err != nil {
				return err
			}
			keys := slices.Sorted(maps.Keys(all))
			if asJSON {
				out := make([]overrideJSON, 0, len(keys))
				for _, k := range keys {
					o := all[k]
					j := overrideJSON{Key: k, Burst: o.Burst, Max: o.Max}
					if o.Rate.Limit > 0 {
						j.Rate = o.Rate.String()
					}
					if o.Interval > 0 {
						j.Interval = o.Interval.String()
					}
					if !o.SetAt.IsZero() {
						j.SetAt = o.SetAt.UTC().Format(time.RFC3339)
					}
					out = append(out, j)
				}
				return printJSON(g.stdout, out)
			}
			if len(keys) == 0 {
				fmt.Fprintln(g.stderr, "no overrides")
				return nil
			}
			w := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "KEY\tRATE\tBURST\tMAX\tINTERVAL\tSET AT")
			for _, k := range keys {
				o := all[k]
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", k, orDash(o.Rate.Limit > 0, o.Rate.String()),
					orDash(o.Burst > 0, fmt.Sprint(o.Burst)), orDash(o.Max > 0, fmt.Sprint(o.Max)),
					orDash(o.Interval > 0, o.Interval.String()), orDash(!o.SetAt.IsZero(), o.SetAt.UTC().Format(time.RFC3339)))
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array of {key, rate, burst, max, interval, set_at}")
	return cmd
}

func orDash(ok bool, s string) string {
	if ok {
		return s
	}
	return "-"
}
