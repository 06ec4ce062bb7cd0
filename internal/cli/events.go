package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/limitview"
	"github.com/sluice-dev/sluice/throttle"
)

// eventsBlock is how long one read waits for new events; a cancelled tail
// (Ctrl-C) returns within it.
const eventsBlock = time.Second

func newEventsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Read the limiter's events (limits.*, provider.*, endpoint.failing)",
		Long: `Workers write an event to a capped Redis stream when a limit blocks a send
(limits.exceeded: at most once per key and window, and for a send held back by
a backlog or a cap at most once a minute per key) and when a send leaves less
than events.warn_at of a limit (limits.warning), at most once per key, type
and window; when a provider answers with a throttle (provider.throttled, at
most once a second per scope), when that pauses a scope (provider.paused),
when an operator pauses a channel (operator.paused) and when an operator or a
successful credential probe resumes one (provider.resumed), with the
provider's code; when adaptive limits change a limit's effective rate
(limits.adapted, with the configured rate beside it); when a webhook or HTTP
call task spends its retry budget and is archived (endpoint.failing, at most
once a minute per endpoint); and when a provider's status callback reports a
send failed or undelivered (delivery.failed).

Types: ` + strings.Join(throttle.EventTypes, ", ") + `.`,
	}
	var typ string
	var fromStart, asJSON bool
	var count int
	tail := &cobra.Command{
		Use:   "tail [--type TYPE] [--from-start] [--count N] [--json]",
		Short: "Print events as they arrive, until Ctrl-C or --count events",
		Long: `Tail follows the events stream and prints one line per event: time (UTC), type,
key, then the event's fields (name, limit, window and reset for limits.exceeded;
name, remaining, threshold and limit for limits.warning). --json prints one JSON
object per line instead, with at and reset in Unix ms.`,
		Example: `  sluice events tail
  sluice events tail --type limits.exceeded --from-start --count 100 --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case typ == "", throttle.IsEventType(typ):
			case throttle.IsEventType("limits." + typ): // exceeded, warning, adapted
				typ = "limits." + typ
			default:
				return usageErr("events tail: --type %q: want one of %s", typ, strings.Join(throttle.EventTypes, ", "))
			}
			if count < 0 {
				return usageErr("events tail: --count: want >= 0 (0: follow until interrupted), got %d", count)
			}
			ctx := cmd.Context()
			lim, _, rdb, err := g.limiterFor(ctx)
			if err != nil {
				return err
			}
			defer rdb.Close()
			after := "0"
			if !fromStart {
				// Start after the newest entry now, not at "$" on every read,
				// so nothing written between two reads is missed.
				last, err := rdb.XRevRangeN(ctx, lim.StreamKey(), "+", "-", 1).Result()
				if err != nil {
					return fmt.Errorf("events: %w", err)
				}
				if len(last) > 0 {
					after = last[0].ID
				}
			}
			printed, told := 0, false
			for count == 0 || printed < count {
				batch := int64(100)
				evs, next, err := lim.Events(ctx, after, batch, eventsBlock)
				if err != nil {
					if ctx.Err() != nil {
						return nil // interrupted: a normal end of a tail
					}
					return err
				}
				after = next
				if len(evs) == 0 && printed == 0 && !told {
					// An empty stream (or none of --type yet): say that the
					// tail waits, on stderr, so stdout stays the events.
					what := "events"
					if typ != "" {
						what = typ + " events"
					}
					fmt.Fprintf(g.stderr, "sluice: no %s yet in %s; waiting for new ones (Ctrl-C to stop)\n", what, lim.StreamKey())
					told = true
				}
				for _, e := range evs {
					if typ != "" && e.Type != typ {
						continue
					}
					if err := printEvent(g.stdout, e, asJSON); err != nil {
						return err
					}
					printed++
					if count > 0 && printed >= count {
						return nil
					}
				}
				if ctx.Err() != nil {
					return nil
				}
			}
			return nil
		},
	}
	fl := tail.Flags()
	fl.StringVar(&typ, "type", "", "only this type: "+strings.Join(throttle.EventTypes, ", "))
	fl.BoolVar(&fromStart, "from-start", false, "begin with the oldest event kept, not the next new one")
	fl.IntVar(&count, "count", 0, "stop after this many events (0: follow until interrupted)")
	fl.BoolVar(&asJSON, "json", false, "print one JSON object per event")
	cmd.AddCommand(tail)
	return cmd
}

func printEvent(w io.Writer, e throttle.Event, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(limitview.EventOf(e))
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s", e.At.UTC().Format("2006-01-02T15:04:05.000Z"), e.Type, e.Key)
	if e.Type != throttle.EventExceeded && e.Type != throttle.EventWarning && e.Type != throttle.EventLimitsAdapted {
		if e.Code != 0 {
			fmt.Fprintf(&b, " code=%d", e.Code)
		}
		if !e.Until.IsZero() {
			fmt.Fprintf(&b, " until=%s", e.Until.UTC().Format(time.RFC3339))
		}
		if e.InARow > 0 {
			fmt.Fprintf(&b, " in_a_row=%d", e.InARow)
		}
		if e.Reason != "" {
			fmt.Fprintf(&b, " reason=%q", e.Reason)
		}
		b.WriteByte('\n')
		_, err := io.WriteString(w, b.String())
		return err
	}
	fmt.Fprintf(&b, " name=%s", e.Name)
	if e.Type == throttle.EventLimitsAdapted {
		fmt.Fprintf(&b, " effective=%s configured=%s previous=%s", e.Effective, e.Configured, e.Previous)
		if e.Ceiling != "" {
			fmt.Fprintf(&b, " ceiling=%s", e.Ceiling)
		}
		if e.Code != 0 {
			fmt.Fprintf(&b, " code=%d", e.Code)
		}
		fmt.Fprintf(&b, " reason=%q\n", e.Reason)
		_, err := io.WriteString(w, b.String())
		return err
	}
	switch e.Type {
	case throttle.EventWarning:
		fmt.Fprintf(&b, " remaining=%d threshold=%d limit=%d", e.Remaining, e.Threshold, e.Limit)
	default:
		fmt.Fprintf(&b, " limit=%d", e.Limit)
		if e.Window > 0 {
			fmt.Fprintf(&b, " window=%s", limitview.Window(e.Window))
		}
		if !e.Reset.IsZero() {
			fmt.Fprintf(&b, " reset=%s", e.Reset.UTC().Format(time.RFC3339))
		}
	}
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}
