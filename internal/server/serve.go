package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/app"
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
		if err := app.CheckListen(cfg.HTTP.Listen, !keys.Empty()); err != nil {
			return err
		}
		if ln, err = net.Listen("tcp", cfg.HTTP.Listen); err != nil {
			return fmt.Errorf("http.listen %s: %w", cfg.HTTP.Listen, err)
		}
		defer ln.Close()
		if err := app.CheckExposure(cfg.HTTP.Listen, ln.Addr(), !keys.Empty()); err != nil {
			return err
		}
	}
	var rdb redis.UniversalClient
	if redisURL != "" {
		rdb, err = app.ConnectURL(ctx, redisURL) // --redis: one server, whatever redis.mode says
	} else {
		rdb, err = app.Connect(ctx, cfg, nil)
	}
	if err != nil {
		return err
	}
	defer rdb.Close()
	sys, err := app.Build(cfg, rdb, app.BuildOptions{Logger: logger})
	if err != nil {
		return err
	}
	w := sys.Worker
	cr, err := app.StartCleanup(cfg, sys.Limiter, logger, app.NewCleanupMetrics(sys.Registry))
	if err != nil {
		return err
	}
	defer func() { <-cr.Stop().Done() }()

	stopHTTP := func() {}
	if ln != nil {
		if stopHTTP, err = Start(ln, PartsOf(sys, keys, nil, logger)); err != nil {
			return err
		}
		defer stopHTTP() // on an early return; after the worker's shutdown below otherwise
		logger.Info("http listening", "addr", ln.Addr().String(), "api_keys", keys.Len(),
			"paths", "/v1/ /queues/ /limits/ /callbacks/ /healthz /metrics")
	}
	if err := w.Start(); err != nil {
		return err
	}
	logger.Info("worker started", "concurrency", cfg.Worker.Concurrency)
	backfilled := backfillClaims(ctx, sys, logger)
	<-ctx.Done()
	logger.Info("shutting down: finishing in-flight sends", "timeout", cfg.Worker.ShutdownTimeout)
	w.Shutdown()
	<-backfilled // it stops at its next page once ctx is done
	stopHTTP()
	logger.Info("stopped")
	return nil
}

// PartsOf is Start's parts of the system sys assembled (app.Build), with the
// API keys, the callbacks' secrets (nil: the environment) and the logger.
func PartsOf(sys *app.System, keys *api.Keys, secrets app.Secrets, logger *slog.Logger) Parts {
	return Parts{Config: sys.Config, Redis: sys.Redis, Limiter: sys.Limiter, Registry: sys.Registry, Store: sys.Store,
		Worker: sys.Worker, Producer: sys.Producer, Keys: keys, Secrets: secrets, Logger: logger}
}

// backfillClaims runs the producer's Backfill in the background: the
// claims of the tasks an earlier release enqueued without one, written once
// per deployment (the first serve process to start after the upgrade walks
// the queues; the others find the marker and write none). It logs how many
// it wrote and how long that took at INFO, a failure at WARN; serve runs
// on either way. The channel is closed when it is done.
func backfillClaims(ctx context.Context, sys *app.System, logger *slog.Logger) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		start := time.Now()
		n, err := sys.Producer.Backfill(ctx)
		if err != nil {
			logger.Warn("claims backfill failed", "claims", n, "took", time.Since(start), "err", err)
			return
		}
		logger.Info("claims backfill", "claims", n, "took", time.Since(start))
	}()
	return done
}
