package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/campaign"
)

// apiClient enqueues through Sluice's HTTP API, as an application in any
// language would: the demo's own campaign goes this way.
type apiClient struct {
	base string // "http://127.0.0.1:9090"
	key  string // API key; "" when authentication is off
	http *http.Client
}

// apiPath is the batch endpoint of a campaign channel.
func apiPath(channel string) string {
	if channel == "webhook" {
		return "/v1/webhooks/batch"
	}
	return "/v1/messages/batch"
}

// apiItem turns a built task's payload into its API item: the same JSON
// fields without "v", and for /v1/messages the channel.
func apiItem(channel string, payload []byte) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(payload, &m); err != nil {
		return nil, err
	}
	delete(m, "v")
	if channel != "webhook" {
		m["channel"], _ = json.Marshal(channel)
	}
	return json.Marshal(m)
}

// enqueueRows builds each row's task with m and POSTs them in batches of
// api.MaxBatchItems; every item's outcome goes to done with its row. A row
// whose task cannot be built goes to bad. The error is a request's or
// done's.
func (c *apiClient) enqueueRows(ctx context.Context, ms []*campaign.Message, rows []campaign.Row, columns []string,
	bad func(campaign.Row, error) error, done func(campaign.Row, api.BatchResult) error) error {
	m := ms[0] // (all of one channel: row i gets ms[i % len(ms)])
	var items []json.RawMessage
	var batchRows []campaign.Row
	flush := func() error {
		if len(items) == 0 {
			return nil
		}
		res, err := c.batch(ctx, apiPath(m.Channel), items)
		if err != nil {
			return err
		}
		if len(res.Results) != len(items) {
			return fmt.Errorf("%s: %d results for %d items", apiPath(m.Channel), len(res.Results), len(items))
		}
		for k, r := range res.Results {
			if err := done(batchRows[k], r); err != nil {
				return err
			}
		}
		items, batchRows = items[:0], batchRows[:0]
		return nil
	}
	for i, row := range rows {
		t, err := ms[i%len(ms)].Task(row, i, columns)
		if err == nil {
			var it json.RawMessage
			if it, err = apiItem(m.Channel, t.Payload()); err == nil {
				items, batchRows = append(items, it), append(batchRows, row)
			}
		}
		if err != nil {
			if err := bad(row, err); err != nil {
				return err
			}
			continue
		}
		if len(items) == api.MaxBatchItems {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// batch POSTs items to path and decodes the batch response.
func (c *apiClient) batch(ctx context.Context, path string, items []json.RawMessage) (*api.BatchResponse, error) {
	body, err := json.Marshal(map[string]any{"items": items})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("POST %s: %s: %.300s", path, resp.Status, b)
	}
	var out api.BatchResponse
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("POST %s: %w", path, err)
	}
	return &out, nil
}

// newAPIClient is a client of the server at base.
func newAPIClient(base, key string) *apiClient {
	return &apiClient{base: base, key: key, http: &http.Client{Timeout: time.Minute}}
}
