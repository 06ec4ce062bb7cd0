package worker

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testutil"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
)

// A producer that bypasses the constructors (a plain asynq client) gets
// the rules the constructors and the API apply, and its tasks run only
// from their channel's queue: each of these is archived at once with the
// reason, and nothing reaches a provider, while a valid send in its queue
// goes (issue 20).
func TestRawTasksAreCheckedAsEnqueuedOnes(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	prov := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"sid":"SM0123456789abcdef0123456789abcdef","status":"queued","num_segments":"1","messages":[{"id":"wamid.1"}]}`))
	}))
	t.Cleanup(prov.Close)
	rdb := redistest.Start(t).Client(t)
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	loopback := channels.Egress{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	w, err := New(Options{Redis: rdb, Limiter: throttle.NewRedis(rdb, throttle.Options{Prefix: "wr"}), Metrics: metrics,
		Channels: []Channel{
			WhatsAppChannel(&channels.WhatsApp{BaseURL: prov.URL, Token: "t0ken", HTTP: prov.Client()}, nil),
			SMSChannel(&channels.Twilio{BaseURL: prov.URL, AccountSID: "AC0123456789abcdef0123456789abcdef", AuthToken: "t0ken", HTTP: prov.Client()}, nil),
			HTTPChannel(&channels.HTTPCaller{HTTP: prov.Client(), Egress: loopback}, nil),
		},
		Concurrency: 2, ShutdownTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Shutdown)

	wa, err := tasks.NewWhatsAppSendTask(tasks.WhatsAppSend{PhoneNumberID: "106540352242922", To: "+12025550123", Text: "hi"})
	require.NoError(t, err)
	client := asynq.NewClientFromRedisClient(rdb)
	for _, c := range []struct {
		id, queue, typ, payload string
	}{
		{"wa-in-sms", "sms", tasks.TypeWhatsAppSend, string(wa.Payload())},
		{"nul", "sms", tasks.TypeSMSSend, `{"v":1,"from":"+12025550100","to":"+12025550123","body":"hi\u0000there"}`},
		{"upper", "http", tasks.TypeHTTPCall, `{"v":1,"METHOD":"POST","URL":"` + prov.URL + `/x","HEADERS":{"Authorization":"Bearer s3cr3t"}}`},
		{"ok", "sms", tasks.TypeSMSSend, `{"v":1,"from":"+12025550100","to":"+12025550123","body":"hi"}`},
	} {
		_, err := client.Enqueue(asynq.NewTask(c.typ, []byte(c.payload)), asynq.Queue(c.queue), asynq.TaskID(c.id), asynq.MaxRetry(5), asynq.Retention(time.Hour))
		require.NoError(t, err, c.id)
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	done := func(queue, id string) *asynq.TaskInfo {
		t.Helper()
		return testutil.Task(t, insp, queue, id, time.Minute, testutil.Handled) // a hang's bound, not a measure
	}
	for _, c := range []struct{ queue, id, reason string }{
		{"sms", "wa-in-sms", `whatsapp:send task in queue "sms": whatsapp:send tasks run only from the whatsapp channel's queue "whatsapp"; not sent`},
		{"sms", "nul", "body: contains a NUL byte at byte 2"},
		{"http", "upper", `json: field "METHOD": want "method" (field names are case-sensitive)`},
	} {
		info := done(c.queue, c.id)
		require.Equal(t, asynq.TaskStateArchived, info.State, "%s: last error %s", c.id, info.LastErr)
		require.Contains(t, info.LastErr, c.reason, c.id)
		require.Zero(t, info.Retried, "%s: archived at once", c.id)
	}
	info := done("sms", "ok")
	require.Equal(t, asynq.TaskStateCompleted, info.State, "last error: %s", info.LastErr)
	require.EqualValues(t, 1, calls.Load(), "only the valid send reached a provider")
	require.Equal(t, 1.0, tasksTotal(t, reg, "whatsapp", OutcomeWrongQueue))
}

// A queue no channel of the worker owns is the caller's to route
// (asynq.Queue at enqueue, Options.Queues or Worker.Mux in its own server):
// a valid send there goes, as before issue 20's wrong-queue check.
func TestTaskInAQueueNoChannelOwnsIsSent(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	prov := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"sid":"SM0123456789abcdef0123456789abcdef","status":"queued","num_segments":"1"}`))
	}))
	t.Cleanup(prov.Close)
	rdb := redistest.Start(t).Client(t)
	w, err := New(Options{Redis: rdb, Limiter: throttle.NewRedis(rdb, throttle.Options{Prefix: "wq"}), Metrics: NewMetrics(prometheus.NewRegistry()),
		Channels: []Channel{
			SMSChannel(&channels.Twilio{BaseURL: prov.URL, AccountSID: "AC0123456789abcdef0123456789abcdef", AuthToken: "t0ken", HTTP: prov.Client()}, nil),
		},
		Queues:      map[string]int{"sms": 1, "sms-bulk": 1},
		Concurrency: 2, ShutdownTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Shutdown)
	client := asynq.NewClientFromRedisClient(rdb)
	_, err = client.Enqueue(asynq.NewTask(tasks.TypeSMSSend, []byte(`{"v":1,"from":"+12025550100","to":"+12025550123","body":"hi"}`)),
		asynq.Queue("sms-bulk"), asynq.TaskID("bulk"), asynq.Retention(time.Hour))
	require.NoError(t, err)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	deadline := time.Now().Add(time.Minute) // a hang's bound, not a measure
	for {
		info, err := insp.GetTaskInfo("sms-bulk", "bulk")
		if err == nil && info.State == asynq.TaskStateCompleted {
			break
		}
		require.True(t, err == nil && info.State != asynq.TaskStateArchived, "task: %+v %v", info, err)
		require.True(t, time.Now().Before(deadline), "task not done: %+v", info)
		time.Sleep(20 * time.Millisecond)
	}
	require.EqualValues(t, 1, calls.Load())
}
