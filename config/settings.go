package config

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

// ChannelSettings are a channel's tunables, one field per row of
// channelSettings (below), which gives each its YAML key, default, bounds
// and documentation. After Default, Load or Parse every field holds the
// value in effect: the file's, else the row's default. An explicit zero is
// kept as zero where the row allows it ("headroom: 0%" is no headroom), so
// zero here never stands for "unset"; Apply turns each into the
// worker.Channel field, where zero is the worker's default.
type ChannelSettings struct {
	// ProbeEvery: see channels.<name>.probe_every.
	ProbeEvery time.Duration
	// Timeout: see channels.<name>.timeout.
	Timeout time.Duration
	// ThrottleBackoff: see channels.<name>.throttle_backoff.
	ThrottleBackoff time.Duration
	// MaxRetryAfter: see channels.<name>.max_retry_after.
	MaxRetryAfter time.Duration
	// MaxPayloadBytes: see channels.<name>.max_payload_bytes.
	MaxPayloadBytes int
	// Headroom is a fraction (0.015 for "1.5%"): see channels.<name>.headroom.
	Headroom float64
	// MaxMargin: see channels.<name>.max_margin.
	MaxMargin time.Duration
	// Hold: see channels.<name>.hold.
	Hold time.Duration
	// PairBackoff: see channels.<name>.pair_backoff.
	PairBackoff time.Duration
	// BatchSends: see channels.<name>.batch_sends.
	BatchSends bool
	// SpreadBy: see channels.<name>.spread_by.
	SpreadBy string
	// QueueGroups: see channels.<name>.queue_groups.
	QueueGroups int
	// TenantWeights maps a tenant to its weight: see
	// channels.<name>.tenant_weights. Weights are float64, the type the
	// worker and the limiter (throttle.ReserveOptions) take; the file gives
	// whole numbers.
	TenantWeights map[string]float64
}

// channelSettings is the one table of channel settings. Each row drives:
// the decoder (YAML key, parse, bounds and their error messages), Default
// (the default, per channel where it differs), the settings part of
// sluice.example.yaml (TestExampleChannelSettings regenerates it) and the
// conversion to worker.Channel (ChannelSettings.Apply). Rows are in the
// order the file documents them and unknown-field errors list them.
//
// To add a channel setting:
//  1. add its field to worker.Channel (worker/worker.go), with the doc and
//     its zero-means-default handling where the worker applies defaults;
//  2. add its field to ChannelSettings above and a row here: YAML key,
//     doc line, default (read from the worker's or throttle's exported
//     Default… constant, never a second literal), bounds, what an explicit
//     0 means if 0 is valid (and the worker's value for it), and the two
//     field accessors;
//  3. run `go test ./config -run TestExampleChannelSettings -update` to
//     regenerate the settings part of sluice.example.yaml, and commit it.
//
// The decoder, Default, the example file and internal/app's conversion to
// worker.Channel pick the row up with no further change.
var channelSettings = []channelSetting{
	durationSetting{
		key:      "probe_every",
		doc:      "after the provider refused the channel's credentials (WhatsApp 190, Twilio 20003, HTTP 401/403) the channel is paused, its tasks kept; a worker checks the credentials this long after, then doubling up to 10m, and the first check that passes resumes it.",
		channels: []string{"whatsapp", "sms"},
		def:      same(worker.DefaultProbeEvery),
		at:       func(s *ChannelSettings) *time.Duration { return &s.ProbeEvery },
		worker:   func(ch *worker.Channel) *time.Duration { return &ch.ProbeEvery },
	},
	durationSetting{
		key: "timeout",
		doc: "limit on one request to the provider.",
		def: same(channels.DefaultTimeout),
		at:  func(s *ChannelSettings) *time.Duration { return &s.Timeout },
		// Not a worker.Channel field: internal/app gives it to the
		// channel's HTTP client.
	},
	durationSetting{
		key:    "throttle_backoff",
		doc:    "delay after a provider throttle response without Retry-After.",
		def:    same(worker.DefaultThrottleBackoff),
		at:     func(s *ChannelSettings) *time.Duration { return &s.ThrottleBackoff },
		worker: func(ch *worker.Channel) *time.Duration { return &ch.ThrottleBackoff },
	},
	durationSetting{
		key: "max_retry_after",
		doc: "longest wait a provider may ask for (Retry-After, Meta's estimated_time_to_regain_access, a daily reset); a longer one is cut to this.",
		def: func(channel string) time.Duration {
			if channel == "whatsapp" || channel == "sms" {
				return worker.DefaultMaxRetryAfter // daily limits reset within a day
			}
			return time.Hour
		},
		max:    7 * 24 * time.Hour, // the longest documented provider wait is a day
		why:    "a longer cap would let a provider park tasks for that long",
		at:     func(s *ChannelSettings) *time.Duration { return &s.MaxRetryAfter },
		worker: func(ch *worker.Channel) *time.Duration { return &ch.MaxRetryAfter },
	},
	bytesSetting{
		key: "max_payload_bytes",
		doc: "largest task payload, in bytes of JSON; the worker archives a larger task unread.",
		def: payloadCap,
		max: payloadCap,
		why: func(channel string) string {
			return "the cap of " + taskType(channel) + " payloads (tasks.MaxPayloadBytes)"
		},
		at:     func(s *ChannelSettings) *int { return &s.MaxPayloadBytes },
		worker: func(ch *worker.Channel) *int { return &ch.MaxPayloadBytes },
	},
	percentSetting{
		key:        "headroom",
		doc:        "widens the paced interval of the channel's gcra limits by this share, the margin for jitter between Sluice and the provider: 80/s is paced at 78.8/s with 1.5%, so a send may reach the provider up to 15ms late relative to the one a second after it. Raise it when the provider is far away.",
		def:        throttle.DefaultHeadroom,
		max:        throttle.MaxHeadroom,
		zeroMeans:  "no headroom (the measured margin may still widen the spacing)",
		workerZero: worker.NoHeadroom,
		at:         func(s *ChannelSettings) *float64 { return &s.Headroom },
		worker:     func(ch *worker.Channel) *float64 { return &ch.Headroom },
	},
	durationSetting{
		key:        "max_margin",
		doc:        "the most a worker widens the headroom's margin, to how late the channel's sends actually leave on its host (the 99.9th percentile of the last 10-20s) and to what throttles after late departures taught (docs/pacing.md, Margin).",
		def:        same(worker.DefaultMaxMargin),
		max:        500 * time.Millisecond, // a third of every limit's cap
		why:        "the widest the measured pacing margin may make the spacing",
		zeroMeans:  "the headroom stays fixed",
		workerZero: worker.FixedMargin,
		at:         func(s *ChannelSettings) *time.Duration { return &s.MaxMargin },
		worker:     func(ch *worker.Channel) *time.Duration { return &ch.MaxMargin },
	},
	durationSetting{
		key:    "hold",
		doc:    "longest a worker holds a send with a firm slot before its instant; holds are under a second while the sends keep pace with their plan.",
		def:    same(throttle.DefaultHold),
		min:    time.Second,
		max:    10 * time.Second,
		why:    "asynq brings a planned send back at the whole second of its slot, so the hold must span a second",
		at:     func(s *ChannelSettings) *time.Duration { return &s.Hold },
		worker: func(ch *worker.Channel) *time.Duration { return &ch.Hold },
	},
	durationSetting{
		key:    "pair_backoff",
		doc:    "delay after a provider throttle that concerns one recipient (WhatsApp 131056, Twilio 14107) and names no wait.",
		def:    same(worker.DefaultPairBackoff),
		at:     func(s *ChannelSettings) *time.Duration { return &s.PairBackoff },
		worker: func(ch *worker.Channel) *time.Duration { return &ch.PairBackoff },
	},
	boolSetting{
		key:    "batch_sends",
		doc:    "the producer (`sluice send`, the HTTP API, `sluice enqueue`) carries one sender's sends with an idempotency key planned for the same second in one asynq task of up to 100 (sluice:batch), so that asynq's enqueue, forward, dequeue and completion are paid once per batch; each send keeps its ID, claim, slot, delivery record and retries, and one that must come back becomes a task of its own (docs/pacing.md, Batch tasks: what differs, and why it is off by default). Every worker runs batch tasks whatever this says: turn it on once no worker older than this setting serves the channel's queue.",
		def:    false,
		at:     func(s *ChannelSettings) *bool { return &s.BatchSends },
		worker: func(ch *worker.Channel) *bool { return &ch.BatchSends },
	},
	fieldSetting{
		key:    "spread_by",
		doc:    "a task field (phone_number_id for whatsapp, sender for sms, host for webhook and http) whose value becomes the scope, and so the Redis Cluster hash tag, of every limit key and pause that names it: \"whatsapp:number:{phone_number_id}\" is kept as \"whatsapp/<id>:number:<id>\", so that a channel's numbers spread over a cluster's masters while each number's pace, pairs and pauses are still decided together in one script. Keys that do not name it (a recipient's daily window, the channel's pause) stay in the channel's scope; on a cluster they are decided just before the number's slot, in a call of their own (docs/redis-cluster.md). Every gcra limit's key must name the field. Changing it renames the keys: pause the channel while the workers restart with it, and the limits start over.",
		at:     func(s *ChannelSettings) *string { return &s.SpreadBy },
		worker: func(ch *worker.Channel) *string { return &ch.SpreadBy },
	},
	countSetting{
		key:    "queue_groups",
		doc:    "with spread_by, the channel's queue is split into this many asynq queues, <queue>.g0 to <queue>.g<n-1>, and each send goes to the one its spread_by value falls in (FNV-1a modulo n), so that on a Redis Cluster the enqueue, dequeue and completion of the channel's sends spread over the masters as its limits do; a sender's sends keep one queue. Workers serve the groups and the queue itself (tasks that plain asynq clients enqueue), each at the channel's priority. Raise it on the workers before the producers. 1 keeps one queue; take several per master (12 for 3 masters), since each group's hash tag falls on a master by chance. Raising it moves only new sends; the queued ones are served where they are. Lower it only once the groups above the new count are empty: workers no longer serve them (docs/redis-cluster.md).",
		def:    1,
		max:    tasks.MaxQueueGroups,
		at:     func(s *ChannelSettings) *int { return &s.QueueGroups },
		worker: func(ch *worker.Channel) *int { return &ch.QueueGroups },
	},
	weightsSetting{
		key: "tenant_weights",
		doc: "tenants' shares of a limit paced faster than 1/s (one number's 80/s), a mapping tenant: weight: tenants backlogged on it take turns by weight instead of first come, first served. A send's tenant is its payload's \"tenant\" (`sluice send`: --tenant, default the campaign name); unlisted tenants weigh 1. Example: {acme: 3, globex: 1}.",
		max: throttle.MaxTenantWeight,
	},
}

// channelSetting is one row of channelSettings.
type channelSetting interface {
	// name is the YAML key.
	name() string
	// appliesTo reports whether channel takes the setting.
	appliesTo(channel string) bool
	// setDefault writes the row's default for channel into s.
	setDefault(s *ChannelSettings, channel string)
	// decode reads node n (at path) into s, reporting problems to d.
	decode(d *decoder, n *yaml.Node, path, channel string, s *ChannelSettings)
	// apply copies the row's value from s into ch, if it lands there.
	apply(s *ChannelSettings, ch *worker.Channel)
	// describe is the row's documentation: doc, bounds, what 0 means and
	// the defaults, as sentences.
	describe() string
}

func same[T any](v T) func(string) T { return func(string) T { return v } }

func taskType(channel string) string {
	t, _ := tasks.ChannelTaskType(channel)
	return t
}

func payloadCap(channel string) int { return tasks.MaxPayloadBytes(taskType(channel)) }

func appliesTo(channels []string, channel string) bool {
	return channels == nil || slices.Contains(channels, channel)
}

// defaults renders a per-channel default: "15s", or "24h for whatsapp and
// sms, 1h for webhook and http".
func defaults[T any](channels []string, def func(string) T, show func(T) string) string {
	var order []string
	by := map[string][]string{}
	for _, ch := range channelNames {
		if !appliesTo(channels, ch) {
			continue
		}
		v := show(def(ch))
		if by[v] == nil {
			order = append(order, v)
		}
		by[v] = append(by[v], ch)
	}
	if len(order) == 1 {
		return order[0]
	}
	parts := make([]string, len(order))
	for i, v := range order {
		parts[i] = v + " for " + strings.Replace(orList(by[v]), " or ", " and ", 1)
	}
	return strings.Join(parts, ", ")
}

// prefix renders "(whatsapp, sms) " for a row that not every channel takes.
func prefix(channels []string) string {
	if channels == nil {
		return ""
	}
	return "(" + strings.Join(channels, ", ") + ") "
}

// boundsError renders "want <span>: <why>, got <got>".
func boundsError(span, why, got string) string {
	if why != "" {
		span += ": " + why
	}
	return "want " + span + ", got " + got
}

// showDuration renders d as the file would write it: "2s", "50ms", "24h".
func showDuration(d time.Duration) string {
	switch {
	case d != 0 && d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d != 0 && d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return d.String()
}

// durationSetting is a row whose value is a Go duration ("100ms", "15s").
type durationSetting struct {
	key, doc string
	channels []string // nil: every channel
	def      func(channel string) time.Duration
	// min and max bound the value; zero: > 0 and no upper bound.
	min, max time.Duration
	// why is said after a bound in errors.
	why string
	// zeroMeans says what an explicit 0 means; "" refuses 0.
	zeroMeans string
	// workerZero is what an explicit 0 lands as in worker.Channel, whose
	// zero means its default.
	workerZero time.Duration
	at         func(*ChannelSettings) *time.Duration
	worker     func(*worker.Channel) *time.Duration // nil: not a worker.Channel field
}

func (r durationSetting) name() string                  { return r.key }
func (r durationSetting) appliesTo(channel string) bool { return appliesTo(r.channels, channel) }
func (r durationSetting) setDefault(s *ChannelSettings, channel string) {
	*r.at(s) = r.def(channel)
}

func (r durationSetting) span() string {
	lo := "> 0"
	switch {
	case r.min > 0:
		lo = showDuration(r.min)
	case r.zeroMeans != "":
		lo = "0"
	}
	switch {
	case r.max == 0:
		return lo
	case r.min > 0 || r.zeroMeans != "":
		return lo + " to " + showDuration(r.max)
	}
	return "> 0, at most " + showDuration(r.max)
}

func (r durationSetting) decode(d *decoder, n *yaml.Node, path, channel string, s *ChannelSettings) {
	raw, ok := d.scalar(n, path)
	if !ok {
		return
	}
	v, err := time.ParseDuration(raw)
	if err != nil {
		d.errorf(resolve(n), path, "want a duration such as 100ms, 15s or 1m, got %q", raw)
		return
	}
	if v < 0 || (v == 0 && r.zeroMeans == "") {
		if r.zeroMeans != "" || r.min > 0 {
			d.errorf(resolve(n), path, "%s", boundsError(r.span(), r.why, raw))
		} else {
			d.errorf(resolve(n), path, "want a duration > 0, got %s", raw)
		}
		return
	}
	if (v != 0 && v < r.min) || (r.max > 0 && v > r.max) {
		d.errorf(resolve(n), path, "%s", boundsError(r.span(), r.why, raw))
		return
	}
	*r.at(s) = v
}

func (r durationSetting) apply(s *ChannelSettings, ch *worker.Channel) {
	if r.worker == nil {
		return
	}
	v := *r.at(s)
	if v == 0 && r.zeroMeans != "" {
		v = r.workerZero
	}
	*r.worker(ch) = v
}

func (r durationSetting) describe() string {
	out := prefix(r.channels) + r.doc + " A duration, " + r.span()
	if r.why != "" && (r.min > 0 || r.max > 0) {
		out += ": " + r.why
	}
	out += "."
	if r.zeroMeans != "" {
		out += " 0 means " + r.zeroMeans + "."
	}
	return out + " Default " + defaults(r.channels, r.def, showDuration) + "."
}

// boolSetting is a row whose value is true or false.
type boolSetting struct {
	key, doc string
	channels []string // nil: every channel
	def      bool
	at       func(*ChannelSettings) *bool
	worker   func(*worker.Channel) *bool // nil: not a worker.Channel field
}

func (r boolSetting) name() string                  { return r.key }
func (r boolSetting) appliesTo(channel string) bool { return appliesTo(r.channels, channel) }
func (r boolSetting) setDefault(s *ChannelSettings, channel string) {
	*r.at(s) = r.def
}

func (r boolSetting) decode(d *decoder, n *yaml.Node, path, channel string, s *ChannelSettings) {
	d.boolean(n, path, r.at(s))
}

func (r boolSetting) apply(s *ChannelSettings, ch *worker.Channel) {
	if r.worker != nil {
		*r.worker(ch) = *r.at(s)
	}
}

func (r boolSetting) describe() string {
	return prefix(r.channels) + r.doc + " true or false. Default " + strconv.FormatBool(r.def) + "."
}

// bytesSetting is a row whose value is a whole number of bytes.
type bytesSetting struct {
	key, doc string
	channels []string
	def, max func(channel string) int
	why      func(channel string) string
	at       func(*ChannelSettings) *int
	worker   func(*worker.Channel) *int
}

func (r bytesSetting) name() string                  { return r.key }
func (r bytesSetting) appliesTo(channel string) bool { return appliesTo(r.channels, channel) }
func (r bytesSetting) setDefault(s *ChannelSettings, channel string) {
	*r.at(s) = r.def(channel)
}

func (r bytesSetting) decode(d *decoder, n *yaml.Node, path, channel string, s *ChannelSettings) {
	v, ok := d.integer(n, path, 1)
	if !ok {
		return
	}
	if hi := r.max(channel); v > int64(hi) {
		d.errorf(resolve(n), path, "%s", boundsError("at most "+strconv.Itoa(hi), r.why(channel), strconv.FormatInt(v, 10)))
		return
	}
	*r.at(s) = int(v)
}

func (r bytesSetting) apply(s *ChannelSettings, ch *worker.Channel) {
	if r.worker != nil {
		*r.worker(ch) = *r.at(s)
	}
}

func (r bytesSetting) describe() string {
	out := prefix(r.channels) + r.doc + " Bytes, >= 1"
	hi, def := defaults(r.channels, r.max, strconv.Itoa), defaults(r.channels, r.def, strconv.Itoa)
	if hi == def {
		return out + "; at most, and by default, " + hi + "."
	}
	return out + ", at most " + hi + ". Default " + def + "."
}

// countSetting is a row whose value is a whole number from 1 to max.
type countSetting struct {
	key, doc string
	def, max int
	at       func(*ChannelSettings) *int
	worker   func(*worker.Channel) *int
}

func (r countSetting) name() string                            { return r.key }
func (r countSetting) appliesTo(string) bool                   { return true }
func (r countSetting) setDefault(s *ChannelSettings, _ string) { *r.at(s) = r.def }

func (r countSetting) decode(d *decoder, n *yaml.Node, path, _ string, s *ChannelSettings) {
	v, ok := d.integer(n, path, 1)
	if !ok {
		return
	}
	if v > int64(r.max) {
		d.errorf(resolve(n), path, "want at most %d, got %d", r.max, v)
		return
	}
	*r.at(s) = int(v)
}

func (r countSetting) apply(s *ChannelSettings, ch *worker.Channel) {
	*r.worker(ch) = *r.at(s)
}

func (r countSetting) describe() string {
	return fmt.Sprintf("%s A whole number, 1 to %d. Default %d.", r.doc, r.max, r.def)
}

// percentSetting is a row whose value is a share written "N%" and held as
// a fraction.
type percentSetting struct {
	key, doc   string
	channels   []string
	def, max   float64
	zeroMeans  string
	workerZero float64
	at         func(*ChannelSettings) *float64
	worker     func(*worker.Channel) *float64
}

func (r percentSetting) name() string                  { return r.key }
func (r percentSetting) appliesTo(channel string) bool { return appliesTo(r.channels, channel) }
func (r percentSetting) setDefault(s *ChannelSettings, _ string) {
	*r.at(s) = r.def
}

func showPercent(f float64) string { return strconv.FormatFloat(f*100, 'g', -1, 64) + "%" }

func (r percentSetting) decode(d *decoder, n *yaml.Node, path, channel string, s *ChannelSettings) {
	raw, ok := d.scalar(n, path)
	if !ok {
		return
	}
	num, isPct := strings.CutSuffix(strings.TrimSpace(raw), "%")
	v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if !isPct || err != nil || math.IsNaN(v) {
		d.errorf(resolve(n), path, "want a percentage such as 1%%, got %q", raw)
		return
	}
	if v < 0 || v/100 > r.max || (v == 0 && r.zeroMeans == "") {
		lo := "0%"
		if r.zeroMeans == "" {
			lo = "more than 0%"
		}
		d.errorf(resolve(n), path, "%s", boundsError(lo+" to "+showPercent(r.max), "", raw))
		return
	}
	*r.at(s) = v / 100
}

func (r percentSetting) apply(s *ChannelSettings, ch *worker.Channel) {
	v := *r.at(s)
	if v == 0 && r.zeroMeans != "" {
		v = r.workerZero
	}
	*r.worker(ch) = v
}

func (r percentSetting) describe() string {
	out := prefix(r.channels) + r.doc + " A percentage, 0% to " + showPercent(r.max) + "."
	if r.zeroMeans != "" {
		out += " 0% means " + r.zeroMeans + "."
	}
	return out + " Default " + showPercent(r.def) + "."
}

// fieldSetting is a row whose value names a field of the channel's task
// type (tasks.FieldNames); default none.
type fieldSetting struct {
	key, doc string
	at       func(*ChannelSettings) *string
	worker   func(*worker.Channel) *string
}

func (r fieldSetting) name() string                            { return r.key }
func (r fieldSetting) appliesTo(string) bool                   { return true }
func (r fieldSetting) setDefault(s *ChannelSettings, _ string) { *r.at(s) = "" }
func (r fieldSetting) apply(s *ChannelSettings, ch *worker.Channel) {
	*r.worker(ch) = *r.at(s)
}

func (r fieldSetting) describe() string {
	return r.doc + " Default none (one scope per channel)."
}

func (r fieldSetting) decode(d *decoder, n *yaml.Node, path, channel string, s *ChannelSettings) {
	v, ok := d.scalar(n, path)
	if !ok {
		return
	}
	fields, _ := tasks.FieldNames(taskType(channel))
	if v != "" && !slices.Contains(fields, v) {
		d.errorf(resolve(n), path, "%q is not a field of %s tasks (want one of: %s)", v, channel, strings.Join(fields, ", "))
		return
	}
	*r.at(s) = v
}

// weightsSetting is tenant_weights: a mapping of tenant names to whole
// weights from 1 to max.
type weightsSetting struct {
	key, doc string
	max      int
}

func (r weightsSetting) name() string                            { return r.key }
func (r weightsSetting) appliesTo(string) bool                   { return true }
func (r weightsSetting) setDefault(s *ChannelSettings, _ string) { s.TenantWeights = nil }
func (r weightsSetting) apply(s *ChannelSettings, ch *worker.Channel) {
	// A copy: workers and the enqueuer must not share a map the caller
	// may change.
	ch.TenantWeights = maps.Clone(s.TenantWeights)
}

func (r weightsSetting) describe() string {
	return r.doc + fmt.Sprintf(" Weights are whole numbers, 1 to %d. Default none (every tenant weighs 1).", r.max)
}

func (r weightsSetting) decode(d *decoder, n *yaml.Node, path, channel string, s *ChannelSettings) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "want a mapping of tenant: weight, got %s", describe(n))
		return
	}
	s.TenantWeights = map[string]float64{}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
			d.errorf(k, path, "want a tenant name as key, got %s", describe(k))
			continue
		}
		p := join(path, k.Value)
		if err := tasks.ValidTenant(k.Value); err != nil {
			d.errorf(k, p, "%v", err)
			continue
		}
		if seen[k.Value] {
			d.errorf(k, p, "tenant given twice")
			continue
		}
		seen[k.Value] = true
		if w, ok := d.integer(v, p, 1); ok {
			if w > int64(r.max) {
				d.errorf(resolve(v), p, "want a weight of 1 to %d, got %d", r.max, w)
				continue
			}
			s.TenantWeights[k.Value] = float64(w)
		}
	}
}

// settingNames returns the keys of the rows channel takes, in table order.
func settingNames(channel string) []string {
	var out []string
	for _, r := range channelSettings {
		if r.appliesTo(channel) {
			out = append(out, r.name())
		}
	}
	return out
}

// settingNamed returns the row with YAML key key.
func settingNamed(key string) channelSetting {
	for _, r := range channelSettings {
		if r.name() == key {
			return r
		}
	}
	return nil
}

// defaultSettings returns channel's settings with every row's default.
func defaultSettings(channel string) ChannelSettings {
	var s ChannelSettings
	for _, r := range channelSettings {
		if r.appliesTo(channel) {
			r.setDefault(&s, channel)
		}
	}
	return s
}

// Apply writes the settings, the values in effect from Default, Load or
// Parse (a ChannelSettings built by hand starts from a channel's Default
// too), into ch's fields (the worker.Channel the
// channel runs with), each as its row says: a value equal to the worker's
// default passes as is, and an explicit zero that a row allows (headroom
// 0%, max_margin 0) as the worker's named value for it (worker.NoHeadroom,
// worker.FixedMargin), since the worker's zero means its default. The
// other fields of ch are left alone. Settings that are not worker.Channel
// fields (Timeout) are not written.
func (s *ChannelSettings) Apply(ch *worker.Channel) {
	for _, r := range channelSettings {
		r.apply(s, ch)
	}
}

// Markers of the generated part of sluice.example.yaml.
const (
	settingsBegin = "# BEGIN channel settings: generated from config/settings.go by\n#   go test ./config -run TestExampleChannelSettings -update\n"
	settingsEnd   = "# END channel settings\n"
)

// settingsComment renders the table as the YAML comment block between
// settingsBegin and settingsEnd: each key, then its description wrapped
// to 78 columns.
func settingsComment() string {
	const indent = "#   "
	const keyWidth = 18
	var b strings.Builder
	b.WriteString(settingsBegin)
	b.WriteString("# Settings, per channel:\n")
	for _, r := range channelSettings {
		line := indent + r.name()
		if len(r.name()) >= keyWidth {
			b.WriteString(line + "\n")
			line = indent
		}
		line += strings.Repeat(" ", len(indent)+keyWidth-len(line))
		start := len(line)
		for i, w := range strings.Fields(r.describe()) {
			if i > 0 && len(line)+1+len(w) > 78 {
				b.WriteString(line + "\n")
				line = "#" + strings.Repeat(" ", start-1)
			} else if i > 0 {
				line += " "
			}
			line += w
		}
		b.WriteString(line + "\n")
	}
	b.WriteString(settingsEnd)
	return b.String()
}
