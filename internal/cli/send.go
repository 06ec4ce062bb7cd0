package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/campaign"
	"github.com/sluice-dev/sluice/internal/delivery"
	"github.com/sluice-dev/sluice/internal/server"
	"github.com/sluice-dev/sluice/producer"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
)

// sendReport counts what a bulk send did with a file's rows.
type sendReport struct {
	Rows     int // data rows read (blank lines excluded)
	Enqueued int // new tasks
	Already  int // rows whose task was enqueued before (same idempotency key)
	Rejected int // rows written to the rejects file
	Rejects  string
	Campaign string
	Tenant   string // the tasks' tenant (campaign.Message.TaskTenant)
	Channel  string
	Filename string
	// Last is when the campaign's last send is planned (its latest slot).
	Last time.Time
	// End is when it is expected: Last, or later where a pause or a
	// lowered pace holds its keys (estimateEnd).
	End       expectedEnd
	rejectAll []campaign.Reject
	keys      map[string]struct{} // the GCRA keys its new sends were planned on
}

func newSendCmd(g *globals) *cobra.Command {
	var m campaign.Message
	var csvPath, rejectsPath string
	var dryRun, wait bool
	var mediaURLs, smsVars []string
	var tmplParts templateFlags
	var interactiveJSON, sendAt string
	var validity time.Duration
	cmd := &cobra.Command{
		Use:   "send --channel C --csv FILE",
		Short: "Enqueue one send per CSV row (a `to` column plus parameter columns)",
		Long: `send reads a CSV with a header row: a "to" column (E.164) and any parameter
columns. Each valid row becomes one task; each bad row is reported with its
line number and reason and written to the rejects file with the original
columns plus "line" and "reason", so nothing is lost. Every task's ID is a
hash of the campaign, channel and row content: running the same file again
enqueues nothing twice.

With --wait, send then follows the campaign's deliveries, as the workers
record them (sent or failed, and delivered or read when the provider's
status callbacks reach serve), with a progress bar of the deliveries, their
rate and the expected end, until every send of the campaign (as its
producers counted them, for its tenant) has an outcome. A task deleted from
its queue never gets one: the wait gives up after 10 minutes without
progress past the last planned send, and Ctrl-C stops watching, never the
campaign.

Exit status: 0 all rows enqueued (or already enqueued), 3 some rows rejected,
1 the file could not be read (the error names file:line).

Examples:
  sluice send --channel whatsapp --csv examples/recipients.csv \
    --phone-number-id 106540352242922 --template order_update --lang en_US --params name,order_id
  sluice send --channel sms --csv examples/recipients.csv \
    --from +12025550100 --body "Hi {name}, order {order_id} has shipped."
  sluice send --channel whatsapp --csv photos.csv --phone-number-id 106540352242922 \
    --media image --media-url "{media_url}" --caption "Hi {name}"
  sluice send --channel sms --csv examples/recipients.csv --messaging-service MG… \
    --content-sid HX… --var 1={name} --var 2={order_id}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if csvPath == "" {
				return usageErr("--csv is required")
			}
			switch {
			case m.Channel == "sms":
				m.SMSMediaURLs = mediaURLs
			case len(mediaURLs) > 1:
				return usageErr("--media-url: one for a WhatsApp media message (several make an MMS: --channel sms)")
			case len(mediaURLs) == 1:
				m.MediaURL = mediaURLs[0]
			}
			vars, err := contentVars("--var", smsVars)
			if err != nil {
				return err
			}
			m.ContentVars = vars
			var parts tasks.Template
			if err := tmplParts.apply(&parts, nil); err != nil {
				return err
			}
			m.TemplateHeader, m.TemplateButtons = parts.Header, parts.Buttons
			if interactiveJSON != "" {
				if m.Interactive, err = readInteractive(interactiveJSON); err != nil {
					return err
				}
			}
			if err := parseSendAt(sendAt, &m.SendAt); err != nil {
				return err
			}
			if m.ValidityPeriod, err = validitySeconds(validity); err != nil {
				return err
			}
			ctx := cmd.Context()
			cfg, err := g.loadConfig()
			if err != nil {
				return err
			}
			if m.Campaign == "" {
				m.Campaign = strings.TrimSuffix(filepath.Base(csvPath), filepath.Ext(csvPath))
			}
			if rejectsPath == "" {
				rejectsPath = strings.TrimSuffix(csvPath, filepath.Ext(csvPath)) + ".rejects.csv"
			}
			// A producer without Redis: the dry run's, and the look at the
			// channel before Redis is reached.
			prod, err := app.NewProducer(cfg, nil, nil, nil)
			if err != nil {
				return err
			}
			if _, known := tasks.ChannelTaskType(m.Channel); known {
				if err := prod.CheckChannel(m.Channel); err != nil {
					return usageErr("send: %v", err)
				}
			}
			withConfig(&m, cfg)
			var lim *throttle.Redis
			var store *delivery.Store
			if !dryRun {
				rdb, err := g.connectRedis(ctx, cfg)
				if err != nil {
					return err
				}
				defer rdb.Close()
				lim = app.NewLimiter(cfg, rdb, nil)
				if store, err = server.NewStore(cfg, rdb); err != nil {
					return err
				}
				if prod, err = app.NewProducer(cfg, rdb, lim, store.AddEnqueued); err != nil {
					return err
				}
			}
			rep, err := sendFile(ctx, prod, !dryRun, &m, csvPath, rejectsPath, g.stderr)
			if err != nil {
				return err
			}
			if dryRun {
				fmt.Fprintf(g.stdout, "%s: %d rows: %d would be enqueued, %d rejected (dry run: nothing was enqueued)\n",
					csvPath, rep.Rows, rep.Enqueued, rep.Rejected)
			} else {
				fmt.Fprintf(g.stdout, "%s: %d rows: %d enqueued, %d already enqueued, %d rejected\n",
					csvPath, rep.Rows, rep.Enqueued, rep.Already, rep.Rejected)
			}
			rep.End = expectedEnd{At: rep.Last, Planned: rep.Last}
			if lim != nil && !rep.Last.IsZero() {
				if rep.End, err = estimateEnd(ctx, lim, cfg, m.Channel, slices.Sorted(maps.Keys(rep.keys)), rep.Last); err != nil {
					return fmt.Errorf("enqueued; estimating the last send: %w", err)
				}
			}
			switch {
			case rep.Last.IsZero():
			case rep.End.Unknown:
				fmt.Fprintf(g.stdout, "last send expected: %s\n", rep.End)
			default:
				fmt.Fprintf(g.stdout, "last send expected %s\n", rep.End)
			}
			if rep.Rejected > 0 {
				fmt.Fprintf(g.stdout, "rejected rows written to %s\n", rep.Rejects)
			}
			if wait && store != nil {
				if err := waitDeliveries(ctx, g, store, rep); err != nil {
					return err
				}
			}
			if rep.Rejected > 0 {
				return &ExitError{Code: 3, Err: fmt.Errorf("%d rows rejected", rep.Rejected)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&m.Channel, "channel", "", "whatsapp, sms or webhook")
	f.StringVar(&csvPath, "csv", "", "recipients CSV with a header row and a \"to\" column")
	f.StringVar(&rejectsPath, "rejects", "", "where rejected rows go (default: FILE.rejects.csv)")
	f.StringVar(&m.Campaign, "campaign", "", "campaign name, part of each idempotency key (default: the file's base name)")
	f.StringVar(&m.Priority, "priority", "", "high: every row overtakes planned bulk sends on the same limits (a \"priority\" column sets it per row)")
	f.StringVar(&m.Tenant, "tenant", "", "who the campaign is for: tenants backlogged on one limit share it by channels.*.tenant_weights (default: the campaign name)")
	f.StringVar(&m.PhoneNumberID, "phone-number-id", "", "whatsapp: sender's phone number ID")
	f.StringVar(&m.Template, "template", "", "whatsapp: template name")
	f.StringVar(&m.Language, "lang", "en_US", "whatsapp: template language code")
	f.StringSliceVar(&m.Params, "params", nil, "whatsapp: columns filling the template's {{1}}, {{2}}, …")
	tmplParts.register(cmd, ", with {column} placeholders")
	f.StringVar(&interactiveJSON, "interactive", "", "whatsapp: an interactive message as JSON, or @FILE, its text values with {column} placeholders (docs/whatsapp.md)")
	f.StringVar(&m.Text, "text", "", "whatsapp: free text with {column} placeholders (instead of --template)")
	f.StringVar(&m.MediaType, "media", "", "whatsapp: media message type, image, video, audio, document or sticker (instead of --template and --text)")
	f.StringArrayVar(&mediaURLs, "media-url", nil, "whatsapp: the media's http(s) URL; sms: an MMS's media URL (repeat, at most 10); with {column} placeholders (\"{media_url}\": a column per row)")
	f.StringVar(&m.MediaID, "media-id", "", "whatsapp: an uploaded media's ID instead of --media-url, with {column} placeholders")
	f.StringVar(&m.Caption, "caption", "", "whatsapp: caption of an image, video or document, with {column} placeholders")
	f.StringVar(&m.Filename, "filename", "", "whatsapp: a document's file name, with {column} placeholders")
	f.StringVar(&m.Text, "body", "", "sms: body with {column} placeholders")
	f.StringSliceVar(&m.Senders, "from", nil, "sms: sending number(s), used in turn")
	f.StringVar(&m.MessagingService, "messaging-service", "", "sms: Messaging Service SID (MG…) instead of --from")
	f.StringVar(&m.ContentSID, "content-sid", "", "sms: a Content Template's SID (HX…), instead of --body and --media-url")
	f.StringArrayVar(&smsVars, "var", nil, "sms: a Content Template variable, NAME=VALUE with {column} placeholders (repeat): --var 1={name}")
	f.DurationVar(&validity, "validity-period", 0, "sms: how long Twilio may keep each message queued before dropping it (1s to 10h)")
	f.StringSliceVar(&m.URLs, "url", nil, "webhook: endpoint URL(s), used in turn")
	f.StringVar(&m.EventType, "event", "", "webhook: event type")
	f.StringVar(&m.Endpoint, "endpoint", "", "webhook: the endpoint whose signing secret signs them (channels.webhook.endpoints; default: the default secret)")
	f.StringVar(&sendAt, "send-at", "", "hold every row's send until then (RFC 3339, at most 35 days ahead); they are planned then")
	f.BoolVar(&dryRun, "dry-run", false, "validate the file and build the tasks without enqueuing")
	f.BoolVar(&wait, "wait", false, "after enqueuing, follow the campaign's deliveries with a progress bar (rate, expected end) until every send was sent or failed; Ctrl-C stops watching, not the campaign")
	return cmd
}

// sendFile reads path, writes rejects to rejectsPath, and sends the valid
// rows through prod (enqueue false: a dry run, prod.Check only), a batch
// at a time so that their slots are planned in one limiter call per batch,
// with a progress bar on progress. The producer counts each batch's new
// tasks for the campaign's progress (its Options.Count).
func sendFile(ctx context.Context, prod *producer.Client, enqueue bool, m *campaign.Message, path, rejectsPath string, progress io.Writer) (*sendReport, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	res, err := campaign.Read(f, campaign.Options{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := m.Validate(res.Columns); err != nil {
		return nil, usageErr("%v", err)
	}
	rep := &sendReport{Rows: len(res.Rows) + len(res.Rejects), Campaign: m.Campaign, Tenant: m.TaskTenant(), Channel: m.Channel, Filename: path, rejectAll: res.Rejects,
		keys: map[string]struct{}{}}

	bar, wait := newBar(progress, "enqueue "+m.Channel, int64(len(res.Rows)))
	err = enqueueRows(ctx, prod, enqueue, m, res.Rows, res.Columns,
		func(row campaign.Row, err error) error {
			bar.Increment()
			rep.rejectAll = append(rep.rejectAll, campaign.Reject{Line: row.Line, Raw: row.Raw, Reason: err.Error()})
			return nil
		},
		func(rows []campaign.Row, out []producer.Result, err error) error {
			if err != nil && !errors.Is(err, producer.ErrNotCounted) {
				return fmt.Errorf("enqueue lines %d-%d: %w (re-running the file is safe)", rows[0].Line, rows[len(rows)-1].Line, err)
			}
			if err != nil {
				// The rows enqueued stand even when they were not counted
				// (a re-run finds them already enqueued and would not count
				// them).
				err = fmt.Errorf("enqueue lines %d-%d: enqueued, but not counted for --wait: %w", rows[0].Line, rows[len(rows)-1].Line, err)
			}
			var failed error // the batch's first failed enqueue; the others go on
			for k, r := range out {
				switch {
				case errors.Is(r.Err, tasks.ErrDuplicate):
					rep.Already++
				case errors.Is(r.Err, tasks.ErrKeyInUse), errors.Is(r.Err, producer.ErrInvalid):
					// The producer refused the row (its size, or a key that
					// is another channel's task: this row is not that send):
					// it goes to the rejects file.
					rep.rejectAll = append(rep.rejectAll, campaign.Reject{Line: rows[k].Line, Raw: rows[k].Raw, Reason: r.Err.Error()})
				case r.Err != nil:
					if failed == nil {
						failed = fmt.Errorf("enqueue line %d: %w (re-running the file is safe)", rows[k].Line, r.Err)
					}
				default:
					rep.Enqueued++
					if r.ETA.After(rep.Last) {
						rep.Last = r.ETA
					}
					for _, k := range r.Keys {
						rep.keys[k] = struct{}{}
					}
				}
			}
			bar.IncrBy(len(rows))
			return errors.Join(err, failed)
		})
	if err != nil {
		bar.Abort(false)
		wait()
		// The rows rejected so far are still written, with their reasons.
		if werr := writeRejects(rep, res.Columns, path, rejectsPath, progress); werr != nil {
			return nil, errors.Join(err, werr)
		}
		if rep.Rejects != "" {
			err = fmt.Errorf("%w; the %d rows rejected before it are in %s", err, rep.Rejected, rep.Rejects)
		}
		return nil, err
	}
	bar.SetTotal(-1, true)
	wait()
	if err := writeRejects(rep, res.Columns, path, rejectsPath, progress); err != nil {
		return nil, err
	}
	return rep, nil
}

// writeRejects reports rep's rejected rows on progress (path:line: reason)
// and writes them to rejectsPath with the file's columns, setting
// rep.Rejected and rep.Rejects.
func writeRejects(rep *sendReport, columns []string, path, rejectsPath string, progress io.Writer) error {
	rep.Rejected = len(rep.rejectAll)
	slices.SortStableFunc(rep.rejectAll, func(a, b campaign.Reject) int { return a.Line - b.Line })
	for _, r := range rep.rejectAll {
		fmt.Fprintf(progress, "%s:%d: %s\n", path, r.Line, r.Reason)
	}
	if rep.Rejected == 0 {
		return nil
	}
	out, err := os.Create(rejectsPath)
	if err != nil {
		return err
	}
	if err := campaign.WriteRejects(out, columns, rep.rejectAll); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	rep.Rejects = rejectsPath
	return nil
}

// enqueueBatch is the rows planned and enqueued together.
const enqueueBatch = 256

// enqueueRows builds each row's task with m and sends the tasks through
// prod in batches of enqueueBatch, so that their slots are planned in one
// limiter call per batch. A row whose task cannot be built goes to bad;
// each batch's rows and results (and Send's error) go to done. With
// enqueue false (a dry run) prod only checks each batch (producer.Check).
// The first error bad or done returns stops it.
func enqueueRows(ctx context.Context, prod *producer.Client, enqueue bool, m *campaign.Message, rows []campaign.Row, columns []string,
	bad func(campaign.Row, error) error, done func([]campaign.Row, []producer.Result, error) error) error {
	var batch []producer.Item
	var batchRows []campaign.Row
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		var out []producer.Result
		var err error
		if enqueue {
			out, err = prod.Send(ctx, batch)
		} else {
			out = prod.Check(batch)
		}
		err = done(batchRows, out, err)
		batch, batchRows = batch[:0], batchRows[:0]
		return err
	}
	for i, row := range rows {
		if err := ctx.Err(); err != nil {
			return err
		}
		t, err := m.Task(row, i, columns)
		if err != nil {
			if err := bad(row, err); err != nil {
				return err
			}
			continue
		}
		batch, batchRows = append(batch, producer.Item{Task: t}), append(batchRows, row)
		if len(batch) == enqueueBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// eta renders the time until t, rounded to what a person reads: "in 2.3s",
// "in 1h2m3s", or "now" when t is not ahead.
func eta(t time.Time) string {
	d := time.Until(t)
	switch {
	case d <= 0:
		return "now"
	case d < time.Minute:
		return "in " + d.Round(100*time.Millisecond).String()
	}
	return "in " + d.Round(time.Second).String()
}

// newBar returns a progress bar on w (hidden when w is not a terminal) and
// a function that waits for it to finish drawing.
func newBar(w io.Writer, name string, total int64) (*mpb.Bar, func()) {
	p := mpb.New(mpb.WithOutput(terminalOrNil(w)), mpb.WithWidth(40))
	bar := p.AddBar(total,
		mpb.PrependDecorators(decor.Name(name, decor.WC{C: decor.DindentRight | decor.DextraSpace}), decor.CountersNoUnit("%d / %d")),
		mpb.AppendDecorators(decor.Percentage(), decor.Name(" "), decor.EwmaSpeed(0, "%.0f/s", 30)))
	return bar, p.Wait
}

// withConfig gives m cfg's retry budget and a look at each --url against
// the egress policy before any row (the producer checks each task's
// target, size and channel again when it sends).
func withConfig(m *campaign.Message, cfg *config.Config) {
	m.MaxRetry = cfg.Worker.MaxRetry
	m.CheckURL = func(u string) error { return app.CheckTarget(cfg.Egress.AllowCIDRs, "--url", u) }
}

// waitDeliveries follows the campaign of rep with waitCampaign, reading the
// delivery store's counters of the campaign, and prints the outcome.
func waitDeliveries(ctx context.Context, g *globals, store *delivery.Store, rep *sendReport) error {
	total := int64(rep.Enqueued + rep.Already)
	if total == 0 {
		return nil
	}
	poll := func(ctx context.Context) (campaignCounts, error) {
		p, err := store.Progress(ctx, rep.Tenant, rep.Campaign)
		return campaignCounts{Enqueued: p.Enqueued, Sent: p.Sent, Failed: p.Failed, Delivered: p.Delivered, Read: p.Read, Undelivered: p.Undelivered}, err
	}
	c, err := waitCampaign(ctx, "deliver "+rep.Channel, total, poll, waitOptions{Bar: terminalOrNil(g.stderr), Lines: g.stderr, Expected: rep.End.At})
	fmt.Fprintf(g.stdout, "campaign %s: %d sent, %d failed of %d", rep.Campaign, c.Sent, c.Failed, max(total, c.Enqueued))
	if c.Delivered+c.Undelivered > 0 {
		fmt.Fprintf(g.stdout, "; providers report %d delivered (%d read), %d undelivered", c.Delivered, c.Read, c.Undelivered)
	}
	fmt.Fprintln(g.stdout)
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(g.stdout, "stopped watching; the campaign goes on")
		return nil
	}
	if err != nil {
		return fmt.Errorf("--wait: %w (the campaign goes on; the queue dashboard shows its tasks)", err)
	}
	if c.Failed > 0 {
		fmt.Fprintf(g.stdout, "failed sends are archived with their reason: see the queue dashboard (/queues/, archived) or GET /v1/tasks/{id}\n")
	}
	return nil
}
