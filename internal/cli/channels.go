package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/limitview"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

func newChannelsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "channels",
		Short: "Pause, resume and show channels and the scopes providers paused",
		Long: `A paused channel's queue is not dequeued at all (asynq's queue pause), and its
sends in other queues are blocked by the pause key <channel>:paused:channel in
every worker. Scopes paused by provider throttles (a number, a pair, an account,
a host) are listed by status and ended early by resume --key.`,
	}
	var forDur time.Duration
	var reason string
	pause := &cobra.Command{
		Use:   "pause CHANNEL",
		Short: "Pause a channel in every worker until resumed (or --for)",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: g.onChannel(func(ctx context.Context, c *channelsEnv, cc *config.ChannelConfig) error {
			wait := forDur
			if wait <= 0 {
				wait = limitview.Indefinitely
			}
			if reason == "" {
				reason = "paused by an operator"
			}
			p, err := c.lim.Pause(ctx, throttle.PauseKey(cc.Name, worker.ScopeChannel, ""), throttle.PauseOptions{Wait: wait, Reason: reason, Operator: true})
			if err != nil {
				return err
			}
			// Until resumed: the queue is not dequeued at all. A pause with
			// an end leaves the queue running: its tasks are dequeued once
			// and come back at the end (asynq cannot unpause by itself).
			if forDur <= 0 {
				for _, q := range cc.Queues() { // its queue groups too
					if err := c.insp.PauseQueue(q); err != nil && !strings.Contains(err.Error(), "already paused") {
						return fmt.Errorf("pause queue %q: %w", q, err)
					}
				}
			}
			fields := []any{"reason", p.Reason}
			if forDur > 0 {
				fields = append(fields, "until", p.Until.UnixMilli())
			}
			c.lim.Emit(ctx, throttle.EventOperatorPaused, p.Key, time.Millisecond, fields...)
			until := "until resumed"
			if forDur > 0 {
				until = "until " + p.Until.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(g.stdout, "channel %s paused %s; resume with `sluice channels resume %s`\n", cc.Name, until, cc.Name)
			return nil
		}),
	}
	pause.Flags().DurationVar(&forDur, "for", 0, "end the pause by itself after this long (default: until resumed)")
	pause.Flags().StringVar(&reason, "reason", "", "why, shown by status and in the operator.paused event")

	var keys []string
	resume := &cobra.Command{
		Use:   "resume CHANNEL",
		Short: "Resume a paused channel (or, with --key, one scope a provider paused)",
		Long: `Resume ends the channel's pause (its queue is dequeued again, its pause key is
deleted) and every scope of the channel a provider paused, unless --key names
the pause keys to end (as status lists them). Tasks that were waiting for an
ended pause run now.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: g.onChannel(func(ctx context.Context, c *channelsEnv, cc *config.ChannelConfig) error {
			ended := keys
			if len(ended) == 0 {
				ps, err := channelPauses(ctx, c.lim, cc.Name)
				if err != nil {
					return err
				}
				for _, p := range ps {
					ended = append(ended, p.Key)
				}
				ended = append(ended, throttle.PauseKey(cc.Name, worker.ScopeChannel, ""))
				for _, q := range cc.Queues() {
					if err := c.insp.UnpauseQueue(q); err != nil && !strings.Contains(err.Error(), "not paused") {
						return fmt.Errorf("resume queue %q: %w", q, err)
					}
				}
			}
			resumed := 0
			for _, k := range slices.Compact(slices.Sorted(slices.Values(ended))) {
				if !throttle.IsPauseKey(k) || rules.ChannelOf(k) != cc.Name {
					return usageErr("channels resume: %q is not a pause key of channel %s (see `sluice channels status %s`)", k, cc.Name, cc.Name)
				}
				ok, err := c.lim.Resume(ctx, k)
				if err != nil {
					return err
				}
				if ok {
					resumed++
					c.lim.Emit(ctx, throttle.EventProviderResumed, k, time.Millisecond)
				}
			}
			ran, err := worker.RunWaiting(c.insp, cc.Queues(), ended)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "channel %s resumed: %d pause(s) ended, %d waiting task(s) run now\n", cc.Name, resumed, ran)
			return nil
		}),
	}
	resume.Flags().StringSliceVar(&keys, "key", nil, "end only this pause key (repeatable)")

	var asJSON bool
	status := &cobra.Command{
		Use:   "status [CHANNEL]",
		Short: "Show each channel's queue and pauses",
		Args:  usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := g.channelsEnv(ctx)
			if err != nil {
				return err
			}
			defer c.close()
			names := slices.Sorted(func(yield func(string) bool) {
				for n, cc := range c.cfg.Channels {
					if cc.Enabled && !yield(n) {
						return
					}
				}
			})
			if len(args) == 1 {
				cc, err := c.channel(args[0])
				if err != nil {
					return err
				}
				names = []string{cc.Name}
			}
			var out []channelStatus
			for _, n := range names {
				st, err := c.status(ctx, c.cfg.Channels[n])
				if err != nil {
					return err
				}
				out = append(out, st)
			}
			if asJSON {
				return json.NewEncoder(g.stdout).Encode(out)
			}
			printChannels(g.stdout, out)
			return nil
		},
	}
	status.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(pause, resume, status)
	return cmd
}

type channelsEnv struct {
	cfg  *config.Config
	rdb  redis.UniversalClient
	lim  *throttle.Redis
	insp *asynq.Inspector
}

func (g *globals) channelsEnv(ctx context.Context) (*channelsEnv, error) {
	lim, cfg, rdb, err := g.limiterFor(ctx)
	if err != nil {
		return nil, err
	}
	return &channelsEnv{cfg: cfg, rdb: rdb, lim: lim, insp: asynq.NewInspectorFromRedisClient(rdb)}, nil
}

func (c *channelsEnv) close() { _ = c.rdb.Close() }

// onChannel runs fn for the channel named by the command's argument.
func (g *globals) onChannel(fn func(ctx context.Context, c *channelsEnv, cc *config.ChannelConfig) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		c, err := g.channelsEnv(ctx)
		if err != nil {
			return err
		}
		defer c.close()
		cc, err := c.channel(args[0])
		if err != nil {
			return err
		}
		return fn(ctx, c, cc)
	}
}

func (c *channelsEnv) channel(name string) (*config.ChannelConfig, error) {
	cc := c.cfg.Channels[name]
	if cc == nil {
		names := slices.Sorted(maps.Keys(c.cfg.Channels))
		return nil, usageErr("channel %q: not configured (channels: %s)", name, strings.Join(names, ", "))
	}
	return cc, nil
}

type channelStatus struct {
	Channel string `json:"channel"`
	Queue   string `json:"queue"`
	// QueueGroups is the number of queue groups (queue_groups) the counts
	// below include besides Queue; 0 for none.
	QueueGroups int  `json:"queue_groups,omitempty"`
	QueuePaused bool `json:"queue_paused"`
	// QueuesPaused counts the paused queues when only some of the channel's
	// queues are paused (queue_paused is then false); 0 otherwise.
	QueuesPaused int               `json:"queues_paused,omitempty"`
	Pending      int               `json:"pending"`
	Scheduled    int               `json:"scheduled"`
	Retry        int               `json:"retry"`
	Archived     int               `json:"archived"`
	Pauses       []limitview.Pause `json:"pauses"`
}

func (c *channelsEnv) status(ctx context.Context, cc *config.ChannelConfig) (channelStatus, error) {
	st := channelStatus{Channel: cc.Name, Queue: cc.Queue, Pauses: []limitview.Pause{}}
	if n := len(cc.Queues()); n > 1 {
		st.QueueGroups = n - 1
	}
	qs, err := c.insp.Queues()
	if err != nil {
		return st, fmt.Errorf("queues: %w", err)
	}
	seen, paused := 0, 0
	for _, q := range cc.Queues() { // the queue, then its groups: counted together
		if !slices.Contains(qs, q) { // (a queue that never held a task does not exist)
			continue
		}
		qi, err := c.insp.GetQueueInfo(q)
		if err != nil {
			return st, fmt.Errorf("queue %q: %w", q, err)
		}
		seen++
		if qi.Paused {
			paused++
		}
		st.Pending += qi.Pending
		st.Scheduled += qi.Scheduled
		st.Retry += qi.Retry
		st.Archived += qi.Archived
	}
	// Paused only when every queue is: a group that still runs (a pause cut
	// short, groups raised since) still sends. `channels pause` again stops
	// the rest.
	st.QueuePaused = seen > 0 && paused == seen
	if paused > 0 && paused < seen {
		st.QueuesPaused = paused
	}
	ps, err := channelPauses(ctx, c.lim, cc.Name)
	if err != nil {
		return st, err
	}
	now := time.Now()
	for _, p := range ps {
		st.Pauses = append(st.Pauses, limitview.PauseOf(p, now))
	}
	return st, nil
}

// channelPaused reports a pause of the whole channel (`channels pause`,
// with or without --for): its sends wait though its queue may be running.
func (st channelStatus) channelPaused() bool {
	for _, p := range st.Pauses {
		if p.Key == throttle.PauseKey(st.Channel, worker.ScopeChannel, "") {
			return true
		}
	}
	return false
}

func printChannels(w io.Writer, sts []channelStatus) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "channel\tqueue\tstate\tpending\tscheduled\tretry\tarchived\tpaused scopes")
	for _, st := range sts {
		state := "running"
		switch {
		case st.QueuePaused || st.channelPaused():
			state = "paused"
		case st.QueuesPaused > 0:
			state = fmt.Sprintf("partly paused (%d queues)", st.QueuesPaused)
		}
		queue := st.Queue
		if st.QueueGroups > 0 {
			queue = fmt.Sprintf("%s (+%d groups)", st.Queue, st.QueueGroups)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", st.Channel, queue, state, st.Pending, st.Scheduled, st.Retry, st.Archived, len(st.Pauses))
	}
	_ = tw.Flush()
	for _, st := range sts {
		for _, p := range st.Pauses {
			until := time.UnixMilli(p.Until).UTC()
			end := "until " + until.Format(time.RFC3339) + " (in " + time.Until(until).Round(time.Second).String() + ")"
			if p.UntilResumed {
				end = "until resumed"
			}
			if p.By == limitview.ByOperator {
				fmt.Fprintf(w, "  %s paused by an operator %s: %s\n", p.Key, end, p.Reason)
				continue
			}
			code := ""
			if p.Code != 0 {
				code = fmt.Sprintf(" code %d", p.Code)
			}
			fmt.Fprintf(w, "  %s paused %s%s, %d in a row: %s\n", p.Key, end, code, p.InARow, p.Reason)
		}
	}
}
