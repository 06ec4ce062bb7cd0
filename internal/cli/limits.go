package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/control"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/limitview"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/throttle"
)

// limiterFor loads the configuration, connects to Redis and returns the
// configured limiter.
func (g *globals) limiterFor(ctx context.Context) (*throttle.Redis, *config.Config, redis.UniversalClient, error) {
	cfg, err := g.loadConfig()
	if err != nil {
		return nil, nil, nil, err
	}
	lim, rdb, err := g.connect(ctx, cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	return lim, cfg, rdb, nil
}

// connect opens Redis as cfg and --redis say and returns cfg's limiter over it.
func (g *globals) connect(ctx context.Context, cfg *config.Config) (*throttle.Redis, redis.UniversalClient, error) {
	rdb, err := g.connectRedis(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return app.NewLimiter(cfg, rdb, nil), rdb, nil
}

// showBacklog prints a GCRA key's pacing: its paced rate (the rule's widened
// by the channel's headroom) and its planned sends, with the pauses that
// hold them and when they drain: the plan's time, or later when a pause or
// the paced rate in force (adaptive limits) keeps them longer
// (limitview.Drain), or why no time can be said.
func showBacklog(w io.Writer, k limitview.Key) {
	if k.Paced > 0 {
		fmt.Fprintf(w, "paced at\t%.4g/s (%v less headroom %.3g%%)\n", k.Paced, k.Limit.Rate, k.Headroom*100)
	}
	b := k.Backlog
	if b == nil || b.Planned == 0 {
		fmt.Fprintf(w, "backlog\tnone planned\n")
		return
	}
	fmt.Fprintf(w, "backlog\t%d planned sends\n", b.Planned)
	fmt.Fprintf(w, "next due\t%s\n", b.Next.UTC().Format(time.RFC3339Nano))
	for _, p := range k.Holders {
		until := p.Until.UTC().Format(time.RFC3339)
		if p.Until.Sub(k.Now) > limitview.Indefinitely/2 {
			until = "resumed"
		}
		fmt.Fprintf(w, "held by\t%s (paused until %s)\n", p.Key, until)
	}
	d := k.Drain
	switch {
	case d.Unknown != "":
		fmt.Fprintf(w, "drains\tunknown: %s (planned for %s)\n", d.Unknown, d.Planned.UTC().Format(time.RFC3339Nano))
	case d.At.After(d.Planned):
		fmt.Fprintf(w, "drains\t%s (%s; %s; planned for %s)\n", d.At.UTC().Format(time.RFC3339Nano), eta(d.At), d.Why(),
			d.Planned.UTC().Format(time.RFC3339Nano))
	default:
		fmt.Fprintf(w, "drains\t%s (%s)\n", b.Drains.UTC().Format(time.RFC3339Nano), eta(b.Drains))
	}
}

func newLimitsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "limits",
		Short: "Show, list, reset and override limits; limiter key statistics",
		Long: `Keys are written without the prefix: scope:resource:identifier, as in
whatsapp:pair:106540352242922:+12025550123. Rules are matched to keys with the
configuration (--config): give the workers' file.`,
	}
	var showJSON bool
	var showMember string
	show := &cobra.Command{
		Use:   "show KEY",
		Short: "Show a key's state and, when a configured rule matches it, its current decision",
		Long: `Show prints the key's raw state in Redis and, when a configured rule matches
the key, the limit's current state (Status: remaining units, reset, and how long
one unit would wait), with any runtime override and adaptive rate applied, and
its effective rate beside the configured one. Nothing is taken.
--json prints only that decision: {"name","limit","allowed","remaining","reset"
(Unix ms),"retryAfter" (ms)}. For a distinct rule the decision is for a new
member unless --member names one.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := rules.CheckKey(key, false); err != nil {
				return usageErr("limits show: %v", err)
			}
			ctx := cmd.Context()
			lim, cfg, rdb, err := g.limiterFor(ctx)
			if err != nil {
				return err
			}
			defer rdb.Close()
			k, err := limitview.ReadKey(ctx, lim, cfg, key, limitview.KeyOptions{Member: showMember})
			if err != nil {
				return err
			}
			r, matched, ld := k.Rule, k.Matched, k.Decision
			if showJSON {
				if !matched {
					return fmt.Errorf("limits show %s: no configured rule matches the key, so there is no decision to print (see limits show without --json for its raw state)", key)
				}
				b, err := json.Marshal(ld)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(g.stdout, "%s\n", b)
				return err
			}
			st, err := control.Inspect(ctx, lim, key)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintf(w, "key\t%s\n", st.Key)
			if st.TTL == -2 {
				fmt.Fprintf(w, "state\tnone (unused: full capacity)\n")
			} else {
				fmt.Fprintf(w, "type\t%s\n", st.Type)
				fmt.Fprintf(w, "ttl\t%v\n", st.TTL)
				fmt.Fprintf(w, "memory\t%d bytes\n", st.Bytes)
				if st.Value != "" {
					fmt.Fprintf(w, "value\t%s\n", st.Value)
				}
				for _, f := range slices.Sorted(maps.Keys(st.Fields)) {
					fmt.Fprintf(w, "  %s\t%s\n", f, st.Fields[f])
				}
				if st.Type == "zset" {
					fmt.Fprintf(w, "%s\t%d\n", zsetLabel(r, matched), st.Count)
					for _, m := range st.Members {
						fmt.Fprintf(w, "  %s\t%s\n", m.Member, m.At.UTC().Format(time.RFC3339Nano))
					}
				}
			}
			if matched {
				fmt.Fprintf(w, "rule\t%s (%s %s)\n", r.Limit.Name, r.Limit.Algorithm, r.Describe())
				if o := k.Override; o != nil {
					fmt.Fprintf(w, "override\t%s (set on %s at %s)\n", o, k.OverridePattern, o.SetAt.UTC().Format(time.RFC3339))
				}
				showEffective(w, k)
				if r.Limit.Algorithm == throttle.Distinct {
					if showMember == "" {
						fmt.Fprintf(w, "for\ta new member\n")
					} else {
						fmt.Fprintf(w, "for\tmember %s\n", showMember)
					}
				}
				fmt.Fprintf(w, "remaining\t%d of %d\n", ld.Remaining, ld.Limit)
				fmt.Fprintf(w, "reset\t%s\n", ld.Reset.UTC().Format(time.RFC3339Nano))
				fmt.Fprintf(w, "allowed now\t%v\n", ld.Allowed)
				if !ld.Allowed {
					fmt.Fprintf(w, "retry after\t%v\n", ld.RetryAfter)
				}
				if k.Backlog != nil {
					showBacklog(w, k)
				}
			}
			return w.Flush()
		},
	}
	show.Flags().BoolVar(&showJSON, "json", false, `print the rule's decision as JSON: {"name","limit","allowed","remaining","reset","retryAfter"}`)
	show.Flags().StringVar(&showMember, "member", "", "distinct rules: the member to decide for (default: a new member)")
	var listPrefix string
	var listMax int
	list := &cobra.Command{
		Use:   "list",
		Short: "List limiter keys (SCAN, never KEYS)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			lim, _, rdb, err := g.limiterFor(ctx)
			if err != nil {
				return err
			}
			defer rdb.Close()
			n := 0
			err = lim.Each(ctx, listPrefix, func(k string) error {
				if listMax > 0 && n >= listMax {
					return errStop
				}
				n++
				_, err := fmt.Fprintln(g.stdout, k)
				return err
			})
			if err != nil && !errors.Is(err, errStop) {
				return err
			}
			fmt.Fprintf(g.stderr, "%d keys\n", n)
			return nil
		},
	}
	list.Flags().StringVar(&listPrefix, "prefix", "", "only keys starting with this (e.g. whatsapp:pair:)")
	list.Flags().IntVar(&listMax, "max", 0, "stop after this many keys (0: all)")
	var resetPrefix string
	reset := &cobra.Command{
		Use:   "reset [KEY...] | --prefix P",
		Short: "Delete limiter state: the limits start over at full capacity and at their configured rates (adaptation forgotten)",
		RunE: func(cmd *cobra.Command, args []string) error {
			if (len(args) == 0) == (resetPrefix == "") {
				return usageErr("limits reset: give KEYs or --prefix, not both or neither")
			}
			ctx := cmd.Context()
			lim, _, rdb, err := g.limiterFor(ctx)
			if err != nil {
				return err
			}
			defer rdb.Close()
			var n int64
			if resetPrefix != "" {
				n, err = lim.ResetPrefix(ctx, resetPrefix)
			} else {
				n, err = lim.Reset(ctx, args...)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "reset %d keys\n", n)
			return nil
		},
	}
	reset.Flags().StringVar(&resetPrefix, "prefix", "", "reset every key starting with this")
	cmd.AddCommand(show, list, reset, newLimitsSetCmd(g), newLimitsUnsetCmd(g), newLimitsOverridesCmd(g), newLimitsStatsCmd(g), newLimitsAdaptedCmd(g))
	return cmd
}

// zsetLabel names a sorted set's members after the algorithm that keeps it.
func zsetLabel(r rules.Rule, matched bool) string {
	if matched {
		switch r.Limit.Algorithm {
		case throttle.Concurrency:
			return "leases"
		case throttle.SlidingWindowLog:
			return "entries"
		}
	}
	return "members"
}

// errStop ends a key walk early; it is not a failure.
var errStop = errors.New("stop")
