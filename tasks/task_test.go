package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// newAsynq returns a client and an inspector on a fresh in-memory Redis.
func newAsynq(t *testing.T) (*redis.Client, *asynq.Client, *asynq.Inspector) {
	t.Helper()
	mr := miniredis.RunT(t)
	rc := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rc.Close() })
	return rc, asynq.NewClientFromRedisClient(rc), asynq.NewInspectorFromRedisClient(rc)
}

func TestConstructorsNormalize(t *testing.T) {
	t.Parallel()
	wa := WhatsAppSend{PhoneNumberID: " 106540352242922 ", To: "+1 (202) 555-0123", Text: "hi"}
	task, err := NewWhatsAppSendTask(wa)
	require.NoError(t, err)
	require.Equal(t, TypeWhatsAppSend, task.Type())
	want := `{"v":1,"phone_number_id":"106540352242922","to":"+12025550123","text":"hi"}`
	require.JSONEq(t, want, string(task.Payload()))
	require.Equal(t, 0, wa.V, "constructor must not modify the caller's payload")

	task, err = NewSMSSendTask(SMSSend{From: "+1 202-555-0100", To: "+61 491 570 006", Body: "hi"})
	require.NoError(t, err)
	require.JSONEq(t, `{"v":1,"from":"+12025550100","to":"+61491570006","body":"hi"}`, string(task.Payload()))

	task, err = NewHTTPCallTask(HTTPCall{Method: "patch", URL: " https://api.example.com/x "})
	require.NoError(t, err)
	require.JSONEq(t, `{"v":1,"method":"PATCH","url":"https://api.example.com/x"}`, string(task.Payload()))

	// V is always set to PayloadVersion, whatever the caller put there.
	// A webhook without an event time gets the time of enqueue.
	before := time.Now().UTC().Truncate(time.Second)
	task, err = NewWebhookDeliverTask(WebhookDeliver{V: 7, URL: "https://h.example.com", EventType: "e", Payload: json.RawMessage(`[]`), IdempotencyKey: "evt-1"})
	require.NoError(t, err)
	hook, err := DecodeWebhookDeliver(task.Payload())
	require.NoError(t, err)
	require.False(t, hook.Timestamp.Before(before) || hook.Timestamp.After(time.Now()), "stamped %v", hook.Timestamp)
	require.JSONEq(t, `{"v":1,"url":"https://h.example.com","event_type":"e","payload":[],"idempotency_key":"evt-1","timestamp":"`+hook.Timestamp.Format(time.RFC3339)+`"}`, string(task.Payload()))

	// SMS senders: a Messaging Service SID given as From moves to its own
	// field; a whatsapp: sender gives a plain number recipient its prefix.
	task, err = NewSMSSendTask(SMSSend{From: " MG0123456789abcdef0123456789abcdef ", To: "+1 202 555 0123", Body: "hi"})
	require.NoError(t, err)
	require.JSONEq(t, `{"v":1,"messaging_service_sid":"MG0123456789abcdef0123456789abcdef","to":"+12025550123","body":"hi"}`, string(task.Payload()))
	task, err = NewSMSSendTask(SMSSend{From: "whatsapp:+1 202 555 0100", To: "+1 202 555 0123", Body: "hi"})
	require.NoError(t, err)
	require.JSONEq(t, `{"v":1,"from":"whatsapp:+12025550100","to":"whatsapp:+12025550123","body":"hi"}`, string(task.Payload()))
	task, err = NewSMSSendTask(SMSSend{From: " Acme Shop ", To: "+12025550123", Body: "hi"})
	require.NoError(t, err)
	require.JSONEq(t, `{"v":1,"from":"Acme Shop","to":"+12025550123","body":"hi"}`, string(task.Payload()))
	task, err = NewSMSSendTask(SMSSend{From: "12345", To: "+12025550123", Body: "hi"})
	require.NoError(t, err)
	require.JSONEq(t, `{"v":1,"from":"12345","to":"+12025550123","body":"hi"}`, string(task.Payload()))
}

func TestConstructorsReject(t *testing.T) {
	t.Parallel()
	_, err := NewWhatsAppSendTask(WhatsAppSend{PhoneNumberID: "1", To: "+1555", Text: "hi"})
	require.EqualError(t, err, `to: "+1555" is not a valid E.164 phone number`)
	_, err = NewSMSSendTask(SMSSend{From: "+12025550100", To: "+12025550123"})
	require.EqualError(t, err, "body: required (or media_urls, or content_sid)")
	_, err = NewWebhookDeliverTask(WebhookDeliver{URL: "https://h.example.com", EventType: "e"})
	require.EqualError(t, err, "payload: required (a JSON object or array)")
	_, err = NewHTTPCallTask(HTTPCall{Method: "TRACE", URL: "https://h.example.com"})
	require.ErrorContains(t, err, `method: "TRACE"`)
}

// TestConstructorOptions enqueues each task type and reads it back from Redis
// to check the options the constructors set.
func TestConstructorOptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, client, insp := newAsynq(t)
	type want struct {
		Queue     string
		ID        string
		MaxRetry  int
		Retention time.Duration
	}
	tests := []struct {
		name    string
		enqueue func() (*asynq.TaskInfo, error)
		want    want
	}{
		{"whatsapp", func() (*asynq.TaskInfo, error) {
			p := validWhatsApp()
			p.IdempotencyKey = "wa-1"
			return EnqueueWhatsAppSend(ctx, client, p)
		}, want{"whatsapp", "wa-1", DefaultMaxRetry, 24 * time.Hour}},
		{"sms", func() (*asynq.TaskInfo, error) {
			p := validSMS()
			p.IdempotencyKey = "sms-1"
			return EnqueueSMSSend(ctx, client, p)
		}, want{"sms", "sms-1", DefaultMaxRetry, 24 * time.Hour}},
		{"webhook", func() (*asynq.TaskInfo, error) {
			p := validWebhook()
			p.IdempotencyKey = "evt_1"
			return EnqueueWebhookDeliver(ctx, client, p)
		}, want{"webhook", "evt_1", DefaultMaxRetry, 24 * time.Hour}},
		{"http", func() (*asynq.TaskInfo, error) {
			p := validHTTP()
			p.IdempotencyKey = "call:1"
			return EnqueueHTTPCall(ctx, client, p)
		}, want{"http", "call:1", DefaultMaxRetry, 24 * time.Hour}},
		{"caller options override", func() (*asynq.TaskInfo, error) {
			p := validWhatsApp()
			p.IdempotencyKey = "wa-2"
			return EnqueueWhatsAppSend(ctx, client, p, asynq.Queue("bulk"), asynq.MaxRetry(3), asynq.Retention(time.Hour), asynq.TaskID("custom"))
		}, want{"bulk", "custom", 3, time.Hour}},
		// MaxRetry(0) would let asynq archive the task at its first block by
		// Sluice's own limits: it is raised to one failed attempt.
		{"MaxRetry(0) is raised to 1", func() (*asynq.TaskInfo, error) {
			p := validSMS()
			p.IdempotencyKey = "sms-0"
			return EnqueueSMSSend(ctx, client, p, asynq.MaxRetry(0))
		}, want{"sms", "sms-0", MinMaxRetry, 24 * time.Hour}},
	}
	for _, tc := range tests {
		info, err := tc.enqueue()
		require.NoError(t, err, tc.name)
		got, err := insp.GetTaskInfo(info.Queue, info.ID)
		require.NoError(t, err, tc.name)
		if diff := cmp.Diff(tc.want, want{got.Queue, got.ID, got.MaxRetry, got.Retention}); diff != "" {
			t.Errorf("%s: task options (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestNoIdempotencyKeyGetsRandomID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, client, _ := newAsynq(t)
	a, err := EnqueueSMSSend(ctx, client, validSMS())
	require.NoError(t, err)
	b, err := EnqueueSMSSend(ctx, client, validSMS())
	require.NoError(t, err, "payloads without a key are never deduplicated")
	require.NotEqual(t, a.ID, b.ID)
}

func TestEnqueueDuplicate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, client, _ := newAsynq(t)
	p := validWhatsApp()
	p.IdempotencyKey = "order-100123-shipped"
	_, err := EnqueueWhatsAppSend(ctx, client, p)
	require.NoError(t, err)

	_, err = EnqueueWhatsAppSend(ctx, client, p)
	require.ErrorIs(t, err, ErrDuplicate)
	require.ErrorIs(t, err, asynq.ErrTaskIDConflict)
	require.ErrorContains(t, err, `whatsapp:send (idempotency_key "order-100123-shipped")`)

	// Same key on another channel: a different queue, so not a duplicate.
	s := validSMS()
	s.IdempotencyKey = p.IdempotencyKey
	_, err = EnqueueSMSSend(ctx, client, s)
	require.NoError(t, err)
}

func TestEnqueueRedisError(t *testing.T) {
	t.Parallel()
	rc, client, _ := newAsynq(t)
	require.NoError(t, rc.Close())
	_, err := EnqueueHTTPCall(context.Background(), client, validHTTP())
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrDuplicate)
	require.ErrorContains(t, err, "enqueue http:call:")
}

// TestCompletedTaskKeepsKey runs a real asynq server: once a task has been
// processed, its retained ID still rejects a second enqueue.
func TestCompletedTaskKeepsKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rc, client, insp := newAsynq(t)

	done := make(chan string, 1)
	srv := asynq.NewServerFromRedisClient(rc, asynq.Config{
		Queues:      map[string]int{"whatsapp": 1},
		Concurrency: 1,
		LogLevel:    asynq.FatalLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(TypeWhatsAppSend, func(_ context.Context, t *asynq.Task) error {
		p, err := DecodeWhatsAppSend(t.Payload())
		if err != nil {
			return err
		}
		done <- p.IdempotencyKey
		return nil
	})
	require.NoError(t, srv.Start(mux))
	defer srv.Shutdown()

	p := validWhatsApp()
	p.IdempotencyKey = "order-1"
	_, err := EnqueueWhatsAppSend(ctx, client, p)
	require.NoError(t, err)
	select {
	case key := <-done:
		require.Equal(t, "order-1", key)
	case <-time.After(10 * time.Second):
		t.Fatal("task was not processed within 10s")
	}
	// The handler has returned; wait for asynq to mark the task completed.
	require.Eventually(t, func() bool {
		info, err := insp.GetTaskInfo("whatsapp", "order-1")
		return err == nil && info.State == asynq.TaskStateCompleted
	}, 10*time.Second, 10*time.Millisecond)

	_, err = EnqueueWhatsAppSend(ctx, client, p)
	require.True(t, errors.Is(err, ErrDuplicate), "second enqueue after completion: got %v, want ErrDuplicate", err)
}

func TestNoSuchTask(t *testing.T) {
	t.Parallel()
	for _, err := range []error{asynq.ErrTaskNotFound, asynq.ErrQueueNotFound, fmt.Errorf("inspect: %w", asynq.ErrTaskNotFound)} {
		if !NoSuchTask(err) {
			t.Errorf("NoSuchTask(%v) = false, want true", err)
		}
	}
	for _, err := range []error{nil, errors.New("i/o timeout"), asynq.ErrTaskIDConflict} {
		if NoSuchTask(err) {
			t.Errorf("NoSuchTask(%v) = true, want false", err)
		}
	}
}
