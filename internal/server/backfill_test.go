package server

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/producer"
	"github.com/sluice-dev/sluice/tasks"
)

// records passes each log record to a channel, dropping those that do not
// fit in it.
type records chan slog.Record

func (r records) Enabled(context.Context, slog.Level) bool { return true }
func (r records) Handle(_ context.Context, rec slog.Record) error {
	select {
	case r <- rec.Clone():
	default:
	}
	return nil
}
func (r records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r records) WithGroup(string) slog.Handler      { return r }

// serve writes, once it has started, the claim a task the earlier release
// enqueued lacks, and says so at INFO with the count.
func TestServeBackfillsClaims(t *testing.T) {
	t.Setenv(config.APIKeysEnv, "")
	t.Setenv("WHATSAPP_TOKEN", "token")
	t.Setenv("TWILIO_ACCOUNT_SID", "AC0123456789abcdef0123456789abcdef")
	t.Setenv("TWILIO_AUTH_TOKEN", "secret")
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	// The earlier release's whatsapp:send, due in an hour (no worker runs it).
	task, err := tasks.NewWhatsAppSendTask(tasks.WhatsAppSend{PhoneNumberID: "1065", To: "+12025550101", Text: "hi", IdempotencyKey: "order-7"})
	require.NoError(t, err)
	_, err = asynq.NewClientFromRedisClient(rdb).Enqueue(task, asynq.TaskID("order-7"), asynq.Queue("whatsapp"), asynq.ProcessIn(time.Hour))
	require.NoError(t, err)

	cfg := config.Default()
	cfg.HTTP.Listen = ""
	for name, cc := range cfg.Channels {
		cc.Enabled = name == "whatsapp" || name == "sms"
	}
	logs := make(records, 1024)
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- Serve(sctx, cfg, srv.URL(), slog.New(logs)) }()
	deadline := time.After(30 * time.Second)
	for done := false; !done; {
		select {
		case rec := <-logs:
			if rec.Level >= slog.LevelWarn && rec.Message == "claims backfill failed" {
				t.Fatalf("backfill: %v", rec)
			}
			if rec.Message == "claims backfill" {
				rec.Attrs(func(a slog.Attr) bool {
					if a.Key == "claims" {
						require.Equal(t, int64(1), a.Value.Int64())
					}
					return true
				})
				done = true
			}
		case err := <-served:
			t.Fatalf("serve returned before the backfill: %v", err)
		case <-deadline:
			t.Fatal("no backfill logged in 30s")
		}
	}
	require.Equal(t, tasks.TypeWhatsAppSend+"|enqueued", rdb.Get(ctx, producer.ClaimKey(cfg.Redis.KeyPrefix, "order-7")).Val())
	stop()
	require.NoError(t, <-served)
}
