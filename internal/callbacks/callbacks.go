package callbacks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/delivery"
	"github.com/sluice-dev/sluice/throttle"
)

// Paths served by the handler.
const (
	TwilioPath   = "/callbacks/twilio"
	WhatsAppPath = "/callbacks/whatsapp"
)

// EventDeliveryFailed is the event a status of failed or undelivered
// raises on the limiter's stream (throttle.Redis.Emit): see
// throttle.EventDeliveryFailed, where every event type is listed.
const EventDeliveryFailed = throttle.EventDeliveryFailed

// Channel names of the providers' statuses: the worker channels that send
// through them (worker.SMSChannel, worker.WhatsAppChannel).
const (
	ChannelSMS      = "sms"
	ChannelWhatsApp = "whatsapp"
)

// Store applies statuses; *delivery.Store implements it.
type Store interface {
	Update(ctx context.Context, channel, providerID string, s delivery.Status) (delivery.Applied, error)
}

// FeedbackFunc applies a provider throttle reported in a callback, as
// worker.Worker.Feedback does: it pauses the scope ce names, rendered
// from fields, and returns the pause key ("" when none).
// sent is when the provider accepted the send (zero when unknown).
type FeedbackFunc func(ctx context.Context, channel string, fields map[string]string, ce *channels.Error, sent time.Time) (pauseKey string, err error)

// Options configures the handler.
type Options struct {
	// Store records the statuses. Required.
	Store Store
	// Feedback applies throttle codes found in statuses (the lead wires
	// worker.Worker.Feedback). nil: such statuses are recorded only.
	Feedback FeedbackFunc
	// TwilioAuthToken is the Twilio account's auth token, the key of
	// X-Twilio-Signature. Empty: POST /callbacks/twilio answers 404.
	TwilioAuthToken string
	// TwilioURL is the URL Twilio posts to, as Twilio sees it and signs
	// it: http.public_url + "/callbacks/twilio" (the StatusCallback the
	// worker sends). Empty: the URL is rebuilt from the request (its
	// Host, and https when the connection is TLS or X-Forwarded-Proto
	// says so), which a proxy that rewrites the host breaks.
	TwilioURL string
	// WhatsAppAppSecret is the Meta app's secret, the key of
	// X-Hub-Signature-256, and WhatsAppVerifyToken the verify token typed
	// in the webhook's settings. Either empty: /callbacks/whatsapp answers
	// 404.
	WhatsAppAppSecret, WhatsAppVerifyToken string
	// Limiter receives delivery.failed events. nil: no events.
	Limiter *throttle.Redis
	// Registerer registers sluice_delivery_status_total and
	// sluice_callback_requests_total. nil: no metrics.
	Registerer prometheus.Registerer
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
	// MaxBodyBytes bounds a request body; a larger one is answered 413.
	// Zero means config.DefaultMaxBodyBytes (4 MiB).
	MaxBodyBytes int64
	// Now is the clock for statuses without a timestamp and for Twilio
	// 30023's reset; nil means time.Now.
	Now func() time.Time
}

// maxStatusesPerPost bounds the statuses one WhatsApp post may carry that
// are applied (Meta sends a few); the rest are logged and dropped.
const maxStatusesPerPost = 1000

// storeTimeout bounds the work of one callback request.
const storeTimeout = 10 * time.Second

type server struct {
	opts    Options
	log     *slog.Logger
	statusM *prometheus.CounterVec
	reqM    *prometheus.CounterVec
}

// New validates o and returns the handler of TwilioPath and WhatsAppPath;
// mount it at "/callbacks/" (it answers 404 to other paths). The error
// names the bad field.
func New(o Options) (http.Handler, error) {
	if o.Store == nil {
		return nil, errors.New("callbacks: Options.Store is required")
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = config.DefaultMaxBodyBytes
	}
	if o.MaxBodyBytes < 1024 {
		return nil, fmt.Errorf("callbacks: Options.MaxBodyBytes: %d, want at least 1024", o.MaxBodyBytes)
	}
	if o.TwilioURL != "" {
		u, err := url.Parse(o.TwilioURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.Fragment != "" {
			return nil, errors.New("callbacks: Options.TwilioURL: want an absolute http(s) URL without user info or fragment (the value is not shown)")
		}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &server{opts: o, log: o.Logger,
		statusM: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_delivery_status_total",
			Help: "Message statuses providers reported in delivery callbacks, by channel and status (queued, sent, delivered, read, failed, undelivered, other), duplicates and late ones included.",
		}, []string{"channel", "status"}),
		reqM: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_callback_requests_total",
			Help: "Delivery callback requests by provider (twilio, whatsapp) and result (ok, verified, forbidden: bad or missing signature or verify token, bad_request, too_large, not_configured, error: the store failed).",
		}, []string{"provider", "result"}),
	}
	if o.Registerer != nil {
		if err := o.Registerer.Register(s.statusM); err != nil {
			return nil, fmt.Errorf("callbacks: register metrics: %w", err)
		}
		if err := o.Registerer.Register(s.reqM); err != nil {
			return nil, fmt.Errorf("callbacks: register metrics: %w", err)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+TwilioPath, s.twilio)
	mux.HandleFunc("GET "+WhatsAppPath, s.whatsappVerify)
	mux.HandleFunc("POST "+WhatsAppPath, s.whatsapp)
	return mux, nil
}

// Result labels of sluice_callback_requests_total.
const (
	resultOK            = "ok"
	resultVerified      = "verified"
	resultForbidden     = "forbidden"
	resultBadRequest    = "bad_request"
	resultTooLarge      = "too_large"
	resultNotConfigured = "not_configured"
	resultError         = "error"
)

// answer writes a short plain-text answer and counts the request.
func (s *server) answer(w http.ResponseWriter, provider, result string, code int, msg string) {
	s.reqM.WithLabelValues(provider, result).Inc()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	if msg != "" {
		_, _ = io.WriteString(w, msg+"\n")
	}
}

// readBody reads r's body up to MaxBodyBytes; ok is false when it has
// answered (413, 400).
func (s *server) readBody(w http.ResponseWriter, r *http.Request, provider string) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.answer(w, provider, resultTooLarge, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", s.opts.MaxBodyBytes))
			return nil, false
		}
		s.answer(w, provider, resultBadRequest, http.StatusBadRequest, "could not read the body")
		return nil, false
	}
	return body, true
}

// status is one message status parsed from a callback.
type status struct {
	channel    string // ChannelSMS, ChannelWhatsApp
	providerID string
	raw        string // the provider's status word, for logs ("sending")
	state      delivery.State
	code       int
	reason     string
	at         time.Time
	fields     map[string]string // the send's key fields, for Feedback
}

// apply records st, counts it, raises its events and feeds a throttle
// back. An error is the store's: the caller answers 500 so the provider
// retries (the store ignores repeats).
func (s *server) apply(ctx context.Context, provider string, st status) error {
	s.statusM.WithLabelValues(st.channel, metricStatus(st.state)).Inc()
	if st.state == "" {
		s.log.Debug("delivery callback: status not tracked", "provider", provider, "provider_id", st.providerID, "status", st.raw)
		return nil
	}
	u, err := s.opts.Store.Update(ctx, st.channel, st.providerID, delivery.Status{State: st.state, Code: st.code, Reason: st.reason, At: st.at})
	if err != nil {
		return err
	}
	taskID, found := u.TaskID, u.Found
	s.log.Debug("delivery callback", "provider", provider, "channel", st.channel, "provider_id", st.providerID,
		"task_id", taskID, "found", found, "status", st.state, "code", st.code)
	if st.state.Final() && s.opts.Limiter != nil {
		s.opts.Limiter.Emit(ctx, EventDeliveryFailed, st.channel+":message:"+st.providerID, time.Minute,
			"status", string(st.state), "code", st.code, "reason", st.reason, "task_id", taskID)
	}
	// A repeat (a provider retrying its post, or a replayed one) moves
	// nothing and is not fed back again: a pause and a rate cut per
	// throttle. A status whose send is not recorded yet (found false) is
	// fed back once, when it first waits, as it will not be when it is
	// applied later.
	if st.code != 0 && u.Moved {
		s.feedback(ctx, provider, st, u.SentAt)
	}
	return nil
}

// feedback hands a throttle code to Options.Feedback. Its failure is
// logged: the status is recorded anyway.
func (s *server) feedback(ctx context.Context, provider string, st status, sent time.Time) {
	ce, ok := channels.CodeError(provider, st.code, st.reason, s.opts.Now())
	if !ok || ce.Class != channels.Throttled || s.opts.Feedback == nil {
		return
	}
	key, err := s.opts.Feedback(ctx, st.channel, st.fields, ce, sent)
	if err != nil {
		s.log.Warn("delivery callback: could not apply the provider's throttle", "channel", st.channel, "code", st.code, "provider_id", st.providerID, "err", err)
		return
	}
	s.log.Info("delivery callback: provider throttle reported after the send", "channel", st.channel, "code", st.code,
		"scope", ce.Scope, "key", key, "provider_id", st.providerID)
}

// metricStatus is the status label: a tracked state, or "other".
func metricStatus(s delivery.State) string {
	if s.Reported() {
		return string(s)
	}
	return "other"
}
