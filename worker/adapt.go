package worker

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/throttle"
)

// Adapter is implemented by limiters with adaptive limits
// (*throttle.Redis): with one, a provider's rate throttle
// (channels.Error.IsRate) lowers the rate of the send's limits that its
// scope concerns, in every worker, and sends that go through raise it
// again (docs/adaptive.md).
type Adapter interface {
	AdaptDown(ctx context.Context, o throttle.AdaptOptions, sig throttle.AdaptSignal, reqs ...throttle.Request) ([]throttle.AdaptChange, error)
	AdaptUp(ctx context.Context, o throttle.AdaptOptions, reqs ...throttle.Request) ([]throttle.AdaptChange, error)
	CachedAdaptations(ctx context.Context) []throttle.Adaptation
}

// adaptBinding is a channel's adaptive limits: which of its rules a
// throttle of each scope lowers.
//
// A throttle names a scope (channels.ScopeSender, ScopePair,
// ScopeAccount) whose fields Channel.PauseScopes gives. It lowers:
//   - pair: the rate limits keyed by exactly the pair's fields (WhatsApp's
//     whatsapp:pair:{phone_number_id}:{to});
//   - sender: the rate limits keyed by exactly the sender's fields
//     (whatsapp:number:{phone_number_id}, sms:sender:{sender});
//   - account, or a scope the channel does not name: every rate limit of
//     the send but those keyed by a recipient (a field of the pair scope
//     that is not the sender's, {to}): the account's rate is the sum of
//     its senders', and a per-recipient limit (a pair, a daily cap per
//     user) does not govern it.
//
// Rate limits are GCRA and the windowed algorithms but distinct.
type adaptBinding struct {
	opts    throttle.AdaptOptions
	adapter Adapter
	rules   []adaptRule
	byScope map[string][]int // scope → indexes in rules
	other   []int            // account and unnamed scopes
}

type adaptRule struct {
	name string
	key  rules.Template
}

// newAdaptBinding returns ch's binding, or nil when the limiter has no
// adaptive limits or ch turns them off.
func newAdaptBinding(ch Channel, lim throttle.Limiter, set *rules.Set, fields []string, pauses []pauseScope) (*adaptBinding, error) {
	ad, ok := lim.(Adapter)
	if !ok || ch.Adaptive.Disabled {
		return nil, nil
	}
	if err := ch.Adaptive.Validate(); err != nil {
		return nil, fmt.Errorf("channel %s: adaptive: %w", ch.Name, err)
	}
	b := &adaptBinding{opts: ch.Adaptive.WithDefaults(), adapter: ad, byScope: map[string][]int{}}
	scopeFields := map[string][]string{}
	for _, p := range pauses {
		scopeFields[p.scope] = fieldSet(p.key)
	}
	recipient := map[string]bool{}
	for _, f := range scopeFields[channels.ScopePair] {
		if !slices.Contains(scopeFields[channels.ScopeSender], f) {
			recipient[f] = true
		}
	}
	for _, r := range set.Rules() {
		switch r.Limit.Algorithm {
		case throttle.GCRA, throttle.FixedWindow, throttle.SlidingWindowLog, throttle.SlidingWindowCounter:
		default:
			continue
		}
		t, err := rules.ParseKey(ch.Name, r.Key, fields)
		if err != nil {
			return nil, fmt.Errorf("channel %s: limit %q: %w", ch.Name, r.Limit.Name, err)
		}
		t = t.SpreadBy(ch.SpreadBy) // the keys the send's requests hold
		i := len(b.rules)
		b.rules = append(b.rules, adaptRule{r.Limit.Name, t})
		f := fieldSet(t)
		for _, s := range []string{channels.ScopeSender, channels.ScopePair} {
			if sf, ok := scopeFields[s]; ok && len(sf) > 0 && slices.Equal(f, sf) {
				b.byScope[s] = append(b.byScope[s], i)
			}
		}
		if !slices.ContainsFunc(f, func(x string) bool { return recipient[x] }) {
			b.other = append(b.other, i)
		}
	}
	return b, nil
}

// fieldSet returns the fields a key template names, sorted, each once:
// two keys cover the same sends when their sets are equal.
func fieldSet(t rules.Template) []string {
	f := t.Fields()
	slices.Sort(f)
	return slices.Compact(f)
}

// pick returns the send's requests of the rules a throttle of scope
// lowers.
func (b *adaptBinding) pick(scope string, fields map[string]string, reqs []throttle.Request) []throttle.Request {
	idx, ok := b.byScope[scope]
	if !ok && scope != channels.ScopeSender && scope != channels.ScopePair {
		idx = b.other
	}
	var out []throttle.Request
	for _, i := range idx {
		out = b.rules[i].appendMatch(out, fields, reqs)
	}
	return out
}

// appendMatch appends to out the request of reqs that is rule r's for a
// send with fields (its key rendered, its limit's name), if any.
func (r adaptRule) appendMatch(out []throttle.Request, fields map[string]string, reqs []throttle.Request) []throttle.Request {
	key, ok := r.key.Render(fields)
	if !ok {
		return out
	}
	for _, q := range reqs {
		if q.Key == key && q.Limit.Name == r.name {
			return append(out, q)
		}
	}
	return out
}

// adaptDown lowers the rates a provider's rate throttle concerns; start
// is when the send went out (this host's clock), zero when unknown (a
// throttle reported in a callback). Failures are logged: the pause still
// holds the scope back.
func (h *handler) adaptDown(ctx context.Context, ce *channels.Error, fields map[string]string, reqs []throttle.Request, start time.Time) {
	b := h.adapt
	if b == nil || !ce.IsRate() {
		return
	}
	picked := b.pick(ce.Scope, fields, reqs)
	if len(picked) == 0 {
		return
	}
	sig := throttle.AdaptSignal{Code: ce.Code, Reason: ce.Message}
	if !start.IsZero() {
		sig.Sent = h.clock.limiter(start)
	}
	ch, err := b.adapter.AdaptDown(ctx, b.opts, sig, picked...)
	if err != nil {
		h.w.logger.Warn("adaptive limit: could not lower the rate after a provider throttle", "channel", h.ch.Name, "code", ce.Code, "err", err)
	}
	h.logAdapted(ch)
}

// adaptUp raises adapted rates of a send that went through, when a quiet
// period is due (no Redis call otherwise).
func (h *handler) adaptUp(ctx context.Context, reqs []throttle.Request) {
	b := h.adapt
	if b == nil {
		return
	}
	ch, err := b.adapter.AdaptUp(ctx, b.opts, reqs...)
	if err != nil {
		h.w.logger.Warn("adaptive limit: could not raise the rate after a quiet period", "channel", h.ch.Name, "err", err)
	}
	h.logAdapted(ch)
}

// logAdapted writes one line per change: WARN for a decrease, INFO for an
// increase.
func (h *handler) logAdapted(changes []throttle.AdaptChange) {
	for _, c := range changes {
		args := []any{"channel", h.ch.Name, "key", c.Key, "limit", c.Limit,
			"configured", throttle.FormatPerSecond(c.Configured), "effective", throttle.FormatPerSecond(c.Effective),
			"previous", throttle.FormatPerSecond(c.Previous)}
		if c.Ceiling > 0 {
			args = append(args, "ceiling", throttle.FormatPerSecond(c.Ceiling))
		}
		if c.Decrease {
			h.w.logger.Warn("adaptive limit: provider throttle lowered the rate in every worker", append(args, "code", c.Code, "reason", c.Reason)...)
		} else {
			h.w.logger.Info("adaptive limit: rate raised after a quiet period", append(args, "reason", c.Reason)...)
		}
	}
}

// adaptiveCollector exports the adapted limits of the limiter's cache as
// gauges at each scrape, one series per channel and limit name: never per
// key, since a key may name a recipient ("whatsapp:pair:1065:+1202…") or
// a sender's number, and /metrics has no authentication. Per-key detail is
// on the authenticated /limits/ page and in `sluice limits adapted`.
type adaptiveCollector struct {
	src       atomic.Pointer[adaptSource]
	keys      *prometheus.Desc
	effective *prometheus.Desc
	config    *prometheus.Desc
}

// adaptSource lists the adapted limits (throttle.Redis.CachedAdaptations).
type adaptSource func(ctx context.Context) []throttle.Adaptation

func newAdaptiveCollector() *adaptiveCollector {
	labels := []string{"channel", "limit"}
	return &adaptiveCollector{
		keys: prometheus.NewDesc("sluice_limit_adapted_keys",
			"Keys of a limit (by channel and limit name) whose rate adaptive limits lowered after provider throttles and that are adapted now; only limits with adapted keys have series.", labels, nil),
		effective: prometheus.NewDesc("sluice_limit_effective_rate",
			"Lowest effective rate (units per second) among a limit's adapted keys, by channel and limit name; only limits with adapted keys have series.", labels, nil),
		config: prometheus.NewDesc("sluice_limit_configured_rate",
			"Configured (or overridden) rate (units per second) of the key whose effective rate sluice_limit_effective_rate reports.", labels, nil),
	}
}

func (c *adaptiveCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.keys
	ch <- c.effective
	ch <- c.config
}

// adaptedLimit aggregates one limit's adapted keys.
type adaptedLimit struct {
	keys                  int
	effective, configured float64 // of the key with the lowest effective rate
}

func (c *adaptiveCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.src.Load()
	if src == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	type series struct{ channel, limit string }
	agg := map[series]*adaptedLimit{}
	for _, a := range (*src)(ctx) {
		channel := rules.ChannelOf(a.Key) // a key's scope is its channel, or a spread scope of it
		s := series{channel, a.Limit}
		eff := a.Effective(a.Configured)
		g := agg[s]
		if g == nil {
			g = &adaptedLimit{effective: eff, configured: a.Configured}
			agg[s] = g
		} else if eff < g.effective {
			g.effective, g.configured = eff, a.Configured
		}
		g.keys++
	}
	for s, g := range agg {
		ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(g.keys), s.channel, s.limit)
		ch <- prometheus.MustNewConstMetric(c.effective, prometheus.GaugeValue, g.effective, s.channel, s.limit)
		ch <- prometheus.MustNewConstMetric(c.config, prometheus.GaugeValue, g.configured, s.channel, s.limit)
	}
}

// watchAdaptive points the metrics' adaptive gauges at the limiter's
// cache, when it has one.
func (m *Metrics) watchAdaptive(lim throttle.Limiter) {
	if m == nil || m.adaptive == nil {
		return
	}
	if ad, ok := lim.(Adapter); ok {
		src := adaptSource(ad.CachedAdaptations)
		m.adaptive.src.Store(&src)
	}
}
