package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/throttle"
)

// benchServer is the API over a private redis-server with a per-key limit
// high enough never to refuse.
func benchServer(b *testing.B) *httptest.Server {
	rdb := redistest.Start(b).Client(b)
	cfg := config.Default()
	cfg.HTTP.APIRate = throttle.PerSecond(1_000_000)
	cfg.HTTP.APIBurst = 1_000_000
	keys, err := api.ParseKeys(adminKey)
	require.NoError(b, err)
	h, err := api.New(api.Options{Config: cfg, Redis: rdb, Keys: keys, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(b, err)
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	return srv
}

func post(b *testing.B, srv *httptest.Server, path string, body []byte, want int) {
	req, err := http.NewRequest("POST", srv.URL+path, bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+adminKey)
	resp, err := srv.Client().Do(req)
	if err != nil {
		b.Fatal(err)
	}
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		b.Fatalf("status %d: %s", resp.StatusCode, rb)
	}
}

// BenchmarkEnqueueSingle is one POST /v1/calls per op: HTTP round trip,
// authentication, the per-key limit, validation, planning and the asynq
// enqueue, against a real redis-server. Each call goes to its own host, so
// no plan waits behind another.
func BenchmarkEnqueueSingle(b *testing.B) {
	srv := benchServer(b)
	bodies := make([][]byte, 1024)
	for i := range bodies {
		bodies[i], _ = json.Marshal(with(call(), "url", fmt.Sprintf("https://api%d.example.com/v2/orders", i)))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		post(b, srv, "/v1/calls", bodies[i%len(bodies)], http.StatusAccepted)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "requests/s")
}

// BenchmarkEnqueueBatch1000 is one POST /v1/messages/batch of 1,000
// WhatsApp messages per op (1,000 recipients of one business number, so
// every send is planned on the 80/s throughput limit).
func BenchmarkEnqueueBatch1000(b *testing.B) {
	srv := benchServer(b)
	items := make([]any, api.MaxBatchItems)
	for i := range items {
		items[i] = with(whatsApp(), "to", fmt.Sprintf("+1202555%04d", i))
	}
	body, err := json.Marshal(map[string]any{"items": items})
	require.NoError(b, err)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		post(b, srv, "/v1/messages/batch", body, http.StatusOK)
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/batch")
}

// BenchmarkEnqueueBatch1000Keyed is BenchmarkEnqueueBatch1000 with an
// idempotency key per item (new keys each op): the keys' checks across
// channels (a claim and asynq's records in the other queues) included.
func BenchmarkEnqueueBatch1000Keyed(b *testing.B) {
	srv := benchServer(b)
	b.ReportAllocs()
	for op := 0; b.Loop(); op++ {
		b.StopTimer()
		items := make([]any, api.MaxBatchItems)
		for i := range items {
			items[i] = with(whatsApp(), "to", fmt.Sprintf("+1202555%04d", i), "idempotency_key", fmt.Sprintf("k-%d-%d", op, i))
		}
		body, err := json.Marshal(map[string]any{"items": items})
		require.NoError(b, err)
		b.StartTimer()
		post(b, srv, "/v1/messages/batch", body, http.StatusOK)
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/batch")
}
