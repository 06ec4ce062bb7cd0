// Package demo runs `sluice demo`: a sample campaign end to end in one
// process, against local emulators of the providers, through the system
// `sluice serve` runs (app.Build) and its HTTP enqueue API. The CLI's demo
// command only parses flags and calls Run.
package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/examples"
	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/callbacks"
	"github.com/sluice-dev/sluice/internal/campaign"
	"github.com/sluice-dev/sluice/internal/emulator"
	"github.com/sluice-dev/sluice/internal/server"
	"github.com/sluice-dev/sluice/redact"
	"github.com/sluice-dev/sluice/tasks"
)

// Demo campaign settings: one WhatsApp business number, a pool of Twilio
// long codes, and customers' webhook endpoints. 50 long codes at 1/s each
// keep the account under Twilio's 100 concurrent requests, which a paced
// send counts from its reservation until its request ends (its hold
// included).
const (
	demoPhoneNumberID = "106540352242922"
	demoSMSSenders    = 50
	demoWebhookHosts  = 20
)

// Options configure Run.
type Options struct {
	// Recipients, when above 0, generates a campaign of that many rows
	// instead of the bundled examples/recipients.csv (1,000 rows).
	Recipients int
	// JSON prints the summary as JSON (Summary), and nothing else, on
	// Stdout.
	JSON bool
	// Timeout bounds the campaign; Run gives up after it. Zero: 10 minutes.
	Timeout time.Duration
	// Serve keeps the server, the worker and the emulators up after the
	// campaign, until ctx ends, and prints the dashboards' URLs.
	Serve bool
	// Listen is the loopback host:port of the API and dashboards (port 0:
	// any free port). Empty: DefaultListen.
	Listen string
	// ListenSet says Listen was the user's choice: busy, it is an error,
	// where the default falls back to a free port.
	ListenSet bool
	// RedisURL names a real Redis; empty: the demo's own, a private
	// redis-server when one is installed (unless Embedded), else an
	// embedded miniredis.
	RedisURL string
	// Embedded picks the embedded miniredis even when redis-server is
	// installed.
	Embedded bool
	// Redis, when its Mode is cluster or sentinel and RedisURL is empty,
	// is the Redis the demo runs on (a configuration's redis section).
	Redis *config.RedisConfig
	// Stdout gets the summary; Stderr notices. Nil: io.Discard.
	Stdout, Stderr io.Writer
	// Progress gets the progress bars; nil: none (not a terminal).
	Progress io.Writer
	// Logger is the parts' logger (the worker's with component=worker,
	// the server's with component=http); nil: slog.Default().
	Logger *slog.Logger
}

// DefaultListen is Options.Listen's default.
const DefaultListen = "127.0.0.1:9090"

// ChannelSummary is one channel's line of the demo summary.
type ChannelSummary struct {
	Channel    string `json:"channel"`
	Valid      int    `json:"valid_rows"`
	Enqueued   int    `json:"enqueued"`
	Delivered  int    `json:"delivered"`
	Duplicates int    `json:"duplicates"`
	Archived   int    `json:"archived"`
	// Waiting are the tasks still in their queue when the demo ended
	// (pending, scheduled, retrying or running: a paused scope's sends
	// wait there); Lost the ones neither delivered, archived nor waiting.
	Waiting           int `json:"waiting"`
	Lost              int `json:"lost"`
	ProviderThrottled int `json:"provider_throttle_responses"`
	// DequeuesPerSend and LimiterCallsPerSend are the Redis work per
	// delivered send: task attempts (sluice_tasks_total) and limiter round
	// trips (sluice_limiter_calls_total) over deliveries.
	DequeuesPerSend     float64 `json:"dequeues_per_send"`
	LimiterCallsPerSend float64 `json:"limiter_calls_per_send"`
	Bottleneck          string  `json:"bottleneck_limit"`
	BottleneckKeys      int     `json:"bottleneck_keys"`
	CapPerKey           float64 `json:"cap_per_key_per_second"`
	AchievedPerKey      float64 `json:"achieved_per_key_per_second"`
	Ratio               float64 `json:"achieved_ratio"`
	// MaxInAnySecond is the most deliveries any key had within any
	// 1-second span, wherever it starts (not only calendar seconds).
	MaxInAnySecond int     `json:"max_per_key_in_any_second"`
	Seconds        float64 `json:"seconds"`
}

// Summary is what `sluice demo --json` prints.
type Summary struct {
	Redis      string           `json:"redis"`
	Rows       int              `json:"rows"`
	Rejected   int              `json:"rejected_rows"`
	RejectsCSV string           `json:"rejects_csv,omitempty"`
	Channels   []ChannelSummary `json:"channels"`
	Elapsed    float64          `json:"elapsed_seconds"`
	Complete   bool             `json:"complete"`
}

// Run runs the demo: Sluice's main job in one process with nothing to
// install. Its own Redis unless o.RedisURL names one, local emulators of
// the WhatsApp Cloud API, Twilio and webhook receivers that enforce the
// providers' real limits, and the system `sluice serve` runs
// (app.Build, server.Start) with the default channel limits, its queues
// (sluice-demo-*) and key prefix (sluice-demo) of its own. It enqueues the
// campaign on the WhatsApp, SMS and webhook channels through the HTTP
// enqueue API, shows a progress bar per channel and ends with a summary
// per channel. The error is a part's, or a campaign not finished within
// o.Timeout.
func Run(parent context.Context, o Options) error {
	started := time.Now()
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.Listen == "" {
		o.Listen = DefaultListen
	}
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	ctx, cancel := context.WithTimeout(parent, o.Timeout)
	defer cancel()

	// Redis: a real one if named, else the demo's own.
	var err error
	url := o.RedisURL
	redisName := "redis " + redact.URL(url)
	var rdb redis.UniversalClient
	if r := o.Redis; url == "" && r != nil && r.Mode != "" && r.Mode != config.RedisSingle {
		redisName = "redis " + r.Mode + " " + strings.Join(r.Addrs, ",")
		cfg := config.Default()
		cfg.Redis = *r
		rdb, err = app.Connect(ctx, cfg, nil)
	} else {
		if url == "" {
			var stop func()
			if url, redisName, stop, err = ownRedis(ctx, o.Embedded, o.Stderr); err != nil {
				return err
			}
			defer stop()
		}
		rdb, err = app.ConnectURL(ctx, url)
	}
	if err != nil {
		return err
	}
	defer rdb.Close()

	// The server `sluice serve` runs, on loopback with no API keys. The
	// emulated Twilio posts its signed status callbacks to it (the URL
	// comes with each SMS), the emulated WhatsApp its status webhooks (the
	// app's URL, set here).
	ln, base, err := listen(o.Listen, o.ListenSet, o.Stderr)
	if err != nil {
		return err
	}
	serving := false // server.Start owns ln from then on
	defer func() {
		if !serving {
			ln.Close()
		}
	}()
	em, err := emulator.Start(emulator.Options{WebhookEndpoints: demoWebhookHosts, WhatsAppWebhookURL: base + callbacks.WhatsAppPath})
	if err != nil {
		return err
	}
	defer em.Close()

	// The campaign.
	data := examples.Recipients
	name := "examples/recipients.csv"
	if o.Recipients > 0 {
		var buf bytes.Buffer
		if err := campaign.Generate(&buf, o.Recipients, 1); err != nil {
			return err
		}
		data, name = buf.Bytes(), fmt.Sprintf("generated campaign (%d rows)", o.Recipients)
	}
	res, err := campaign.Read(bytes.NewReader(data), campaign.Options{})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	sum := &Summary{Redis: redisName, Rows: len(res.Rows) + len(res.Rejects), Rejected: len(res.Rejects)}
	if len(res.Rejects) > 0 {
		sum.RejectsCSV = filepath.Join(os.TempDir(), "sluice-demo-rejects.csv")
		if f, err := os.Create(sum.RejectsCSV); err == nil {
			_ = campaign.WriteRejects(f, res.Columns, res.Rejects)
			_ = f.Close()
		}
	}

	// The worker: default limits, providers replaced by the emulators, queues
	// and keys of their own so a real Redis' other data is untouched.
	runID := time.Now().UTC().Format("20060102T150405.000")
	cfg := config.Default()
	cfg.Redis.KeyPrefix = "sluice-demo"
	if _, cluster := rdb.(*redis.ClusterClient); cluster {
		// What a cluster wants (docs/redis-cluster.md): each sender's
		// limits on a master of their own hash tag, and its sends in a
		// queue group, so that the asynq work spreads as well.
		for ch, field := range map[string]string{"whatsapp": "phone_number_id", "sms": "sender", "webhook": "host", "http": "host"} {
			cfg.Channels[ch].SpreadBy = field
			cfg.Channels[ch].QueueGroups = 4
		}
	}
	// The emulated webhook receivers listen on loopback, which egress
	// refuses unless the configuration admits it.
	cfg.Egress.AllowCIDRs = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	cfg.Channels["whatsapp"].BaseURL = em.WhatsAppURL()
	cfg.Channels["sms"].BaseURL = em.TwilioURL()
	cfg.Channels["http"].Enabled = false
	for _, ch := range []string{"whatsapp", "sms", "webhook"} {
		cfg.Channels[ch].Queue = "sluice-demo-" + ch
	}
	secrets := map[string]string{
		"WHATSAPP_TOKEN":     emulator.DefaultWhatsAppToken,
		"TWILIO_ACCOUNT_SID": emulator.DefaultTwilioAccountSID,
		"TWILIO_AUTH_TOKEN":  emulator.DefaultTwilioAuthToken,
		"WEBHOOK_SECRET":     emulator.DefaultWebhookSecret,
		// The WhatsApp status webhooks: the app secret signs them; the
		// verify token is for Meta's subscription check, which the
		// emulator does not make.
		"WHATSAPP_APP_SECRET":   emulator.DefaultWhatsAppAppSecret,
		"WHATSAPP_VERIFY_TOKEN": "sluice-demo-verify-token",
	}
	cfg.HTTP.PublicURL = base
	secretOf := func(env string) (string, error) { return secrets[env], nil }
	sys, err := app.Build(cfg, rdb, app.BuildOptions{Secrets: secretOf, Logger: o.Logger, WorkerLogger: o.Logger.With("component", "worker")})
	if err != nil {
		return err
	}
	w, reg := sys.Worker, sys.Registry
	stopServer, err := server.Start(ln, server.PartsOf(sys, nil, secretOf, o.Logger.With("component", "http")))
	if err != nil {
		return err
	}
	serving = true
	defer stopServer()
	// The worker runs before anything is enqueued, as a deployment's do: a
	// plan starts when it is made, and a worker that started only after
	// every channel was enqueued (a second and more on the embedded Redis)
	// found the first planned seconds gone, and the sends it had to plan
	// again went to the end of the campaign.
	if err := w.Start(); err != nil {
		return err
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			w.Shutdown()
		}
	}
	defer stop()

	// Enqueued through the HTTP API: each send's slot is planned at
	// enqueue, so the worker dequeues it once, at its second, and holds it
	// to its slot.
	msgs := messages(runID, em.WebhookURLs())
	enqueued := map[string]int{}
	client := newAPIClient(base, "")
	var last time.Time
	for _, ms := range msgs {
		m := ms[0]
		err := client.enqueueRows(ctx, ms, res.Rows, res.Columns,
			func(row campaign.Row, err error) error { return fmt.Errorf("%s line %d: %w", m.Channel, row.Line, err) },
			func(row campaign.Row, r api.BatchResult) error {
				if r.Accepted == nil {
					detail := ""
					if r.Problem != nil {
						detail = r.Problem.Detail
					}
					return fmt.Errorf("enqueue %s line %d: %d %s", m.Channel, row.Line, r.Status, detail)
				}
				enqueued[m.Channel]++
				if r.ETA.After(last) {
					last = r.ETA
				}
				return nil
			})
		if err != nil {
			return err
		}
	}
	if !o.JSON {
		fmt.Fprintf(o.Stdout, "Sluice demo: %s, %d rows (%d rejected), %d sends enqueued on whatsapp, sms and webhook; %s\n",
			name, sum.Rows, sum.Rejected, enqueued["whatsapp"]+enqueued["sms"]+enqueued["webhook"], redisName)
		for _, r := range res.Rejects {
			fmt.Fprintf(o.Stdout, "  rejected %s:%d: %s\n", name, r.Line, r.Reason)
		}
		switch d := time.Until(last); {
		case d <= 0:
			fmt.Fprintln(o.Stdout, "every send's slot is planned; all are due now")
		case d < time.Minute:
			fmt.Fprintf(o.Stdout, "every send's slot is planned; the last is expected in %s\n", d.Round(100*time.Millisecond))
		default:
			fmt.Fprintf(o.Stdout, "every send's slot is planned; the last is expected in %s\n", d.Round(time.Second))
		}
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	var progress io.Writer
	if !o.JSON {
		progress = o.Progress
	}
	complete := wait(ctx, progress, em, insp, cfg.Channels, enqueued)
	if !o.Serve {
		stop() // the counts below are final
	}

	sum.Complete = complete
	sum.Elapsed = time.Since(started).Seconds()
	sum.Channels = summarize(cfg.Channels, em, insp, reg, enqueued, len(res.Rows))
	if o.JSON {
		enc := json.NewEncoder(o.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(sum)
	}
	printSummary(o.Stdout, sum)
	kinds := map[string]int{}
	for _, r := range em.Records() {
		if r.Channel == emulator.ChannelWhatsApp {
			kinds[r.Kind]++
		}
	}
	fmt.Fprintf(o.Stdout, "whatsapp messages the provider accepted, by kind: %d media templates (an image header), %d interactive (reply buttons)\n",
		kinds["template"], kinds["interactive"])
	if !complete {
		return errors.New("demo did not finish: " + ctx.Err().Error())
	}
	if o.Serve {
		serve(parent, o.Stdout, base)
	}
	return nil
}

// serve keeps the worker, the server and the emulators up until ctx
// ends (Ctrl-C), so the dashboards and the API can be tried.
func serve(ctx context.Context, out io.Writer, base string) {
	fmt.Fprintf(out, "\nServing until Ctrl-C (no API keys: any Bearer value is taken):\n  limits dashboard  %s/limits/\n  queue dashboard   %s/queues/ (read-only)\n  enqueue API       POST %s/v1/messages, /v1/webhooks, /v1/calls (and /batch)\n  API description   %s/v1/openapi.json\n  metrics           %s/metrics\n",
		base, base, base, base, base)
	<-ctx.Done()
}

// messages are the campaign's messages on each channel, the rows taking
// a channel's messages in turn: WhatsApp from one number, a media template
// (an image header, the row's name and order) and an interactive message
// (two reply buttons), so that each recipient gets one WhatsApp message;
// SMS from demoSMSSenders numbers in turn; webhooks to hooks in turn.
func messages(runID string, hooks []string) [][]*campaign.Message {
	senders := make([]string, demoSMSSenders)
	for i := range senders {
		senders[i] = fmt.Sprintf("+1415555%04d", 100+i) // 415-555-0100 … 0199, fictional
	}
	name := "demo-" + runID
	return [][]*campaign.Message{
		{
			{Channel: "whatsapp", Campaign: name, PhoneNumberID: demoPhoneNumberID, Template: "order_shipped", Language: "en_US",
				Params: []string{"name", "order_id"}, TemplateHeader: &tasks.TemplateHeader{Type: "image", Link: "https://cdn.example.com/orders/{order_id}.jpg"}},
			{Channel: "whatsapp", Campaign: name, PhoneNumberID: demoPhoneNumberID, Interactive: &tasks.Interactive{
				Type: tasks.InteractiveButton, Body: "Hi {name}, did order {order_id} arrive?",
				Buttons: []tasks.ReplyButton{{ID: "arrived-{order_id}", Title: "Yes, thanks"}, {ID: "missing-{order_id}", Title: "Not yet"}}}},
		},
		{{Channel: "sms", Campaign: name, Senders: senders, Text: "Hi {name}, your order {order_id} has shipped."}},
		{{Channel: "webhook", Campaign: name, URLs: hooks, EventType: "order.shipped"}},
	}
}

// wait shows a bar per channel on progress (nil: none) until every task
// is delivered or archived, or ctx ends. It reports whether everything
// finished.
func wait(ctx context.Context, progress io.Writer, em *emulator.Server, insp *asynq.Inspector, chans map[string]*config.ChannelConfig, enqueued map[string]int) bool {
	var p *mpb.Progress
	bars := map[string]*mpb.Bar{}
	if progress != nil {
		p = mpb.New(mpb.WithOutput(progress), mpb.WithWidth(40))
		for _, ch := range []string{"whatsapp", "sms", "webhook"} {
			bars[ch] = p.AddBar(int64(enqueued[ch]),
				mpb.PrependDecorators(decor.Name(ch, decor.WC{W: 9, C: decor.DindentRight}), decor.CountersNoUnit("%d / %d", decor.WC{W: 12})),
				mpb.AppendDecorators(decor.Percentage(decor.WC{W: 5}), decor.Name(" "), decor.EwmaSpeed(0, "%.0f/s", 20)))
		}
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	done := false
	for !done {
		select {
		case <-ctx.Done():
			if p != nil {
				for _, b := range bars {
					b.Abort(false)
				}
				p.Wait()
			}
			return false
		case <-tick.C:
		}
		stats := em.Stats()
		done = true
		for _, ch := range []string{"whatsapp", "sms", "webhook"} {
			archived, _ := queueCounts(insp, chans[ch].Queues())
			n := stats[ch].Unique + archived
			if bar := bars[ch]; bar != nil {
				bar.EwmaSetCurrent(int64(n), 100*time.Millisecond)
			}
			if n < enqueued[ch] {
				done = false
			}
		}
	}
	if p != nil {
		p.Wait()
	}
	return true
}

// queueCounts is how many tasks asynq has archived in queues (a channel's
// queue and queue groups), and how many it still holds to run; a queue it
// cannot read (one that never held a task) counts none.
func queueCounts(insp *asynq.Inspector, queues []string) (archived, waiting int) {
	for _, q := range queues {
		if qi, err := insp.GetQueueInfo(q); err == nil {
			archived += qi.Archived
			waiting += qi.Pending + qi.Active + qi.Scheduled + qi.Retry
		}
	}
	return archived, waiting
}

// summarize computes each channel's line from the emulators' records: they
// are the providers' view, the ground truth of what was delivered. chans
// give each channel's queue and bottleneck limit.
func summarize(chans map[string]*config.ChannelConfig, em *emulator.Server, insp *asynq.Inspector, reg *prometheus.Registry, enqueued map[string]int, valid int) []ChannelSummary {
	stats := em.Stats()
	records := em.Records()
	dequeues := counterValues(reg, "sluice_tasks_total", "", "")
	calls := counterValues(reg, "sluice_limiter_calls_total", "", "")
	bottleneck := map[string]string{"whatsapp": "throughput", "sms": "sender", "webhook": "host"}
	var out []ChannelSummary
	for _, ch := range []string{"whatsapp", "sms", "webhook"} {
		st := stats[ch]
		archived, waiting := queueCounts(insp, chans[ch].Queues())
		s := ChannelSummary{
			Channel: ch, Valid: valid, Enqueued: enqueued[ch], Delivered: st.Unique, Duplicates: st.Duplicates,
			Archived: archived, Waiting: waiting, ProviderThrottled: st.Throttled,
			Bottleneck: bottleneck[ch],
		}
		if st.Unique > 0 {
			s.DequeuesPerSend = float64(dequeues[ch]) / float64(st.Unique)
			s.LimiterCallsPerSend = float64(calls[ch]) / float64(st.Unique)
		}
		s.Lost = max(0, s.Enqueued-s.Delivered-s.Archived-s.Waiting)
		if r, ok := chans[ch].Rule(s.Bottleneck); ok {
			s.CapPerKey = float64(r.Limit.Rate.Limit) / r.Limit.Rate.Period.Seconds()
		}
		s.BottleneckKeys, s.AchievedPerKey, s.Seconds = achieved(records, ch)
		for _, n := range emulator.MaxInSpan(records, ch, time.Second) {
			s.MaxInAnySecond = max(s.MaxInAnySecond, n)
		}
		if s.CapPerKey > 0 {
			s.Ratio = s.AchievedPerKey / s.CapPerKey
		}
		out = append(out, s)
	}
	return out
}

// achieved measures, per sender key (phone number, From, webhook host), the
// deliveries per second from its first delivery to its last, (n-1)/span,
// and returns the mean over keys (keys with one delivery left out) and the
// channel's span in seconds.
func achieved(records []emulator.Record, channel string) (keys int, perKey float64, span float64) {
	type agg struct {
		first, last time.Time
		n           int
	}
	by := map[string]*agg{}
	var t0, t1 time.Time
	for _, r := range records {
		if r.Channel != channel || r.Duplicate {
			continue
		}
		if t0.IsZero() || r.At.Before(t0) {
			t0 = r.At
		}
		if r.At.After(t1) {
			t1 = r.At
		}
		a := by[r.Sender]
		if a == nil {
			a = &agg{first: r.At, last: r.At}
			by[r.Sender] = a
		}
		if r.At.Before(a.first) {
			a.first = r.At
		}
		if r.At.After(a.last) {
			a.last = r.At
		}
		a.n++
	}
	var total float64
	var counted int
	for _, a := range by {
		if d := a.last.Sub(a.first).Seconds(); a.n > 1 && d > 0 {
			total += float64(a.n-1) / d
			counted++
		}
	}
	if counted == 0 {
		return len(by), 0, t1.Sub(t0).Seconds()
	}
	return len(by), total / float64(counted), t1.Sub(t0).Seconds()
}

// counterValues reads a counter vec from reg, filtered on label=value (all
// series when label is ""), summed per channel.
func counterValues(reg *prometheus.Registry, name, label, value string) map[string]int {
	out := map[string]int{}
	mfs, err := reg.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ch string
			match := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "channel" {
					ch = lp.GetValue()
				}
				if label == "" || (lp.GetName() == label && lp.GetValue() == value) {
					match = true
				}
			}
			if match {
				out[ch] += int(m.GetCounter().GetValue())
			}
		}
	}
	return out
}

func printSummary(w io.Writer, s *Summary) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "channel\tvalid\tdelivered\tdup\twaiting\tlost\tarchived\tprovider throttles\tbottleneck\tkeys\tcap/s/key\tachieved/s/key\tratio\tmax in any 1s\tdequeues/send\tlimiter calls/send\tseconds\t")
	for _, c := range s.Channels {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%.0f\t%.2f\t%.2f\t%d\t%.2f\t%.2f\t%.1f\t\n",
			c.Channel, c.Valid, c.Delivered, c.Duplicates, c.Waiting, c.Lost, c.Archived, c.ProviderThrottled,
			c.Bottleneck, c.BottleneckKeys, c.CapPerKey, c.AchievedPerKey, c.Ratio, c.MaxInAnySecond,
			c.DequeuesPerSend, c.LimiterCallsPerSend, c.Seconds)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\n%d rows, %d rejected", s.Rows, s.Rejected)
	if s.RejectsCSV != "" {
		fmt.Fprintf(w, " (written to %s)", s.RejectsCSV)
	}
	fmt.Fprintf(w, "; %s; %.1fs in all\n", s.Redis, s.Elapsed)
	fmt.Fprintln(w, "achieved = (deliveries - 1) / (last - first delivery) per key, the mean over keys; the cap is the limit's rate.")
	fmt.Fprintln(w, "max in any 1s = the most deliveries to one key within any 1-second span, wherever it starts (the providers' strictest reading).")
}

// listen listens on addr, which must be a loopback address (the demo has
// no API keys). When the default port is busy it falls back to any free
// one, saying so on stderr; a port the user chose (explicit) that is busy
// is an error, as the examples they run against it would reach another
// server. It returns the listener and its base URL.
func listen(addr string, explicit bool, stderr io.Writer) (net.Listener, string, error) {
	listen := addr
	if err := app.CheckListen(listen, false); err != nil {
		return nil, "", fmt.Errorf("--listen: the demo has no API keys: %w", err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil && explicit {
		return nil, "", fmt.Errorf("--listen %s: %w (pick another port, or port 0 for any free one)", listen, err)
	}
	if err != nil {
		host, _, _ := net.SplitHostPort(listen)
		if ln, err = net.Listen("tcp", net.JoinHostPort(host, "0")); err != nil {
			return nil, "", fmt.Errorf("--listen %s: %w", listen, err)
		}
		fmt.Fprintf(stderr, "--listen %s is taken; serving on %s\n", listen, ln.Addr())
	}
	if err := app.CheckExposure(listen, ln.Addr(), false); err != nil {
		ln.Close()
		return nil, "", fmt.Errorf("--listen: the demo has no API keys: %w", err)
	}
	return ln, "http://" + ln.Addr().String(), nil
}
