package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/delivery"
	"github.com/sluice-dev/sluice/producer"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

// Parts are what Start serves and feeds: `sluice serve` and `sluice demo`
// build them the same way.
type Parts struct {
	Config  *config.Config
	Redis   redis.UniversalClient
	Limiter *throttle.Redis
	// Registry is /metrics, and receives the API's and callbacks' series.
	Registry *prometheus.Registry
	// Store is the delivery store the Worker records in.
	Store *delivery.Store
	// Worker takes the throttles that delivery callbacks report.
	Worker *worker.Worker
	// Producer sends the API's sends; nil: one the API makes
	// (app.NewProducer, counting in Store).
	Producer *producer.Client
	// Keys are the API keys; nil or empty: none (loopback only).
	Keys *api.Keys
	// Secrets resolves the callbacks' credentials; nil: the environment.
	Secrets app.Secrets
	Logger  *slog.Logger
}

// shutdownTimeout bounds the graceful end of the HTTP server.
const shutdownTimeout = 5 * time.Second

// Start serves Handler on ln, with the providers' delivery callbacks
// (NewCallbacks), GET /v1/tasks/{id}'s delivery status and the campaigns'
// counts from p.Store. It returns a function that shuts the server down,
// letting requests under way finish for up to 5s; it may be called more
// than once. On an error ln is closed.
func Start(ln net.Listener, p Parts) (stop func(), err error) {
	cb, err := NewCallbacks(p.Config, CallbackOptions{Store: p.Store, Worker: p.Worker, Limiter: p.Limiter, Secrets: p.Secrets,
		Registerer: p.Registry, Logger: p.Logger.With("component", "callbacks")})
	if err != nil {
		ln.Close()
		return nil, err
	}
	h, err := Handler(Options{Config: p.Config, Redis: p.Redis, Limiter: p.Limiter, Gatherer: p.Registry, Registerer: p.Registry,
		Keys: p.Keys, Producer: p.Producer, Deliveries: Deliveries(p.Store), Counted: p.Store.AddEnqueued, Callbacks: cb, Logger: p.Logger})
	if err != nil {
		ln.Close()
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: time.Minute,
		WriteTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.Logger.Error("http server stopped", "err", err)
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
			defer cancel()
			_ = srv.Shutdown(ctx)
		})
	}, nil
}
