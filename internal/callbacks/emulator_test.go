package callbacks_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/internal/callbacks"
	"github.com/sluice-dev/sluice/internal/delivery"
	"github.com/sluice-dev/sluice/internal/emulator"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

func wait[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(15 * time.Second):
		t.Fatalf("no %s within 15s", what)
		panic("unreachable")
	}
}

// TestEmulatedTwilioCallbacks runs the whole loop against the Twilio
// emulator: the worker sends with a StatusCallback, the emulator posts
// signed statuses to the callbacks handler (with a signer of its own, not
// this package's), and a 30022 reported after the send pauses the sender.
func TestEmulatedTwilioCallbacks(t *testing.T) {
	t.Parallel()
	emu, err := emulator.Start(emulator.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })

	rdb := redistest.Start(t).Client(t)
	lim := throttle.NewRedis(rdb, throttle.Options{Prefix: "emu"})
	store, err := delivery.New(delivery.Options{Redis: rdb, Prefix: "emu"})
	require.NoError(t, err)

	// The callbacks server comes first (its URL is the StatusCallback),
	// the worker it feeds back to after.
	var wk atomic.Pointer[worker.Worker]
	feedback := func(ctx context.Context, ch string, f map[string]string, ce *channels.Error, sent time.Time) (string, error) {
		return wk.Load().Feedback(ctx, ch, f, ce, sent)
	}
	served := make(chan int, 10)
	var cb atomic.Pointer[http.Handler]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		(*cb.Load()).ServeHTTP(rec, r)
		w.WriteHeader(rec.Code)
		served <- rec.Code
	}))
	t.Cleanup(srv.Close)
	cbURL := srv.URL + callbacks.TwilioPath
	h, err := callbacks.New(callbacks.Options{Store: store, Feedback: feedback, TwilioAuthToken: emulator.DefaultTwilioAuthToken,
		TwilioURL: cbURL, Limiter: lim, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	cb.Store(&h)

	rec := signalling{store, make(chan worker.Sent, 2)}
	c := &channels.Twilio{BaseURL: emu.TwilioURL(), AccountSID: emulator.DefaultTwilioAccountSID, AuthToken: emulator.DefaultTwilioAuthToken, StatusCallback: cbURL}
	w, err := worker.New(worker.Options{Redis: rdb, Limiter: lim, Channels: []worker.Channel{worker.SMSChannel(c, nil)},
		Delivery: rec, Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: time.Second})
	require.NoError(t, err)
	wk.Store(w)
	require.NoError(t, w.Start())
	t.Cleanup(w.Shutdown)

	client := asynq.NewClientFromRedisClient(rdb)
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	for _, m := range []struct{ id, from, to string }{
		{"ok", "+14155550101", "+14155552345"},
		{"throttled", "+14155550102", "+1415555" + emulator.SuffixCarrierThrottle},
	} {
		_, err := tasks.EnqueueSMSSend(ctx, client, tasks.SMSSend{V: 1, Delivery: tasks.Delivery{Tenant: "acme", Campaign: "campaign"}, From: m.from, To: m.to, Body: "hi"}, asynq.TaskID(m.id))
		require.NoError(t, err)
	}
	// Two sends recorded, two statuses each handled: a status that came
	// before its send's record waited for it, so all is in now.
	for range 2 {
		wait(t, rec.sent, "recorded send")
	}
	for range 4 {
		require.Equal(t, http.StatusOK, wait(t, served, "status callback"))
	}

	st, err := store.Get(ctx, "ok")
	require.NoError(t, err)
	require.Equal(t, delivery.StateDelivered, st.State)
	st, err = store.Get(ctx, "throttled")
	require.NoError(t, err)
	require.Equal(t, delivery.StateUndelivered, st.State)
	require.Equal(t, 30022, st.Code)
	pz, err := lim.PauseOf(ctx, "sms:paused:sender:+14155550102")
	require.NoError(t, err)
	require.NotNil(t, pz, "the carrier throttle reported after the send pauses the sender")
	pr, err := store.Progress(ctx, "acme", "campaign")
	require.NoError(t, err)
	require.Equal(t, delivery.Progress{Sent: 2, Delivered: 1, Undelivered: 1}, pr)
}
