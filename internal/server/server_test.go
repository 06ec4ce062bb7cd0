package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/callbacks"
	"github.com/sluice-dev/sluice/internal/redistest"
)

const (
	operatorKey = "operator-0123456789abcdef01234567"
	tenantKey   = "acme-0123456789abcdef0123456789ab"
)

// serve starts Handler over a private redis-server with keysEnv as
// SLUICE_API_KEYS ("" for none).
func serve(t *testing.T, keysEnv string) *httptest.Server {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	cfg := config.Default()
	keys, err := api.ParseKeys(keysEnv)
	if err != nil {
		t.Fatal(err)
	}
	lim := app.NewLimiter(cfg, rdb, nil)
	h, err := Handler(Options{Config: cfg, Redis: rdb, Limiter: lim, Gatherer: app.NewRegistry(rdb), Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

type call struct {
	method, path string
	user, pass   string // Basic, when pass is set
	bearer       string
	want         int
	body         string // a substring of the response body
}

func (c call) run(t *testing.T, base string) {
	t.Helper()
	req, err := http.NewRequest(c.method, base+c.path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.pass != "" {
		req.SetBasicAuth(c.user, c.pass)
	}
	if c.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.bearer)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != c.want || !strings.Contains(string(b), c.body) {
		t.Errorf("%s %s (basic %q, bearer %v): %d %.200q; want %d with %q", c.method, c.path, c.user, c.bearer != "", resp.StatusCode, b, c.want, c.body)
	}
	for _, secret := range []string{operatorKey, tenantKey} {
		if strings.Contains(string(b), secret) {
			t.Errorf("%s %s: the response shows an API key", c.method, c.path)
		}
	}
}

func TestDashboardsNeedAnOperatorKey(t *testing.T) {
	srv := serve(t, operatorKey+","+tenantKey+":acme")
	for _, c := range []call{
		{method: "GET", path: "/", want: 200, body: "any user name, the key as password"},
		{method: "GET", path: "/healthz", want: 200, body: "ok"},
		{method: "GET", path: "/v1/openapi.json", want: 200, body: `"openapi": "3.1`},
		{method: "GET", path: "/limits/", want: 401},
		{method: "GET", path: "/queues/", want: 401},
		{method: "GET", path: "/limits/", user: "ops", pass: "wrong-key-0123456789abcdef", want: 401},
		{method: "GET", path: "/limits/", user: "ops", pass: operatorKey, want: 200, body: "<html"},
		{method: "GET", path: "/limits/data.json", bearer: operatorKey, want: 200},
		{method: "GET", path: "/queues/", user: "anyone", pass: operatorKey, want: 200},
		{method: "GET", path: "/limits/", user: "acme", pass: tenantKey, want: 403, body: "every tenant's data"},
		{method: "GET", path: "/queues/", bearer: tenantKey, want: 403},
		{method: "GET", path: "/v1/tasks/nope", bearer: tenantKey, want: 404},
		{method: "GET", path: "/v1/tasks/nope", want: 401},
		{method: "POST", path: "/callbacks/twilio", want: 404},
		{method: "GET", path: "/limits", want: 301},
	} {
		c.run(t, srv.URL)
	}
}

func TestWithoutKeysTheQueueDashboardIsReadOnly(t *testing.T) {
	srv := serve(t, "")
	for _, c := range []call{
		{method: "GET", path: "/", want: 200, body: "read-only"},
		{method: "GET", path: "/limits/", want: 200},
		{method: "GET", path: "/queues/", want: 200},
		{method: "DELETE", path: "/queues/api/queues/sms", want: 405},
		{method: "POST", path: "/queues/api/queues/sms:pause", want: 405},
	} {
		c.run(t, srv.URL)
	}
}

func TestTwilioIsAskedToPostWhereTheCallbacksAreServed(t *testing.T) {
	if app.TwilioCallbackPath != callbacks.TwilioPath {
		t.Fatalf("sends ask Twilio to post to %s, the handler serves %s", app.TwilioCallbackPath, callbacks.TwilioPath)
	}
}

func TestWithoutKeysOnlyLoopbackHostsAreAnswered(t *testing.T) {
	srv := serve(t, "")
	for _, c := range []struct {
		host string
		want int
	}{
		{"localhost:9090", 200}, {"127.0.0.1:9090", 200}, {"[::1]:9090", 200}, {"LOCALHOST", 200},
		{"rebind.attacker.example:9090", 421}, {"192.0.2.1", 421}, {"127.0.0.1.nip.example", 421},
	} {
		req, err := http.NewRequest("GET", srv.URL+"/limits/data.json", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = c.host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("Host %q: %d, want %d", c.host, resp.StatusCode, c.want)
		}
	}
	// On the API the refusal is a problem, as every other API error.
	req, err := http.NewRequest("GET", srv.URL+"/v1/tasks/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "rebind.attacker.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("API from another host: %d %s, want 421 application/problem+json", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

func TestCrossSiteActionsAreRefused(t *testing.T) {
	srv := serve(t, operatorKey)
	// A form another site posts, with the operator's cached Basic login.
	req, err := http.NewRequest("POST", srv.URL+"/queues/api/queues/sms:pause", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("ops", operatorKey)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-site POST to the queue dashboard: %d, want 403", resp.StatusCode)
	}
	// A cross-site POST to the API is refused with a problem.
	req, err = http.NewRequest("POST", srv.URL+"/v1/calls", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+operatorKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("cross-site POST to the API: %d %s, want 403 application/problem+json", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

func TestAPICountsEachCampaignsNewTasksOnce(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	cfg := config.Default()
	type count struct {
		tenant, campaign string
		n                int
	}
	var mu sync.Mutex
	var got []count
	h, err := Handler(Options{Config: cfg, Redis: rdb, Limiter: app.NewLimiter(cfg, rdb, nil), Gatherer: app.NewRegistry(rdb),
		Counted: func(_ context.Context, tenant, campaign string, n int) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, count{tenant, campaign, n})
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	body := `{"items":[
		{"channel":"sms","from":"+12025550100","to":"+12025550123","body":"a","campaign":"q4","idempotency_key":"q4-1"},
		{"channel":"sms","from":"+12025550100","to":"+12025550124","body":"b","campaign":"q4","idempotency_key":"q4-2"},
		{"channel":"sms","from":"+12025550100","to":"+1555","body":"bad","campaign":"q4"}]}`
	for range 2 { // the repeat enqueues, and counts, nothing
		resp, err := http.Post(srv.URL+"/v1/messages/batch", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("batch: %d", resp.StatusCode)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != (count{"", "q4", 2}) {
		t.Fatalf("counted %+v, want one count of 2 for campaign q4", got)
	}
}
