package emulator

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// webhookTimestampTolerance is how far webhook-timestamp may be from the
// receiver's clock, either way (Standard Webhooks' recommended 5 minutes).
const webhookTimestampTolerance = 5 * time.Minute

func (s *Server) webhookHandler(hostPort string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hooks", func(w http.ResponseWriter, r *http.Request) {
		s.handleWebhook(w, r, hostPort)
	})
	return mux
}

// verifyWebhook checks Standard Webhooks 1.0 headers against body at now:
// webhook-timestamp within 5 minutes, and at least one "v1,<base64>" entry of
// the space-separated webhook-signature equal to
// HMAC-SHA256(key, "{id}.{timestamp}.{body}").
func verifyWebhook(key []byte, id, timestamp, signature string, body []byte, now time.Time) error {
	if id == "" || timestamp == "" || signature == "" {
		return errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	}
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return errors.New("webhook-timestamp is not Unix seconds")
	}
	switch at := time.Unix(ts, 0); {
	case at.Before(now.Add(-webhookTimestampTolerance)):
		return errors.New("webhook-timestamp is too old")
	case at.After(now.Add(webhookTimestampTolerance)):
		return errors.New("webhook-timestamp is too new")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, sig := range strings.Fields(signature) {
		b64, ok := strings.CutPrefix(sig, "v1,")
		if !ok {
			continue // other schemes (e.g. v1a) are not checked
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("no matching v1 signature")
}

type webhookError struct {
	Error string `json:"error"`
}

func (s *Server) handleWebhook(w http.ResponseWriter, r *http.Request, hostPort string) {
	const ch = ChannelWebhook
	// The request's arrival: read before authentication, parsing and the
	// lock, so that neither this process's work nor other requests move it.
	arrived := s.opts.Clock()
	body, err := readBody(w, r)
	if err != nil {
		s.countRejected(ch)
		writeJSON(w, http.StatusBadRequest, webhookError{Error: "read body: " + err.Error()})
		return
	}
	id := r.Header.Get("webhook-id")
	if err := verifyWebhook(s.whKey, id, r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature"), body, s.opts.Clock()); err != nil {
		s.countRejected(ch)
		writeJSON(w, http.StatusUnauthorized, webhookError{Error: err.Error()})
		return
	}
	if !json.Valid(body) {
		s.countRejected(ch)
		writeJSON(w, http.StatusBadRequest, webhookError{Error: "body is not JSON"})
		return
	}

	s.mu.Lock()
	now := arrived
	// A per-second count (exact): when it refuses, wait is the time until
	// the earliest counted request leaves the sliding window (with
	// CalendarSeconds, until the next whole second), so a request after
	// Retry-After fits unless another took its place.
	ok, _, wait := s.limiter.allow(now, s.tolerance, limit{key: "webhook|" + hostPort, perSecond: s.opts.WebhookRPS})
	if !ok {
		s.throttledLocked(ch, "429")
		s.mu.Unlock()
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(wait)))
		writeJSON(w, http.StatusTooManyRequests, webhookError{Error: "too many requests"})
		return
	}
	s.acceptLocked(Record{Channel: ch, At: now, Sender: hostPort, IdempotencyKey: id})
	s.mu.Unlock()

	s.process(ch)
	w.WriteHeader(http.StatusNoContent)
}

// retryAfterSeconds rounds wait up to whole seconds, at least 1.
func retryAfterSeconds(wait time.Duration) int {
	n := int((wait + time.Second - 1) / time.Second)
	return max(n, 1)
}
