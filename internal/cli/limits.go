package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/throttle"
)

func describeLimit(l throttle.Limit) string {
	switch l.Algorithm {
	case throttle.Concurrency:
		return fmt.Sprintf("max %d, lease %v", l.Max, l.Lease)
	case throttle.GCRA:
		return fmt.Sprintf("%v burst %d", l.Rate, max(l.Burst, 1))
	default:
		return l.Rate.String()
	}
}

// limiterFor connects to Redis and returns the configured limiter.
func (g *globals) limiterFor(ctx context.Context) (*throttle.Redis, *config.Config, redis.UniversalClient, error) {
	cfg, err := g.loadConfig()
	if err != nil {
		return nil, nil, nil, err
	}
	url, err := g.resolveRedisURL(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	rdb, err := app.ConnectURL(ctx, url)
	if err != nil {
		return nil, nil, nil, err
	}
	return app.NewLimiter(cfg, rdb, nil), cfg, rdb, nil
}

// ruleFor finds the configured rule whose key template matches key: literal
// segments match exactly, a placeholder matches one segment, and a final
// placeholder takes the rest (a host:port holds a ':').
func ruleFor(cfg *config.Config, key string) (config.LimitRule, bool) {
	scope, _, _ := strings.Cut(key, ":")
	cc := cfg.Channels[scope]
	if cc == nil {
		return config.LimitRule{}, false
	}
	ks := strings.Split(key, ":")
	for _, r := range cc.Rules() {
		if templateMatches(strings.Split(r.Key, ":"), ks) {
			return r, true
		}
	}
	return config.LimitRule{}, false
}

func templateMatches(ts, ks []string) bool {
	if len(ks) < len(ts) {
		return false
	}
	for i, t := range ts {
		placeholder := strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}")
		if !placeholder && t != ks[i] {
			return false
		}
		if i == len(ts)-1 && len(ks) > len(ts) && !placeholder {
			return false
		}
	}
	return true
}

func newLimitsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "limits",
		Short: "Show, list and reset limiter state in Redis",
		Long: `Keys are written without the prefix: scope:resource:identifier, as in
whatsapp:pair:106540352242922:+12025550123.`,
	}
	show := &cobra.Command{
		Use:   "show KEY",
		Short: "Show a key's state and, when a configured rule matches it, its remaining capacity",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			lim, cfg, rdb, err := g.limiterFor(ctx)
			if err != nil {
				return err
			}
			defer rdb.Close()
			st, err := lim.Inspect(ctx, args[0])
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
					fmt.Fprintf(w, "members\t%d\n", st.Count)
					for _, m := range st.Members {
						fmt.Fprintf(w, "  %s\t%s\n", m.Member, m.At.UTC().Format(time.RFC3339Nano))
					}
				}
			}
			if r, ok := ruleFor(cfg, args[0]); ok {
				d, err := lim.Check(ctx, throttle.Request{Key: args[0], Limit: r.Limit, Cost: r.Cost})
				if err != nil {
					return err
				}
				ld := d.Limits[0]
				fmt.Fprintf(w, "rule\t%s (%s %s)\n", r.Limit.Name, r.Limit.Algorithm, describeLimit(r.Limit))
				fmt.Fprintf(w, "remaining\t%d of %d\n", ld.Remaining, ld.Limit)
				fmt.Fprintf(w, "reset\t%s\n", ld.Reset.UTC().Format(time.RFC3339Nano))
				fmt.Fprintf(w, "allowed now\t%v\n", ld.Allowed)
				if !ld.Allowed {
					fmt.Fprintf(w, "retry after\t%v\n", ld.RetryAfter)
				}
			}
			return w.Flush()
		},
	}
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
		Short: "Delete limiter state: the limits start over at full capacity",
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
	cmd.AddCommand(show, list, reset)
	return cmd
}

// errStop ends a key walk early; it is not a failure.
var errStop = errors.New("stop")
