package dashboard

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/tasks"
)

// queuesServer mounts NewQueues(o) at /queues/ over a fresh redis-server
// holding one pending whatsapp:send task.
func queuesServer(t *testing.T, o QueuesOptions) *httptest.Server {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	task, err := tasks.NewWhatsAppSendTask(tasks.WhatsAppSend{PhoneNumberID: "106540352242922", To: "+12025550123", Text: "hi"})
	require.NoError(t, err)
	_, err = asynq.NewClientFromRedisClient(rdb).Enqueue(task)
	require.NoError(t, err)
	o.Redis = rdb
	h, err := NewQueues(o)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/queues/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestQueuesServesAsynqmonOnSluicesRedis(t *testing.T) {
	t.Parallel()
	srv := queuesServer(t, QueuesOptions{})
	res, body := get(t, srv.URL+"/queues/")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `window.FLAG_ROOT_PATH="\/queues"`, "asynqmon's page, rooted at /queues")
	// The page may load nothing from elsewhere (asynqmon's Google Fonts
	// stylesheet) and no frame may embed it.
	csp := res.Header.Get("Content-Security-Policy")
	require.Contains(t, csp, "default-src 'self'")
	require.Contains(t, csp, "frame-ancestors 'none'")
	require.Contains(t, body, "fonts.googleapis.com", "asynqmon's build still asks for Google Fonts: the CSP is what stops it")

	res, body = get(t, srv.URL+"/queues/api/queues")
	require.Equal(t, http.StatusOK, res.StatusCode)
	var qs struct {
		Queues []struct {
			Queue   string `json:"queue"`
			Pending int    `json:"pending"`
		} `json:"queues"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &qs), body)
	require.Len(t, qs.Queues, 1)
	require.Equal(t, "whatsapp", qs.Queues[0].Queue)
	require.Equal(t, 1, qs.Queues[0].Pending)

	// Actions work unless read-only.
	req, _ := http.NewRequest("POST", srv.URL+"/queues/api/queues/whatsapp:pause", nil)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = res.Body.Close()
	require.Equal(t, http.StatusNoContent, res.StatusCode)

	res, _ = get(t, srv.URL+"/queues/api/metrics")
	require.Equal(t, http.StatusNotFound, res.StatusCode, "no Prometheus configured")
}

func TestQueuesReadOnlyRefusesActions(t *testing.T) {
	t.Parallel()
	srv := queuesServer(t, QueuesOptions{ReadOnly: true})
	for _, tc := range []struct{ method, path string }{
		{"POST", "/queues/api/queues/whatsapp:pause"},
		{"DELETE", "/queues/api/queues/whatsapp"},
		{"DELETE", "/queues/api/queues/whatsapp/pending_tasks:delete_all"},
		{"POST", "/queues/api/queues/whatsapp/scheduled_tasks:run_all"},
		{"PUT", "/queues/"},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = res.Body.Close()
		require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode, "%s %s", tc.method, tc.path)
	}
	res, body := get(t, srv.URL+"/queues/api/queues/whatsapp")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `"paused":false`, "the refused pause did nothing")
	_, body = get(t, srv.URL+"/queues/")
	require.Contains(t, body, `window.FLAG_READ_ONLY="true"`, "the UI hides its buttons")
}

func TestNewQueuesNamesTheBadOption(t *testing.T) {
	t.Parallel()
	_, err := NewQueues(QueuesOptions{})
	require.ErrorContains(t, err, "Redis is required")
	rdb := redistest.Start(t).Client(t)
	_, err = NewQueues(QueuesOptions{Redis: rdb, RootPath: "queues"})
	require.ErrorContains(t, err, "RootPath")
	_, err = NewQueues(QueuesOptions{Redis: rdb, PrometheusAddress: "file:///etc/passwd"})
	require.ErrorContains(t, err, "PrometheusAddress: want an http:// or https:// URL")
	require.False(t, strings.Contains(err.Error(), "\n"))
}

func TestQueuesRedactHTTPCallHeaders(t *testing.T) {
	got := formatPayload("http:call", []byte(`{"v":1,"method":"POST","url":"https://api.example.com/x?sig=s3cr3t","headers":{"Authorization":"Bearer sk_live_abc123","X-Api-Key":"k-999"},"body":"client_secret=cs-42"}`))
	for _, secret := range []string{"sk_live_abc123", "k-999", "s3cr3t", "cs-42"} {
		if strings.Contains(got, secret) {
			t.Fatalf("payload shown with its credential %q: %s", secret, got)
		}
	}
	for _, kept := range []string{`"Authorization":"[redacted]"`, `"url":"https://api.example.com"`, `"method":"POST"`} {
		if !strings.Contains(got, kept) {
			t.Fatalf("payload shown as %s, want it to keep %s", got, kept)
		}
	}
	if got := formatPayload("http:call", []byte(`{"headers":"Authorization: Bearer sk_live_abc123"}`)); strings.Contains(got, "sk_live") {
		t.Fatalf("malformed headers shown: %s", got)
	}
	if got := formatPayload("webhook:deliver", []byte(`{"v":1,"url":"https://hooks.slack.com/services/T0/B0/xoxtoken","event_type":"order.shipped","payload":{"id":1}}`)); strings.Contains(got, "xoxtoken") || !strings.Contains(got, `"payload":{"id":1}`) {
		t.Fatalf("webhook payload shown as %s", got)
	}
	if got := formatPayload("sms:send", []byte(`{"v":1,"to":"+12025550123","body":"hi"}`)); !strings.Contains(got, `"body":"hi"`) {
		t.Fatalf("sms payload shown as %s", got)
	}
}

// A plain asynq client can spell the members in any case, and
// encoding/json would decode them all the same: the dashboard redacts
// "URL", "HEADERS" and "Body" as it does "url", "headers" and "body"
// (issue 20: the scheduled http task showed its bearer token).
func TestQueuesRedactNamesInAnyCase(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	client := asynq.NewClientFromRedisClient(rdb)
	payload := `{"V":1,"METHOD":"POST","URL":"https://api.example.com/x?sig=s3cr3t","HEADERS":{"Authorization":"Bearer sk_live_abc123"},"Body":"client_secret=cs-42"}`
	_, err := client.Enqueue(asynq.NewTask("http:call", []byte(payload)), asynq.Queue("http"), asynq.ProcessIn(time.Hour))
	require.NoError(t, err)
	h, err := NewQueues(QueuesOptions{Redis: rdb})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/queues/api/queues/http/scheduled_tasks", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	got := rec.Body.String()
	require.Contains(t, got, "api.example.com", "the task is listed")
	for _, secret := range []string{"sk_live_abc123", "s3cr3t", "cs-42"} {
		require.NotContains(t, got, secret, "the scheduled task is shown with its credential")
	}
}
