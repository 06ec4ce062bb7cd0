package cli

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/throttle"
)

// Every type written to the stream (throttle.EventTypes: Emit writes no
// other) is accepted by `events tail --type`, and printed with its fields.
func TestEventsTailAcceptsEveryWrittenType(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	lim := app.NewLimiter(config.Default(), rdb, nil)
	for _, typ := range throttle.EventTypes {
		lim.Emit(context.Background(), typ, "sms:x:1", time.Millisecond, "code", 429, "reason", "why")
	}
	for _, typ := range throttle.EventTypes {
		r := run(t, "--redis", srv.URL(), "events", "tail", "--type", typ, "--from-start", "--count", "1")
		require.Equal(t, 0, r.code, "--type %s: %s", typ, r.stderr)
		require.Regexp(t, `^\S+ `+typ+` sms:x:1 `, r.stdout)
	}
	r := run(t, "--redis", srv.URL(), "events", "tail", "--type", "endpoint.failing", "--from-start", "--count", "1")
	require.Contains(t, r.stdout, `endpoint.failing sms:x:1 code=429 reason="why"`)
	r = run(t, "--redis", srv.URL(), "events", "tail", "--type", "limits.exceded")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "want one of limits.exceeded, limits.warning, ")
}

// signalWriter is a buffer safe for concurrent use that closes wrote on
// the first write.
type signalWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	once  sync.Once
	wrote chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.once.Do(func() { close(w.wrote) })
	return w.buf.Write(p)
}

func (w *signalWriter) String() string { w.mu.Lock(); defer w.mu.Unlock(); return w.buf.String() }

// A tail of an empty stream says on stderr that it waits, then waits.
func TestEventsTailSaysItWaitsOnAnEmptyStream(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout bytes.Buffer
	stderr := &signalWriter{wrote: make(chan struct{})}
	done := make(chan int, 1)
	go func() {
		done <- Execute(ctx, []string{"--redis", srv.URL(), "--log-level", "warn", "events", "tail", "--from-start"}, &stdout, stderr)
	}()
	select {
	case <-stderr.wrote:
	case code := <-done:
		t.Fatalf("tail ended (exit %d) without waiting: %s", code, stderr.String())
	case <-ctx.Done():
		t.Fatal("tail said nothing on an empty stream")
	}
	cancel()
	require.Equal(t, 0, <-done)
	require.Regexp(t, `^sluice: no events yet in sluice:\{_events\}; waiting for new ones \(Ctrl-C to stop\)\n$`, stderr.String())
	require.Empty(t, stdout.String())
}
