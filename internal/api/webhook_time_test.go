package api_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/tasks"
)

// TestWebhookEventTimestamp: a webhook's task carries the event's time (the
// body's "timestamp", the same in every attempt), stamped when the request
// is served or given by the client; a repeat of a request that gave none is
// still a repeat though it is stamped later.
func TestWebhookEventTimestamp(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{keys: keysEnv})

	t.Run("stamped at enqueue", func(t *testing.T) {
		before := time.Now().UTC().Truncate(time.Second)
		r := e.do("POST", "/v1/webhooks", webhook("evt-ts-1"), bearer(adminKey), specValid)
		require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
		ts := mustTime(t, payloadOf(t, e.task("webhook", "evt-ts-1"))["timestamp"].(string))
		require.False(t, ts.Before(before), "%v before %v", ts, before)
		require.False(t, ts.After(time.Now()), "%v", ts)
	})
	t.Run("given by the client", func(t *testing.T) {
		r := e.do("POST", "/v1/webhooks", with(webhook("evt-ts-2"), "timestamp", "2026-03-01T08:30:00Z"), bearer(adminKey), specValid)
		require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
		require.Equal(t, "2026-03-01T08:30:00Z", payloadOf(t, e.task("webhook", "evt-ts-2"))["timestamp"])
	})
	t.Run("a repeat stamped later is a repeat", func(t *testing.T) {
		// The first request was served an hour ago: its task has that time.
		p := tasks.WebhookDeliver{URL: "https://hooks.example.com/orders", EventType: "order.updated",
			Payload: json.RawMessage(`{"order":"A-1001"}`), IdempotencyKey: "evt-ts-3", Timestamp: time.Now().Add(-time.Hour).UTC().Truncate(time.Second)}
		task, err := tasks.NewWebhookDeliverTask(p)
		require.NoError(t, err)
		c := asynq.NewClientFromRedisClient(e.rdb)
		_, err = c.Enqueue(task)
		require.NoError(t, err)

		r := e.do("POST", "/v1/webhooks", webhook("evt-ts-3"), bearer(adminKey), specValid)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var a api.Accepted
		r.json(t, &a)
		require.True(t, a.Duplicate)

		// A different event time is a different request.
		r = e.do("POST", "/v1/webhooks", with(webhook("evt-ts-3"), "timestamp", "2026-03-01T08:30:00Z"), bearer(adminKey), specValid)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s", r.Body)
	})
}
