package tasks_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/tasks"
)

func TestBatchRoundTripsAndNamesTheBadSend(t *testing.T) {
	good := tasks.BatchSend{ID: "k1", Type: tasks.TypeSMSSend, Payload: json.RawMessage(`{"v":1}`), MaxRetry: 3, At: 1795774976123}
	b, err := tasks.EncodeBatch([]tasks.BatchSend{good, {ID: "k2", Type: tasks.TypeSMSSend, Payload: json.RawMessage(`{}`)}})
	require.NoError(t, err)
	got, err := tasks.DecodeBatch(b)
	require.NoError(t, err)
	require.Len(t, got.Sends, 2)
	require.Equal(t, good, got.Sends[0])

	for _, c := range []struct {
		name, payload, want string
	}{
		{"not JSON", `{`, "unexpected end of JSON input"},
		{"version", `{"v":2,"sends":[{"id":"a","type":"sms:send","payload":{}}]}`, "v: 2, want 1"},
		{"empty", `{"v":1,"sends":[]}`, "0 sends, want 1 to 100"},
		{"no id", `{"v":1,"sends":[{"id":"a","type":"sms:send","payload":{}},{"type":"sms:send","payload":{}}]}`, "sends[1]: id: required"},
		{"a batch in a batch", `{"v":1,"sends":[{"id":"a","type":"sluice:batch","payload":{}}]}`, `sends[0]: type: "sluice:batch" is not a send`},
		{"negative at", `{"v":1,"sends":[{"id":"a","type":"sms:send","payload":{},"at":-1}]}`, "sends[0]: at: -1"},
	} {
		_, err := tasks.DecodeBatch([]byte(c.payload))
		require.True(t, errors.Is(err, tasks.ErrMalformed), "%s: %v", c.name, err)
		require.Contains(t, err.Error(), c.want, c.name)
	}

	var many []tasks.BatchSend
	for i := range tasks.MaxBatchSends + 1 {
		many = append(many, tasks.BatchSend{ID: fmt.Sprint(i), Type: tasks.TypeSMSSend, Payload: json.RawMessage(`{}`)})
	}
	_, err = tasks.EncodeBatch(many)
	require.ErrorContains(t, err, "101 sends, want 1 to 100")
	_, err = tasks.EncodeBatch([]tasks.BatchSend{{ID: "a", Type: tasks.TypeSMSSend, Payload: json.RawMessage(`{`)}})
	require.True(t, strings.Contains(err.Error(), "sends[0]: payload: not JSON"), err.Error())
}

func TestRetriedReadsTheHeader(t *testing.T) {
	require.Equal(t, 0, tasks.Retried(nil))
	require.Equal(t, 2, tasks.Retried(map[string]string{tasks.HeaderRetried: "2"}))
	require.Equal(t, 0, tasks.Retried(map[string]string{tasks.HeaderRetried: "-1"}))
	require.Equal(t, 0, tasks.Retried(map[string]string{tasks.HeaderRetried: "x"}))
}
