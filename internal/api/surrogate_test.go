package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/api"
)

// TestLoneSurrogateRefused: a \u escape of a lone UTF-16 surrogate is no
// character; encoding/json would turn it into U+FFFD and send that. It is
// refused, naming the field; a surrogate pair (one character) is taken.
func TestLoneSurrogateRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{keys: keysEnv})
	for _, tc := range []struct {
		name, path, body, pointer string
	}{
		{"text", "/v1/messages", `{"channel":"whatsapp","phone_number_id":"106540352242922","to":"+12025550123","text":"hi \ud800"}`, "/text"},
		{"low surrogate alone", "/v1/messages", `{"channel":"sms","from":"+12025550100","to":"+12025550125","body":"\udc00 x"}`, "/body"},
		{"high then not low", "/v1/messages", `{"channel":"sms","from":"+12025550100","to":"+12025550125","body":"\ud83d\u0041"}`, "/body"},
		{"template parameter", "/v1/messages", `{"channel":"whatsapp","phone_number_id":"1","to":"+12025550123","template":{"name":"a","language":"en","parameters":["ok","\ud800"]}}`, "/template/parameters/1"},
		{"inside a webhook's payload", "/v1/webhooks", `{"url":"https://hooks.example.com/x","event_type":"e","idempotency_key":"k-s1","payload":{"a":[1,{"b\ud800":2}]}}`, "/payload/a/1/b\ufffd"},
		{"header value", "/v1/calls", `{"method":"GET","url":"https://api.example.com/","headers":{"X-A":"\udfff"}}`, "/headers/X-A"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The document cannot refuse a lone surrogate (a JSON Schema
			// validator sees the decoded U+FFFD): the request is schema-valid.
			r := e.do("POST", tc.path, tc.body, bearer(adminKey), specValid)
			require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s", r.Body)
			p := r.problem(t)
			require.Len(t, p.Errors, 1, "%+v", p.Errors)
			require.Equal(t, tc.pointer, p.Errors[0].Pointer)
			require.Contains(t, p.Errors[0].Detail, "lone UTF-16 surrogate")
		})
	}
	t.Run("in a batch item", func(t *testing.T) {
		body := `{"items":[{"channel":"sms","from":"+12025550100","to":"+12025550125","body":"ok"},` +
			`{"channel":"sms","from":"+12025550100","to":"+12025550126","body":"\ud800"}]}`
		r := e.do("POST", "/v1/messages/batch", body, bearer(adminKey), specValid)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var b api.BatchResponse
		r.json(t, &b)
		require.Equal(t, 202, b.Results[0].Status)
		require.Equal(t, 422, b.Results[1].Status)
		require.Equal(t, "/items/1/body", b.Results[1].Problem.Errors[0].Pointer)
	})
	t.Run("a surrogate pair is one character", func(t *testing.T) {
		r := e.do("POST", "/v1/messages", `{"channel":"sms","from":"+12025550100","to":"+12025550127","body":"ship \ud83d\ude80 \\ud800"}`, bearer(adminKey), specValid)
		require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
		var a api.Accepted
		r.json(t, &a)
		body := payloadOf(t, e.task("sms", a.ID))["body"].(string)
		require.Equal(t, "ship 🚀 \\ud800", body, "an escaped backslash before u is text, not an escape")
		require.False(t, strings.ContainsRune(body, '\uFFFD'))
	})
}
