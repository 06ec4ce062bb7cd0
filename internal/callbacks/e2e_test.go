package callbacks_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/internal/callbacks"
	"github.com/sluice-dev/sluice/internal/delivery"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

// signalling passes the worker's records to the store and tells the test.
type signalling struct {
	*delivery.Store
	sent chan worker.Sent
}

func (s signalling) RecordSent(ctx context.Context, r worker.Sent) error {
	err := s.Store.RecordSent(ctx, r)
	s.sent <- r
	return err
}

func TestSendThenCallback(t *testing.T) {
	t.Parallel()
	// A fake Twilio that accepts the message and notes its StatusCallback.
	callback := make(chan string, 1)
	twilio := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		callback <- r.PostForm.Get("StatusCallback")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"sid":"` + messageSID + `","status":"queued"}`))
	}))
	t.Cleanup(twilio.Close)

	rdb := redistest.Start(t).Client(t)
	lim := throttle.NewRedis(rdb, throttle.Options{Prefix: "e2e"})
	store, err := delivery.New(delivery.Options{Redis: rdb, Prefix: "e2e"})
	require.NoError(t, err)
	rec := signalling{store, make(chan worker.Sent, 1)}
	c := &channels.Twilio{BaseURL: twilio.URL, AccountSID: accountSID, AuthToken: authToken, HTTP: twilio.Client(), StatusCallback: publicURL}
	w, err := worker.New(worker.Options{Redis: rdb, Limiter: lim, Channels: []worker.Channel{worker.SMSChannel(c, nil)},
		Delivery: rec, Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Shutdown)
	h, err := callbacks.New(callbacks.Options{Store: store, Feedback: w.Feedback, TwilioAuthToken: authToken, TwilioURL: publicURL,
		Limiter: lim, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)

	_, err = tasks.EnqueueSMSSend(context.Background(), asynq.NewClientFromRedisClient(rdb),
		tasks.SMSSend{V: 1, Delivery: tasks.Delivery{Tenant: "acme", Campaign: "spring-sale"}, From: sender, To: recipient, Body: "Sale starts now"}, asynq.TaskID("task-1"))
	require.NoError(t, err)
	select {
	case got := <-callback:
		require.Equal(t, publicURL, got, "the send asks Twilio for status callbacks")
	case <-time.After(10 * time.Second):
		t.Fatal("no send within 10s")
	}
	select {
	case r := <-rec.sent:
		require.Equal(t, messageSID, r.ProviderID)
	case <-time.After(10 * time.Second):
		t.Fatal("the send was not recorded within 10s")
	}

	for _, status := range []string{"sent", "delivered"} {
		p := statusParams(status, "")
		resp := httptest.NewRecorder()
		h.ServeHTTP(resp, twilioRequest("/callbacks/twilio", p, twilioSign(authToken, publicURL, p)))
		require.Equal(t, http.StatusOK, resp.Code)
	}
	st, err := store.Get(context.Background(), "task-1")
	require.NoError(t, err)
	require.Equal(t, delivery.StateDelivered, st.State)
	require.Equal(t, "spring-sale", st.Campaign)
	pr, err := store.Progress(context.Background(), "acme", "spring-sale")
	require.NoError(t, err)
	require.Equal(t, delivery.Progress{Sent: 1, Delivered: 1}, pr)
}
