package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/channels"
)

// TestUnknownTaskTypeIsArchivedAtOnce: a task whose type no channel handles
// is archived on its first attempt with the reason, not retried MaxRetry
// times (issue 7: foo:bar was retried ten times). asynq matches handlers by
// prefix, so "test:sendx" would have reached the test:send handler: it is
// unknown too.
func TestUnknownTaskTypeIsArchivedAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, func(testPayload, int) error { return nil })
	for _, typ := range []string{"foo:bar", "test:sendx", "test:send:v2"} {
		_, err := h.client.Enqueue(asynq.NewTask(typ, []byte(`{"id":"x"}`)), asynq.Queue("test"), asynq.TaskID(typ), asynq.MaxRetry(10))
		require.NoError(t, err)
	}
	for _, typ := range []string{"foo:bar", "test:sendx", "test:send:v2"} {
		info := h.waitState(typ, asynq.TaskStateArchived, 10*time.Second)
		require.Contains(t, info.LastErr, "unknown task type")
		require.Contains(t, info.LastErr, "this worker handles test:send")
		require.Equal(t, 0, info.Retried, "archived at once")
	}
	require.Empty(t, h.calls, "no handler ran")
}

// TestOversizedPayloadIsArchivedUnread: a producer that bypasses the
// constructors cannot make the worker decode or send a payload over the
// channel's cap (issue 7: a 10 MB webhook was stored and POSTed).
func TestOversizedPayloadIsArchivedUnread(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, func(testPayload, int) error { return nil }, func(c *Channel) { c.MaxPayloadBytes = 1 << 10 })
	h.enqueue("big", `{"id":"big","step":"`+strings.Repeat("x", 10<<20)+`"}`)
	h.enqueue("small", `{"id":"small","step":"`+strings.Repeat("x", 900)+`"}`)
	// Wait on the queue's counts, not on the task: every read of the task
	// copies its 10 MB out of Redis, and polling that every 20ms on a busy
	// 2-core host starved the worker past a 10s bound. The bound is a
	// hang's, not a measure.
	require.Eventually(t, func() bool {
		qi, err := h.insp.GetQueueInfo("test")
		return err == nil && qi.Archived == 1
	}, time.Minute, 50*time.Millisecond, "the oversized task archived")
	info := h.waitState("big", asynq.TaskStateArchived, time.Minute)
	require.Contains(t, info.LastErr, "payload is 10485782 bytes, over the channel's cap of 1024")
	require.Equal(t, 0, info.Retried)
	require.Equal(t, "small", h.waitSent(time.Minute).id)
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Zero(t, h.calls["big"], "never sent")
}

// TestProviderWaitIsCapped: `Retry-After: 9000000000` asked for 285 years;
// the channel's MaxRetryAfter cuts it (issue 7: a task was parked until
// 2312). The task comes back after the cap, having spent one attempt of
// its retry budget.
func TestProviderWaitIsCapped(t *testing.T) {
	t.Parallel()
	const asked = 9000000000 * time.Second
	h := newHarness(t, nil, func(p testPayload, call int) error {
		if call == 1 {
			return &channels.Error{Class: channels.Throttled, Provider: "webhook", HTTPStatus: 429, RetryAfter: asked}
		}
		return nil
	}, func(c *Channel) { c.MaxRetryAfter = time.Second })
	h.enqueue("parked", "")
	info := h.waitState("parked", asynq.TaskStateRetry, 10*time.Second)
	// Due a second after the block: a bound of a minute tells it from the
	// 285 years asked, however late this host polls.
	require.WithinDuration(t, time.Now(), info.NextProcessAt, time.Minute, "due after the cap, not in %v", asked)
	r := h.waitSent(10 * time.Second)
	require.Equal(t, "parked", r.id)
	require.Equal(t, 1, r.retried, "a provider throttle spends one attempt of the budget")
}
