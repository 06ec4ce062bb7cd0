package worker

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/channels"
)

// Metrics are the worker's Prometheus series. Register them with
// NewMetrics(reg); a nil *Metrics records nothing.
type Metrics struct {
	tasks    *prometheus.CounterVec
	throttle *prometheus.CounterVec
	wait     *prometheus.HistogramVec
	send     *prometheus.HistogramVec
	calls    *prometheus.CounterVec
	hold     *prometheus.HistogramVec
	late     *prometheus.HistogramVec
	depart   *prometheus.HistogramVec
	margins  *marginCollector // sluice_pacing_margin_seconds (margin.go)
	provider *prometheus.CounterVec
	probes   *prometheus.CounterVec
	adaptive *adaptiveCollector // sluice_limit_adapted_keys, _effective_rate and _configured_rate (adapt.go)

	// unrecorded is sluice_delivery_unrecorded (unrecorded.go).
	unrecorded prometheus.Gauge
}

// unknownChannel is the channel label of tasks whose type no channel handles.
const unknownChannel = "unknown"

// Outcomes counted in sluice_tasks_total{outcome}.
const (
	OutcomeSent = "sent"
	// OutcomeUnconfirmed: the provider answered 2xx but its reply was cut
	// off or had no message id (WhatsApp messages[0].id, Twilio sid). The
	// send counts as made and is never retried (a retry would send twice);
	// sent + sent_unconfirmed are the sends the provider accepted.
	OutcomeUnconfirmed      = "sent_unconfirmed"
	OutcomeThrottled        = "throttled"          // a Sluice limit blocked; requeued
	OutcomePlanned          = "planned"            // given a planned slot; comes back for it
	OutcomeProviderThrottle = "provider_throttled" // the provider said slow down; requeued
	OutcomeTransient        = "transient"          // retried with backoff, counted
	OutcomePermanent        = "permanent"          // archived
	OutcomeMalformed        = "malformed"          // bad payload; archived
	OutcomeLimiterError     = "limiter_error"      // Redis failed; retried with backoff
	OutcomeUnknownType      = "unknown_type"       // no handler for the task type; archived
	OutcomeWrongQueue       = "wrong_queue"        // in another channel's queue; archived unsent
	OutcomeUnauthorized     = "unauthorized"       // credentials refused; channel paused, task waits
	// OutcomeBudgetSpent: a failed attempt (counted under its own outcome,
	// transient or provider_throttled) was the last its channel's
	// RetryBudget allows; the task is archived with the reason.
	OutcomeBudgetSpent = "budget_spent"
	// OutcomeAlreadySent: a task came back whose send the provider had
	// accepted (asynq could not record its completion, in a Redis outage:
	// docs/redis-outages.md); it completes without sending again.
	OutcomeAlreadySent = "already_sent"
)

// NewMetrics creates and registers the series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_tasks_total",
			Help: "Task attempts (dequeues) by channel and outcome (sent, sent_unconfirmed, planned, throttled, provider_throttled, transient, permanent, malformed, limiter_error, unknown_type, wrong_queue, unauthorized, already_sent: a rerun whose send was recorded, completed without sending again), and budget_spent: archives by the retry budget, whose last attempt is also counted under its own outcome.",
		}, []string{"channel", "outcome"}),
		throttle: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_throttled_total",
			Help: "Sends blocked by a limit, by channel and the limit that blocked (\"provider\" for provider throttle responses).",
		}, []string{"channel", "limit"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_throttle_wait_seconds",
			Help:    "Wait given to blocked sends before they are tried again.",
			Buckets: []float64{0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 3600, 86400},
		}, []string{"channel"}),
		send: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_send_duration_seconds",
			Help:    "Provider request duration.",
			Buckets: prometheus.DefBuckets,
		}, []string{"channel"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_limiter_calls_total",
			Help: "Limiter round trips made by the worker, by channel and operation (reserve, consume, release).",
		}, []string{"channel", "op"}),
		hold: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_hold_seconds",
			Help:    "How long a send with a firm reservation was held in the worker until its instant (bounded by the channel's hold).",
			Buckets: []float64{0, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.25, 1.5},
		}, []string{"channel"}),
		late: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_hold_late_seconds",
			Help:    "How late a held send woke up after its slot, on this host's clock: what the channel's headroom must absorb (1.5% of a second is 15ms).",
			Buckets: []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.05, 0.1},
		}, []string{"channel"}),
	}
	m.depart = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_send_late_seconds",
		Help:    "How late a paced send left for the provider after its slot, on this host's clock, measured when its HTTP request was written (else when it was handed to the channel): what the channel's pacing margin absorbs (sluice_pacing_margin_seconds).",
		Buckets: []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.25},
	}, []string{"channel"})
	m.margins = newMarginCollector()
	m.provider = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_provider_throttles_total",
		Help: "Provider throttle responses by channel, the provider's error code (the HTTP status, 429 or 503, when it gives none) and the scope it names (sender, pair, account, host for webhooks and HTTP calls, channel for refused credentials, or empty).",
	}, []string{"channel", "code", "scope"})
	m.probes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_credential_probes_total",
		Help: "Probes of a channel paused because the provider refused its credentials, by result (accepted: the channel resumed; refused; error).",
	}, []string{"channel", "result"})
	m.unrecorded = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sluice_delivery_unrecorded",
		Help: "Sends the provider accepted whose delivery record Redis refused, kept in the worker's memory until it takes them (docs/redis-outages.md).",
	})
	m.adaptive = newAdaptiveCollector()
	if reg != nil {
		reg.MustRegister(m.tasks, m.throttle, m.wait, m.send, m.calls, m.hold, m.late, m.depart, m.margins, m.provider, m.probes, m.unrecorded, m.adaptive)
	}
	return m
}

func (m *Metrics) outcome(channel, outcome string) {
	if m != nil {
		m.tasks.WithLabelValues(channel, outcome).Inc()
	}
}

func (m *Metrics) throttled(channel, limit string, waitSeconds float64) {
	if m != nil {
		m.throttle.WithLabelValues(channel, limit).Inc()
		m.wait.WithLabelValues(channel).Observe(waitSeconds)
	}
}

func (m *Metrics) providerThrottle(channel string, code int, scope string) {
	if m != nil {
		m.provider.WithLabelValues(channel, strconv.Itoa(code), scope).Inc()
	}
}

// throttleLabels are the code and scope labels of a provider throttle: the
// provider's code, else the HTTP status (a webhook's 429 is "429", not
// "0"); the scope, named as what it pauses (ScopeHost for a channel whose
// sender scope is the target host: webhooks and HTTP calls).
func throttleLabels(ch Channel, ce *channels.Error) (code int, scope string) {
	code, scope = ce.Code, ce.Scope
	if code == 0 {
		code = ce.HTTPStatus
	}
	if scope == channels.ScopeSender && ch.PauseScopes[channels.ScopeSender] == HostPauseScopes[channels.ScopeSender] {
		scope = ScopeHost
	}
	return code, scope
}

func (m *Metrics) probe(channel, result string) {
	if m != nil {
		m.probes.WithLabelValues(channel, result).Inc()
	}
}

func (m *Metrics) sent(channel string, seconds float64) {
	if m != nil {
		m.send.WithLabelValues(channel).Observe(seconds)
	}
}

func (m *Metrics) call(channel, op string) {
	if m != nil {
		m.calls.WithLabelValues(channel, op).Inc()
	}
}

func (m *Metrics) held(channel string, seconds float64) {
	if m != nil {
		m.hold.WithLabelValues(channel).Observe(seconds)
	}
}

func (m *Metrics) woke(channel string, lateSeconds float64) {
	if m != nil {
		m.late.WithLabelValues(channel).Observe(lateSeconds)
	}
}

func (m *Metrics) departed(channel string, lateSeconds float64) {
	if m != nil {
		m.depart.WithLabelValues(channel).Observe(lateSeconds)
	}
}

func (m *Metrics) unrecordedSends(n int) {
	if m != nil {
		m.unrecorded.Set(float64(n))
	}
}
