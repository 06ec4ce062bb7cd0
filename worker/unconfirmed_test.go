package worker

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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

// syncBuffer is a bytes.Buffer safe for the worker's concurrent logging.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAcceptedWithoutIDIsSentOnce: a provider that answers 2xx without a
// message id (WhatsApp messages[0].id, Twilio sid), or whose 2xx body
// breaks off, has taken the message: the task completes after one request,
// is never retried (a retry would send twice), and is counted and logged
// as sent_unconfirmed.
func TestAcceptedWithoutIDIsSentOnce(t *testing.T) {
	t.Parallel()
	const account = "AC0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name    string
		channel string
		reply   func(w http.ResponseWriter)
	}{
		{"whatsapp 200 without messages", "whatsapp", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"messaging_product":"whatsapp","contacts":[{"input":"+12025550123","wa_id":"12025550123"}]}`))
		}},
		{"whatsapp 200 empty id", "whatsapp", func(w http.ResponseWriter) {
			_, _ = w.Write([]byte(`{"messages":[{"id":""}]}`))
		}},
		{"twilio 201 without sid", "sms", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"status":"queued","num_segments":"1"}`))
		}},
		{"twilio 201 not json", "sms", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`<html>Created</html>`))
		}},
		{"twilio 201 body cut off", "sms", func(w http.ResponseWriter) {
			// Promise more than is sent, then end the connection: the
			// status line arrived, the body did not.
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"sid":"SM01`))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			prov := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				calls.Add(1)
				tc.reply(w)
			}))
			t.Cleanup(prov.Close)

			srv := redistest.Start(t)
			rdb := srv.Client(t)
			var ch Channel
			var task *asynq.Task
			var err error
			if tc.channel == "whatsapp" {
				ch = WhatsAppChannel(&channels.WhatsApp{BaseURL: prov.URL, Token: "t0ken", HTTP: prov.Client()}, nil)
				task, err = tasks.NewWhatsAppSendTask(tasks.WhatsAppSend{PhoneNumberID: "106540352242922", To: "+12025550123", Text: "hi", IdempotencyKey: "k1"})
			} else {
				ch = SMSChannel(&channels.Twilio{BaseURL: prov.URL, AccountSID: account, AuthToken: "t0ken", HTTP: prov.Client()}, nil)
				task, err = tasks.NewSMSSendTask(tasks.SMSSend{From: "+12025550100", To: "+12025550123", Body: "hi", IdempotencyKey: "k1"})
			}
			require.NoError(t, err)
			reg := prometheus.NewRegistry()
			metrics := NewMetrics(reg)
			var logs syncBuffer
			w, err := New(Options{Redis: rdb, Limiter: throttle.NewRedis(rdb, throttle.Options{Prefix: "wu"}), Channels: []Channel{ch},
				Concurrency: 2, Metrics: metrics, ShutdownTimeout: time.Second,
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			require.NoError(t, err)
			require.NoError(t, w.Start())
			t.Cleanup(w.Shutdown)

			_, err = asynq.NewClientFromRedisClient(rdb).EnqueueContext(context.Background(), task, asynq.Retention(time.Hour))
			require.NoError(t, err)
			insp := asynq.NewInspectorFromRedisClient(rdb)
			info := testutil.Task(t, insp, tc.channel, "k1", 10*time.Second, testutil.Handled)
			require.Equal(t, asynq.TaskStateCompleted, info.State, "last error: %s", info.LastErr)
			require.Equal(t, 0, info.Retried)
			require.Equal(t, int32(1), calls.Load(), "one provider request: never sent twice")
			require.Equal(t, 1.0, tasksTotal(t, reg, tc.channel, OutcomeUnconfirmed))
			require.Equal(t, 0.0, tasksTotal(t, reg, tc.channel, OutcomeSent))
			require.True(t, strings.Contains(logs.String(), "level=WARN msg=\"sent, unconfirmed") && strings.Contains(logs.String(), "task_id=k1"),
				"a warning names the task:\n%s", logs.String())
		})
	}
}

// tasksTotal reads sluice_tasks_total{channel, outcome} from reg.
func tasksTotal(t *testing.T, reg *prometheus.Registry, channel, outcome string) float64 {
	return counterValue(t, reg, "sluice_tasks_total", map[string]string{"channel": channel, "outcome": outcome})
}

// counterValue reads the counter name{labels} from reg (labels: a subset
// of the series' labels), 0 when there is none.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
