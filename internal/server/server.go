// Package server is `sluice serve`'s HTTP server and run loop: it mounts
// the enqueue API (/v1/), the dashboards (/queues/, /limits/), the
// providers' delivery callbacks (/callbacks/), /healthz and /metrics on one
// listener, behind the API keys of SLUICE_API_KEYS, and runs the worker and
// the cleanup job beside them. `sluice demo --serve` uses the same handler.
package server

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/dashboard"
	"github.com/sluice-dev/sluice/producer"
	"github.com/sluice-dev/sluice/throttle"
)

// Options are what Handler mounts. Config, Redis, Limiter and Gatherer are
// required.
type Options struct {
	Config  *config.Config
	Redis   redis.UniversalClient
	Limiter *throttle.Redis
	// Gatherer is what /metrics exposes (app.NewRegistry); Registerer,
	// when set, receives the API's request series. Nil Registerer: none.
	Gatherer   prometheus.Gatherer
	Registerer prometheus.Registerer
	// Keys are the API keys (api.ParseKeys of SLUICE_API_KEYS). Nil or
	// empty: no authentication, and the queue dashboard is read-only;
	// Serve allows that only on a loopback address.
	Keys *api.Keys
	// Producer sends the API's sends; nil: app.NewProducer.
	Producer *producer.Client
	// Deliveries gives GET /v1/tasks/{id} the providers' delivery reports;
	// nil: none shown.
	Deliveries api.DeliveryLookup
	// Counted counts each campaign's new API tasks (delivery.Store's
	// AddEnqueued); nil: not counted.
	Counted func(ctx context.Context, tenant, campaign string, n int) error
	// Callbacks serves /callbacks/ (the providers' signed status
	// callbacks, authenticated by their signatures, not by API keys); nil:
	// /callbacks/ is 404.
	Callbacks http.Handler
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Handler returns the server's routes:
//
//	GET  /                    an index of the pages below
//	GET  /healthz             200 "ok" while Redis answers (a cluster: every master, state ok), else 503
//	GET  /metrics             Prometheus: Sluice's and asynq's series
//	     /v1/...              the enqueue API (API key as Bearer); /v1/openapi.json is open
//	     /queues/...          asynqmon (API key as Bearer or Basic password)
//	GET  /limits/...          Sluice's limits dashboard (same)
//	     /callbacks/...       Twilio and WhatsApp delivery callbacks (their signatures)
//
// The dashboards show every tenant's queues and limits, so a key bound to
// a tenant ("key:tenant") is refused there with 403; it may use the API
// for its own tenant. The queue dashboard's actions (delete, run, archive,
// pause) need a key: without keys, or with http.queues_read_only, it is
// read-only.
func Handler(o Options) (http.Handler, error) {
	if o.Config == nil || o.Redis == nil || o.Limiter == nil || o.Gatherer == nil {
		return nil, errors.New("server: Config, Redis, Limiter and Gatherer are required")
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.Default()
	}
	v1, err := api.New(api.Options{Config: o.Config, Redis: o.Redis, Limiter: o.Limiter, Producer: o.Producer,
		Keys: o.Keys, Deliveries: o.Deliveries, Counted: o.Counted, Logger: logger.With("component", "api"), Registerer: o.Registerer})
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	limits, err := dashboard.NewLimits(dashboard.LimitsOptions{Limiter: o.Limiter, Config: o.Config, Logger: logger.With("component", "dashboard")})
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	queues, err := dashboard.NewQueues(dashboard.QueuesOptions{Redis: o.Redis, ReadOnly: o.Config.HTTP.QueuesReadOnly || o.Keys.Empty()})
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	operator := func(h http.Handler) http.Handler {
		return o.Keys.Require(api.RequireOptions{Basic: true}, operatorOnly(h))
	}
	mux := http.NewServeMux()
	health := app.HTTPHandler(o.Redis, o.Gatherer) // GET /healthz and /metrics
	mux.Handle("/healthz", health)
	mux.Handle("/metrics", health)
	mux.Handle("/v1/", v1)
	mux.Handle("/queues/", operator(queues))
	mux.Handle("/limits/", operator(limits))
	mux.Handle("/queues", http.RedirectHandler("/queues/", http.StatusMovedPermanently))
	mux.Handle("/limits", http.RedirectHandler("/limits/", http.StatusMovedPermanently))
	if o.Callbacks != nil {
		mux.Handle("/callbacks/", o.Callbacks)
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_ = index.Execute(w, struct{ Auth bool }{!o.Keys.Empty()})
	})
	// Browsers resend HTTP Basic credentials on their own, also on a
	// form another site posts: state-changing requests from another
	// origin (the queue dashboard's delete, run, pause) are refused.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refuse(w, r, http.StatusForbidden, "cross-origin request refused: a state-changing request must come from this server's own pages or from a non-browser client")
	}))
	var h http.Handler = cop.Handler(mux)
	if o.Keys.Empty() {
		h = loopbackHostOnly(h)
	}
	return h, nil
}

// loopbackHostOnly guards a server without API keys, which listens on
// loopback only, against DNS rebinding: a page on another site whose name
// is made to resolve to 127.0.0.1 would be "same-origin" and could enqueue
// sends or read the dashboards. Requests must name a loopback host
// (localhost, 127.0.0.0/8, [::1]); others get 421 Misdirected Request. The
// callbacks carry their providers' signatures and are not guarded.
func loopbackHostOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/callbacks/") || loopbackHost(r.Host) {
			next.ServeHTTP(w, r)
			return
		}
		refuse(w, r, http.StatusMisdirectedRequest, "this server has no API keys and answers only requests for localhost, 127.0.0.1 or [::1]")
	})
}

// refuse answers a request a guard refuses: an RFC 9457 problem on the API
// (/v1/), as its other errors are, and plain text elsewhere.
func refuse(w http.ResponseWriter, r *http.Request, status int, detail string) {
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		api.WriteRefusal(w, status, detail)
		return
	}
	http.Error(w, detail, status)
}

// loopbackHost reports whether a Host header names the loopback interface.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// operatorOnly refuses keys bound to a tenant: the dashboards show every
// tenant's data. With authentication off there is no principal and the
// request passes (loopback only).
func operatorOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := api.PrincipalFrom(r.Context()); ok && p.Tenant != "" {
			http.Error(w, "the dashboards show every tenant's data: use an API key without a tenant", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

var index = template.Must(template.New("index").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sluice</title>
<style>body{font:15px/1.5 system-ui,sans-serif;margin:2rem;max-width:50rem}code{background:#f3f3f3;padding:0 .2em}</style></head>
<body><h1>Sluice</h1>
<ul>
<li><a href="/limits/">Limits</a>: every live limit with its remaining, reset and effective rate, backlogs, paused scopes, events</li>
<li><a href="/queues/">Queues</a>: asynqmon, the queues and their tasks</li>
<li><a href="/v1/openapi.json">/v1/openapi.json</a>: the enqueue API (OpenAPI 3.1)</li>
<li><a href="/metrics">/metrics</a> (Prometheus) and <a href="/healthz">/healthz</a></li>
</ul>
{{if .Auth}}<p>The dashboards ask for an API key: any user name, the key as password.</p>{{else}}<p>No API keys are set (SLUICE_API_KEYS): this server only listens on loopback, and the queue dashboard is read-only.</p>{{end}}
</body></html>
`))
