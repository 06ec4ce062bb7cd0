package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

// Serve runs the worker, the cleanup job and, on cfg.HTTP.Listen, the HTTP
// server (Handler) until ctx is done, then shuts down gracefully: in-flight
// sends finish within worker.shutdown_timeout or go back to their queue.
//
// redisURL, when not empty, overrides the configuration's Redis. The API
// keys are read from SLUICE_API_KEYS; with none, a listener bound to a
// non-loopback address is refused (app.ErrExposed) before anything runs.
func Serve(ctx context.Context, cfg *config.Config, redisURL string, logger *slog.Logger) error {
	keys, err := api.ParseKeys(os.Getenv(config.APIKeysEnv))
	if err != nil {
		return err // names SLUICE_API_KEYS and the item, never a key
	}
	var ln net.Listener
	if cfg.HTTP.Listen != "" {
		if ln, err = net.Listen("tcp", cfg.HTTP.Listen); err != nil {
			return fmt.Errorf("http.listen %s: %w", cfg.HTTP.Listen, err)
		}
		defer ln.Close()
		if err := app.CheckExposure(ln.Addr(), !keys.Empty()); err != nil {
			return err
		}
	}
	if redisURL == "" {
		if redisURL, err = cfg.RedisURL(); err != nil {
			return err
		}
	}
	rdb, err := app.ConnectURL(ctx, redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	reg := app.NewRegistry(rdb)
	lopts := app.LimiterOptions(cfg, nil)
	lopts.Logger = logger.With("component", "limiter")
	lim := throttle.NewRedis(rdb, lopts)
	store, err := NewStore(cfg, rdb)
	if err != nil {
		return err
	}
	w, err := app.NewWorker(cfg, rdb, lim, app.Options{Logger: logger, Metrics: worker.NewMetrics(reg), Delivery: store})
	if err != nil {
		return err
	}
	cr, err := app.StartCleanup(cfg, lim, logger, app.NewCleanupMetrics(reg))
	if err != nil {
		return err
	}
	defer func() { <-cr.Stop().Done() }()

	var srv *http.Server
	if ln != nil {
		cb, err := NewCallbacks(cfg, CallbackOptions{Store: store, Worker: w, Limiter: lim, Registerer: reg, Logger: logger.With("component", "callbacks")})
		if err != nil {
			return err
		}
		h, err := Handler(Options{Config: cfg, Redis: rdb, Limiter: lim, Gatherer: reg, Registerer: reg, Keys: keys,
			Deliveries: Deliveries(store), Counted: store.AddEnqueued, Callbacks: cb, Logger: logger})
		if err != nil {
			return err
		}
		srv = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: time.Minute,
			WriteTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute}
		defer srv.Close() // on an early return; the graceful Shutdown below comes first
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error("http server stopped", "err", err)
			}
		}()
		logger.Info("http listening", "addr", ln.Addr().String(), "api_keys", keys.Len(),
			"paths", "/v1/ /queues/ /limits/ /callbacks/ /healthz /metrics")
	}
	if err := w.Start(); err != nil {
		return err
	}
	logger.Info("worker started", "concurrency", cfg.Worker.Concurrency)
	<-ctx.Done()
	logger.Info("shutting down: finishing in-flight sends", "timeout", cfg.Worker.ShutdownTimeout)
	w.Shutdown()
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}
	logger.Info("stopped")
	return nil
}
