package app

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/delivery"
	"github.com/sluice-dev/sluice/producer"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

// System is Sluice assembled from one configuration: what `sluice serve`
// runs, and `sluice demo` with the providers' emulators. Nothing runs yet:
// the caller starts the Worker and StartCleanup and serves the HTTP parts
// (internal/server.Start).
type System struct {
	Config *config.Config
	Redis  redis.UniversalClient
	// Registry is /metrics: asynq's queue series (NewRegistry), the
	// worker's and, registered by the server, the API's and callbacks'.
	Registry *prometheus.Registry
	// Limiter is the limiter over Redis (LimiterOptions), logging as
	// component=limiter.
	Limiter *throttle.Redis
	// Store is the delivery store: the Worker records each send and
	// archive in it, the callbacks the providers' reports, the Producer
	// each campaign's size.
	Store *delivery.Store
	// Worker serves every enabled channel (NewWorker).
	Worker *worker.Worker
	// Producer sends for the API (NewProducer), counting campaigns in
	// Store.
	Producer *producer.Client
}

// BuildOptions are what Build needs besides the configuration and Redis.
type BuildOptions struct {
	// Secrets resolves credentials; nil means the environment (cfg.Secret).
	Secrets Secrets
	// Logger is the limiter's (with component=limiter); nil:
	// slog.Default().
	Logger *slog.Logger
	// WorkerLogger is the worker's; nil: Logger.
	WorkerLogger *slog.Logger
}

// Build assembles cfg's system over rdb: the registry, the limiter, the
// delivery store, the worker and the producer. The error is a part's: a
// channel's missing credential (naming its environment variable), a rule
// that does not compile.
func Build(cfg *config.Config, rdb redis.UniversalClient, opts BuildOptions) (*System, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	wlogger := opts.WorkerLogger
	if wlogger == nil {
		wlogger = logger
	}
	s := &System{Config: cfg, Redis: rdb, Registry: NewRegistry(rdb)}
	lopts := LimiterOptions(cfg, nil)
	lopts.Logger = logger.With("component", "limiter")
	s.Limiter = throttle.NewRedis(rdb, lopts)
	var err error
	if s.Store, err = delivery.New(delivery.Options{Redis: rdb, Prefix: cfg.Redis.KeyPrefix}); err != nil {
		return nil, err
	}
	if s.Worker, err = NewWorker(cfg, rdb, s.Limiter, Options{Secrets: opts.Secrets, Logger: wlogger,
		Metrics: worker.NewMetrics(s.Registry), Delivery: s.Store}); err != nil {
		return nil, err
	}
	if s.Producer, err = NewProducer(cfg, rdb, s.Limiter, s.Store.AddEnqueued); err != nil {
		return nil, err
	}
	return s, nil
}
