package api

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/producer"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/throttle/httplimit"
)

// OpenAPI is the OpenAPI 3.1 document of the API, served at
// /v1/openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte

// MaxBatchItems is the most items a .../batch request may carry.
const MaxBatchItems = 1000

// LimiterScope is the throttle scope of the per-key request limits: their
// keys read "<prefix>:api:requests:key:key-1a2b3c4d" (or ":ip:203.0.113.7"
// when authentication is off).
const LimiterScope = "api"

// limiterTimeout bounds the per-key limiter's Redis call. An enqueue needs
// Redis anyway, so it is longer than httplimit's default for services
// whose requests do not.
const limiterTimeout = 500 * time.Millisecond

// DeliveryLookup returns the latest delivery status a provider reported for
// a task (its status callbacks), or nil when there is none.
type DeliveryLookup func(ctx context.Context, taskID string) (*Delivery, error)

// Delivery is a provider's latest report on a sent task, as GET
// /v1/tasks/{id} shows it under "delivery".
type Delivery struct {
	// Status is the worker's record moved on by the provider's callbacks:
	// "sent" (accepted), "sent_unconfirmed" (a 2xx whose reply was cut
	// off) or "archived" (given up; ErrorTitle says why) from the worker;
	// Twilio's MessageStatus ("queued", "sent", "delivered", "undelivered",
	// "failed", "read") or WhatsApp's statuses[].status ("sent",
	// "delivered", "read", "failed") from the provider.
	Status string `json:"status"`
	// ProviderID is the provider's message ID (Twilio's SM…/MM… SID,
	// WhatsApp's wamid.…); "" if unknown.
	ProviderID string `json:"provider_id,omitempty"`
	// ErrorCode is the provider's error code for a failed delivery (Twilio
	// 30007, WhatsApp 131026); 0 for none.
	ErrorCode int `json:"error_code,omitempty"`
	// ErrorTitle is the provider's short description of ErrorCode, or
	// why the worker archived the task.
	ErrorTitle string `json:"error_title,omitempty"`
	// UpdatedAt is when the provider reported Status.
	UpdatedAt time.Time `json:"updated_at"`
}

// Options configure the API handler. Config and Redis are required.
type Options struct {
	// Config supplies the channels (enabled, queue, rules), the worker's
	// max_retry and the http section: api_rate and api_burst (per-key
	// limit), max_body_bytes. Required.
	Config *config.Config
	// Redis is the Redis of the queues and limiters. Required.
	Redis redis.UniversalClient
	// Limiter counts the per-key request limits and plans sends. Nil:
	// app.NewLimiter(Config, Redis, nil).
	Limiter *throttle.Redis
	// Producer checks, plans, enqueues and counts the sends. Nil:
	// app.NewProducer(Config, Redis, Limiter, Counted), the producer
	// `sluice send` and `sluice enqueue` use.
	Producer *producer.Client
	// Keys are the API keys. Nil or empty: no authentication, every request
	// is served and limited by client IP; `sluice serve` allows that only
	// on a loopback address.
	Keys *Keys
	// Deliveries looks up a task's delivery status for GET /v1/tasks/{id}.
	// Nil: the response has no "delivery".
	Deliveries DeliveryLookup
	// Counted is told, after each request, how many new tasks (not
	// repeats) each tenant's campaign got (delivery.Store.AddEnqueued), so
	// that a campaign's progress knows its size; the default Producer's
	// producer.Options.Count (a Producer given counts as it was made to).
	// Nil: not counted. Its error is logged; the tasks stand.
	Counted func(ctx context.Context, tenant, campaign string, n int) error
	// Logger receives backend failures (never keys, bodies or payloads).
	// Nil: slog.Default().
	Logger *slog.Logger
	// Registerer, when set, registers sluice_api_requests_total{route,code},
	// sluice_api_request_duration_seconds{route} and the limiter's
	// sluice_httplimit_backend_errors_total. Nil: no metrics.
	Registerer prometheus.Registerer
}

// handler serves the API.
type handler struct {
	cfg        *config.Config
	prod       *producer.Client
	insp       *asynq.Inspector
	keys       *Keys
	deliveries DeliveryLookup
	logger     *slog.Logger
	limit      *httplimit.Middleware
	maxBody    int64
	metrics    *metrics
}

// New returns the handler of the API's paths, all under /v1/ (mount it at
// "/v1/" on the server's mux):
//
//	GET  /v1/openapi.json          the OpenAPI 3.1 document (no authentication)
//	POST /v1/messages[/batch]      WhatsApp or SMS sends ("channel")
//	POST /v1/webhooks[/batch]      webhook deliveries
//	POST /v1/calls[/batch]         HTTP calls
//	GET  /v1/tasks/{id}            a task's state and delivery
//
// docs/api.md describes requests, responses and errors. Errors name the
// Options field: "api: Options.Redis: required".
func New(opts Options) (http.Handler, error) {
	cfg := opts.Config
	switch {
	case cfg == nil:
		return nil, errors.New("api: Options.Config: required")
	case opts.Redis == nil:
		return nil, errors.New("api: Options.Redis: required")
	}
	h := &handler{
		cfg:        cfg,
		insp:       asynq.NewInspectorFromRedisClient(opts.Redis),
		keys:       opts.Keys,
		deliveries: opts.Deliveries,
		logger:     opts.Logger,
		maxBody:    int64(cfg.HTTP.MaxBodyBytes),
	}
	if h.logger == nil {
		h.logger = slog.Default()
	}
	if h.maxBody <= 0 {
		h.maxBody = config.DefaultMaxBodyBytes
	}
	lim := opts.Limiter
	if lim == nil {
		lim = app.NewLimiter(cfg, opts.Redis, nil)
	}
	h.prod = opts.Producer
	if h.prod == nil {
		var err error
		if h.prod, err = app.NewProducer(cfg, opts.Redis, lim, opts.Counted); err != nil {
			return nil, fmt.Errorf("api: producer: %w", err)
		}
	}
	if cfg.HTTP.APIBurst < 0 {
		return nil, fmt.Errorf("api: Config.HTTP.APIBurst %d: want >= 0", cfg.HTTP.APIBurst)
	}
	var err error
	h.limit, err = httplimit.New(lim, httplimit.Config{
		Limits: []throttle.Limit{{
			Name: "requests", Algorithm: throttle.GCRA,
			Rate: cfg.HTTP.APIRate, Burst: int64(cfg.HTTP.APIBurst),
		}},
		Key:        byPrincipal,
		Scope:      LimiterScope,
		Timeout:    limiterTimeout,
		Logger:     h.logger,
		Registerer: opts.Registerer,
	})
	if err != nil {
		return nil, fmt.Errorf("api: per-key limit from Config.HTTP.APIRate %s, APIBurst %d: %w", cfg.HTTP.APIRate, cfg.HTTP.APIBurst, err)
	}
	if h.metrics, err = newMetrics(opts.Registerer); err != nil {
		return nil, err
	}
	return h.routes(), nil
}

// byPrincipal limits each API key by its Principal.ID ("key:key-1a2b3c4d"),
// never by the key itself; without authentication, by client IP.
func byPrincipal(r *http.Request, _ netip.Addr) string {
	if p, ok := PrincipalFrom(r.Context()); ok {
		return "key:" + p.ID
	}
	return ""
}

func (h *handler) routes() http.Handler {
	mux := http.NewServeMux()
	// secured is the chain of an authenticated route: metrics, auth, the
	// per-key limit, then the handler.
	secured := func(route string, f http.HandlerFunc) http.Handler {
		return h.metrics.wrap(route, h.keys.Require(RequireOptions{}, h.limited(f)))
	}
	mux.Handle("GET /v1/openapi.json", h.metrics.wrap("/v1/openapi.json", http.HandlerFunc(serveOpenAPI)))
	for _, k := range []struct {
		path  string
		kinds []*kind
	}{
		{"/v1/messages", []*kind{whatsAppKind, smsKind}},
		{"/v1/webhooks", []*kind{webhookKind}},
		{"/v1/calls", []*kind{callKind}},
	} {
		mux.Handle("POST "+k.path, secured(k.path, h.single(k.kinds)))
		mux.Handle("POST "+k.path+"/batch", secured(k.path+"/batch", h.batch(k.kinds)))
		mux.Handle(k.path, h.metrics.wrap(k.path, methodNotAllowed("POST")))
		mux.Handle(k.path+"/batch", h.metrics.wrap(k.path+"/batch", methodNotAllowed("POST")))
	}
	mux.Handle("GET /v1/tasks/{id}", secured("/v1/tasks/{id}", h.getTask))
	mux.Handle("/v1/tasks/{id}", h.metrics.wrap("/v1/tasks/{id}", methodNotAllowed("GET, HEAD")))
	mux.Handle("/v1/openapi.json", h.metrics.wrap("/v1/openapi.json", methodNotAllowed("GET, HEAD")))
	mux.Handle("/v1/", h.metrics.wrap("other", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, &Problem{Type: typeNotFound, Title: "Not Found", Status: http.StatusNotFound,
			Detail: "no such endpoint; GET /v1/openapi.json lists them"})
	})))
	return mux
}

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(OpenAPI)))
	h.Set("Cache-Control", "no-cache")
	_, _ = w.Write(OpenAPI)
}

func methodNotAllowed(allow string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeProblem(w, &Problem{Type: typeMethod, Title: "Method Not Allowed", Status: http.StatusMethodNotAllowed,
			Detail: "use " + allow})
	})
}

// limited runs f behind the per-key limit. httplimit writes its own JSON
// body on 429 and 503; limitWriter replaces it with a problem, keeping the
// rate-limit header fields and Retry-After it set.
func (h *handler) limited(f http.HandlerFunc) http.Handler {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lw := r.Context().Value(limitWriterKey{}).(*limitWriter)
		lw.passed = true
		if w == http.ResponseWriter(lw) {
			w = lw.ResponseWriter // the handler's writes need no looking at
		}
		f(w, r)
	})
	lh := h.limit.Handler(inner)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lw := &limitWriter{ResponseWriter: w, rate: h.cfg.HTTP.APIRate, burst: h.cfg.HTTP.APIBurst}
		lh.ServeHTTP(lw, r.WithContext(context.WithValue(r.Context(), limitWriterKey{}, lw)))
	})
}

type limitWriterKey struct{}

// limitWriter turns the limiter's own error responses into problems.
type limitWriter struct {
	http.ResponseWriter
	rate    throttle.Rate
	burst   int
	passed  bool // the limiter let the request through to the handler
	swallow bool // the limiter's body is being replaced
}

func (lw *limitWriter) WriteHeader(code int) {
	if lw.passed || code < 400 {
		lw.ResponseWriter.WriteHeader(code)
		return
	}
	lw.swallow = true
	retry := lw.Header().Get("Retry-After")
	p := &Problem{Type: typeUnavailable, Title: "Service Unavailable", Status: code,
		Detail: "rate limiting is unavailable; retry in " + retry + "s"}
	if code == http.StatusTooManyRequests {
		p = &Problem{Type: typeRateLimited, Title: "Too Many Requests", Status: code,
			Detail: fmt.Sprintf("this API key made more than %d requests per %s (burst %d); retry in %ss",
				lw.rate.Limit, period(lw.rate.Period), lw.burst, retry)}
	}
	writeProblem(lw.ResponseWriter, p)
}

func (lw *limitWriter) Write(b []byte) (int, error) {
	if lw.swallow {
		return len(b), nil
	}
	return lw.ResponseWriter.Write(b)
}

// jsonRequest checks the request's Content-Type and reads its body within
// the size limit. On failure it has written the problem and returns false.
func (h *handler) jsonRequest(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" || (params["charset"] != "" && !strings.EqualFold(params["charset"], "utf-8")) {
		writeProblem(w, &Problem{Type: typeMediaType, Title: "Unsupported Media Type", Status: http.StatusUnsupportedMediaType,
			Detail: "send the body as Content-Type: application/json (UTF-8)"})
		return nil, false
	}
	tooLarge := func() ([]byte, bool) {
		writeProblem(w, &Problem{Type: typeTooLarge, Title: "Content Too Large", Status: http.StatusRequestEntityTooLarge,
			Detail: fmt.Sprintf("the body is over %d bytes (http.max_body_bytes); send fewer items per batch", h.maxBody)})
		return nil, false
	}
	if r.ContentLength > h.maxBody {
		return tooLarge()
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return tooLarge()
		}
		writeProblem(w, &Problem{Type: typeBadRequest, Title: "Bad Request", Status: http.StatusBadRequest,
			Detail: "the body could not be read"})
		return nil, false
	}
	return body, true
}

func (lw *limitWriter) Unwrap() http.ResponseWriter { return lw.ResponseWriter }

// period renders a rate's period with its count: "1s", "1m", "1500ms".
func period(d time.Duration) string {
	s := throttle.FormatPeriod(d)
	if s != "" && (s[0] < '0' || s[0] > '9') {
		return "1" + s
	}
	return s
}
