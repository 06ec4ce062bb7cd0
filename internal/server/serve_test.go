package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/app"
)

func TestServeRefusesAnExposedListenerWithoutKeys(t *testing.T) {
	t.Setenv(config.APIKeysEnv, "")
	cfg := config.Default()
	cfg.HTTP.Listen = "0.0.0.0:0"
	// No Redis is running at this URL: the refusal comes first.
	err := Serve(context.Background(), cfg, "redis://127.0.0.1:1/0", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if !errors.Is(err, app.ErrExposed) {
		t.Fatalf("Serve on 0.0.0.0 without keys = %v, want ErrExposed", err)
	}
}

func TestServeRefusesMalformedKeysWithoutShowingThem(t *testing.T) {
	t.Setenv(config.APIKeysEnv, "short-secret-1")
	err := Serve(context.Background(), config.Default(), "redis://127.0.0.1:1/0", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || strings.Contains(err.Error(), "short-secret-1") || !strings.Contains(err.Error(), config.APIKeysEnv) {
		t.Fatalf("Serve with a 14-byte key = %v, want an error that does not show it", err)
	}
}
