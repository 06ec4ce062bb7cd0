package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testutil"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/throttle"
)

// recorder is a DeliveryRecorder that hands every call to the test (the
// first 10 not taken; the worker calls a failing RecordSent again).
type recorder struct {
	sent   chan Sent
	failed chan Failed
	err    error // returned by every call
}

func newRecorder(err error) *recorder {
	return &recorder{sent: make(chan Sent, 10), failed: make(chan Failed, 10), err: err}
}

func (r *recorder) RecordSent(_ context.Context, s Sent) error {
	select {
	case r.sent <- s:
	default:
	}
	return r.err
}

func (r *recorder) RecordFailed(_ context.Context, f Failed) error {
	select {
	case r.failed <- f:
	default:
	}
	return r.err
}

func recv[T any](t *testing.T, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("no record within 10s")
		panic("unreachable")
	}
}

// deliveryWorker runs a worker with one channel, "sms", whose Send answers
// by the payload's id: "ok" is accepted as SM1, "cut" accepted without an
// id, "bad" refused permanently (Twilio 21211).
func deliveryWorker(t *testing.T, rec DeliveryRecorder) (*asynq.Client, *asynq.Inspector) {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	lim := throttle.NewRedis(rdb, throttle.Options{Prefix: "wd"})
	ch := Channel{Name: "sms", TaskType: "test:send",
		Prepare: func(b []byte) (Prepared, error) {
			var p testPayload
			if err := json.Unmarshal(b, &p); err != nil || p.ID == "" {
				return Prepared{}, errors.New("id: missing")
			}
			return Prepared{Fields: map[string]string{"id": p.ID}, Tenant: "acme", Campaign: "spring-sale", Send: func(context.Context) (channels.Response, error) {
				switch p.ID {
				case "ok":
					return channels.Response{ProviderID: "SM1", Status: 201}, nil
				case "cut":
					return channels.Response{Status: 201, Incomplete: true}, nil
				}
				return channels.Response{}, &channels.Error{Class: channels.Permanent, Provider: "twilio", HTTPStatus: 400, Code: 21211, Message: "Invalid 'To' Phone Number"}
			}}, nil
		}}
	w, err := New(Options{Redis: rdb, Limiter: lim, Channels: []Channel{ch}, Concurrency: 2, Delivery: rec,
		Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Shutdown)
	return asynq.NewClientFromRedisClient(rdb), asynq.NewInspectorFromRedisClient(rdb)
}

func enqueueTest(t *testing.T, c *asynq.Client, id, payload string) {
	t.Helper()
	_, err := c.Enqueue(asynq.NewTask("test:send", []byte(payload)), asynq.Queue("sms"), asynq.TaskID(id), asynq.MaxRetry(3), asynq.Retention(time.Hour))
	require.NoError(t, err)
}

func TestDeliveryRecorderGetsSendsAndArchives(t *testing.T) {
	t.Parallel()
	rec := newRecorder(nil)
	c, _ := deliveryWorker(t, rec)
	start := time.Now()

	enqueueTest(t, c, "t-ok", `{"id":"ok"}`)
	s := recv(t, rec.sent)
	require.WithinRange(t, s.At, start, time.Now())
	s.At = time.Time{}
	require.Equal(t, Sent{TaskID: "t-ok", Queue: "sms", Channel: "sms", Tenant: "acme", Campaign: "spring-sale", ProviderID: "SM1", Status: OutcomeSent}, s)

	enqueueTest(t, c, "t-cut", `{"id":"cut"}`)
	s = recv(t, rec.sent)
	require.Equal(t, OutcomeUnconfirmed, s.Status)
	require.Empty(t, s.ProviderID)

	enqueueTest(t, c, "t-bad", `{"id":"bad"}`)
	f := recv(t, rec.failed)
	require.Equal(t, "t-bad", f.TaskID)
	require.Equal(t, "acme", f.Tenant)
	require.Equal(t, "spring-sale", f.Campaign)
	require.Equal(t, 21211, f.Code)
	require.Equal(t, "twilio: permanent: code 21211 (invalid To number): Invalid 'To' Phone Number", f.Reason)

	enqueueTest(t, c, "t-malformed", `{}`)
	f = recv(t, rec.failed)
	require.Equal(t, "t-malformed", f.TaskID)
	require.Empty(t, f.Tenant, "the payload could not be decoded")
	require.Contains(t, f.Reason, "malformed payload")
	require.Zero(t, f.Code)
}

func TestDeliveryRecorderErrorNeverFailsTheTask(t *testing.T) {
	t.Parallel()
	rec := newRecorder(errors.New("redis down"))
	c, insp := deliveryWorker(t, rec)
	enqueueTest(t, c, "t-ok", `{"id":"ok"}`)
	recv(t, rec.sent)
	// The state change has no signal: poll the inspector.
	info := testutil.Task(t, insp, "sms", "t-ok", 10*time.Second, testutil.In(asynq.TaskStateCompleted))
	require.Zero(t, info.Retried)
}

func TestArchiveReasonIsBounded(t *testing.T) {
	t.Parallel()
	long := permanent(fmt.Errorf("x: %s", string(make([]byte, 2000))))
	require.LessOrEqual(t, len(archiveReason(long)), maxReason)
	require.Equal(t, "boom", archiveReason(permanent(errors.New("boom"))))
}

func TestFeedbackPausesTheScopeAndLowersTheRate(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	lim := throttle.NewRedis(rdb, throttle.Options{Prefix: "wf"})
	reg := prometheus.NewRegistry()
	sender := rules.Rule{Key: "sms:sender:{sender}", Limit: throttle.Limit{Name: "sender", Algorithm: throttle.GCRA, Rate: throttle.Rate{Limit: 10, Period: time.Second}, Burst: 1}}
	ch := SMSChannel(&channels.Twilio{AccountSID: "AC0123456789abcdef0123456789abcdef", AuthToken: "tok3n"}, []rules.Rule{sender})
	w, err := New(Options{Redis: rdb, Limiter: lim, Channels: []Channel{ch}, Metrics: NewMetrics(reg), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ctx := context.Background()

	ce, ok := channels.CodeError(channels.ProviderTwilio, 30022, "carrier throughput", time.Now())
	require.True(t, ok)
	fields := map[string]string{"from": "+12025550100", "sender": "+12025550100", "to": "+12025550123", "account_sid": "AC0123456789abcdef0123456789abcdef"}
	key, err := w.Feedback(ctx, "sms", fields, ce, time.Time{})
	require.NoError(t, err)
	require.Equal(t, "sms:paused:sender:+12025550100", key)

	p, err := lim.PauseOf(ctx, key)
	require.NoError(t, err)
	require.NotNil(t, p, "the sender is paused in Redis, for every worker")
	require.Equal(t, 30022, p.Code)
	require.Equal(t, 1, p.InARow)

	ad := lim.CachedAdaptations(ctx)
	require.Len(t, ad, 1, "the sender's rate is lowered")
	require.Equal(t, "sms:sender:+12025550100", ad[0].Key)
	require.Less(t, ad[0].Effective(ad[0].Configured), 10.0)
	require.Equal(t, 1.0, providerThrottles(t, reg, "30022", "sender"))
	require.Zero(t, tasksTotal(t, reg, "sms", OutcomeProviderThrottle), "no task attempt is counted: the message has gone")

	// A scope whose fields are missing pauses nothing.
	key, err = w.Feedback(ctx, "sms", map[string]string{"to": "+12025550123"}, ce, time.Time{})
	require.NoError(t, err)
	require.Empty(t, key)

	_, err = w.Feedback(ctx, "fax", fields, ce, time.Time{})
	require.ErrorContains(t, err, `unknown channel "fax"`)
	_, err = w.Feedback(ctx, "sms", fields, &channels.Error{Class: channels.Permanent, Code: 21211}, time.Time{})
	require.ErrorContains(t, err, "want a throttle")
	_, err = w.Feedback(ctx, "sms", fields, nil, time.Time{})
	require.Error(t, err)
}

// providerThrottles reads sluice_provider_throttles_total{channel="sms",code,scope}.
func providerThrottles(t *testing.T, reg *prometheus.Registry, code, scope string) float64 {
	return counterValue(t, reg, "sluice_provider_throttles_total", map[string]string{"channel": "sms", "code": code, "scope": scope})
}
