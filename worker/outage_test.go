package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/internal/delivery"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testutil"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

// logSignals is a slog.Handler that signals log lines: each message that
// contains a watched text sends on its channel (buffered, never blocking).
type logSignals struct {
	mu    sync.Mutex
	watch map[string]chan struct{}
}

func newLogSignals(texts ...string) *logSignals {
	l := &logSignals{watch: map[string]chan struct{}{}}
	for _, s := range texts {
		l.watch[s] = make(chan struct{}, 100)
	}
	return l
}

func (l *logSignals) on(text string) <-chan struct{} { return l.watch[text] }

func (l *logSignals) Enabled(context.Context, slog.Level) bool { return true }
func (l *logSignals) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for s, c := range l.watch {
		if strings.Contains(r.Message, s) {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
	return nil
}
func (l *logSignals) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logSignals) WithGroup(string) slog.Handler      { return l }

func wait(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(15 * time.Second):
		t.Fatalf("no %s within 15s", what)
	}
}

// TestSendIsNotRepeatedAfterRedisWasDown stops a real redis-server (AOF on)
// right after the provider accepted a send and before the worker could
// record it or asynq its completion, then restarts it. The worker keeps the
// send's record and writes it when Redis is back. asynq never records the
// completion (its syncer retries with a cancelled context), so the task is
// run again, as asynq's recoverer does once the lease has expired; the
// rerun, in another worker, finds the record and completes without a
// second request to the provider.
func TestSendIsNotRepeatedAfterRedisWasDown(t *testing.T) {
	t.Parallel()
	rs := redistest.StartWith(t, redistest.Options{AppendOnly: true})
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr, DialTimeout: 200 * time.Millisecond, MaxRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := delivery.New(delivery.Options{Redis: rdb, Prefix: "blip"})
	require.NoError(t, err)

	var requests atomic.Int64
	started, release := make(chan struct{}, 10), make(chan struct{})
	ch := worker.Channel{Name: "sms", TaskType: "test:send",
		Prepare: func([]byte) (worker.Prepared, error) {
			return worker.Prepared{Fields: map[string]string{}, Send: func(context.Context) (channels.Response, error) {
				requests.Add(1)
				started <- struct{}{}
				<-release
				return channels.Response{ProviderID: "SM1", Status: 201}, nil
			}}, nil
		}}
	start := func(logs *logSignals, reg *prometheus.Registry) *worker.Worker {
		w, err := worker.New(worker.Options{Redis: rdb, Limiter: throttle.NewRedis(rdb, throttle.Options{Prefix: "blip"}),
			Channels: []worker.Channel{ch}, Concurrency: 2, Delivery: store, Metrics: worker.NewMetrics(reg),
			Logger: slog.New(logs), ShutdownTimeout: time.Second})
		require.NoError(t, err)
		require.NoError(t, w.Start())
		return w
	}

	logsA := newLogSignals("kept to record when Redis answers", "Will retry syncing", "wrote the sends kept")
	a := start(logsA, prometheus.NewRegistry())
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			a.Shutdown()
		}
	})
	client := asynq.NewClientFromRedisClient(rdb)
	_, err = client.Enqueue(asynq.NewTask("test:send", []byte(`{}`)), asynq.Queue("sms"), asynq.TaskID("blip-1"),
		asynq.MaxRetry(5), asynq.Retention(time.Hour))
	require.NoError(t, err)

	wait(t, started, "send")
	require.NoError(t, rs.Shutdown(), "Redis stops while the provider handles the send")
	close(release) // the provider accepts it
	wait(t, logsA.on("kept to record when Redis answers"), "kept send")
	wait(t, logsA.on("Will retry syncing"), "asynq's failed completion, handed to its syncer")
	require.NoError(t, rs.Restart())
	wait(t, logsA.on("wrote the sends kept"), "record written after Redis returned")

	ctx := context.Background()
	at, err := store.SentAt(ctx, "blip-1", "sms")
	require.NoError(t, err)
	require.False(t, at.IsZero(), "the send is recorded")
	insp := asynq.NewInspectorFromRedisClient(rdb)
	info, err := insp.GetTaskInfo("sms", "blip-1")
	require.NoError(t, err)
	require.Equal(t, asynq.TaskStateActive, info.State, "asynq could not record the completion")
	a.Shutdown()
	stopped = true

	// The lease ends 30s after the last heartbeat and the recoverer waits
	// 30s more: age the lease instead (asynq's own key), so that worker B's
	// recoverer, which runs as it starts, puts the task back for a retry,
	// and run that retry now rather than after asynq's 15-45s delay.
	require.NoError(t, rdb.ZAdd(ctx, "asynq:{sms}:lease", redis.Z{Score: float64(time.Now().Add(-2 * time.Minute).Unix()), Member: "blip-1"}).Err())
	logsB := newLogSignals("task came back after its send")
	regB := prometheus.NewRegistry()
	b := start(logsB, regB)
	t.Cleanup(b.Shutdown)
	// The recoverer's move has no signal: poll.
	info = testutil.Task(t, insp, "sms", "blip-1", 15*time.Second, testutil.In(asynq.TaskStateRetry))
	require.Equal(t, 1, info.Retried, "a lease-expired rerun counts as a failed attempt")
	require.Equal(t, asynq.ErrLeaseExpired.Error(), info.LastErr)
	require.NoError(t, insp.RunTask("sms", "blip-1"))

	wait(t, logsB.on("task came back after its send"), "rerun completed without a send")
	// asynq's completion has no signal either.
	testutil.Task(t, insp, "sms", "blip-1", 15*time.Second, testutil.In(asynq.TaskStateCompleted))
	require.Equal(t, int64(1), requests.Load(), "the provider saw one request")
	require.Equal(t, 1.0, outcomes(t, regB)[worker.OutcomeAlreadySent], "worker B's outcomes")
	p, err := store.Progress(ctx, "", "")
	require.NoError(t, err)
	require.Equal(t, int64(1), p.Sent, "the send is counted once")
}

// outcomes reads sluice_tasks_total by outcome from reg.
func outcomes(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_tasks_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}
