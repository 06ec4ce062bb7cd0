package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluice-dev/sluice/producer"
	"github.com/sluice-dev/sluice/tasks"
)

// item is a decoded request item: a payload the API can adjust and build.
type item interface {
	delivery() *tasks.Delivery
	key() *string
	build() (*asynq.Task, error)
}

type whatsAppItem struct {
	Channel string `json:"channel"`
	tasks.WhatsAppSend
}

type smsItem struct {
	Channel string `json:"channel"`
	tasks.SMSSend
}

type webhookItem struct{ tasks.WebhookDeliver }

type callItem struct{ tasks.HTTPCall }

func (p *whatsAppItem) delivery() *tasks.Delivery   { return &p.Delivery }
func (p *whatsAppItem) key() *string                { return &p.IdempotencyKey }
func (p *whatsAppItem) build() (*asynq.Task, error) { return tasks.NewWhatsAppSendTask(p.WhatsAppSend) }
func (p *smsItem) delivery() *tasks.Delivery        { return &p.Delivery }
func (p *smsItem) key() *string                     { return &p.IdempotencyKey }
func (p *smsItem) build() (*asynq.Task, error)      { return tasks.NewSMSSendTask(p.SMSSend) }
func (p *webhookItem) delivery() *tasks.Delivery    { return &p.Delivery }
func (p *webhookItem) key() *string                 { return &p.IdempotencyKey }
func (p *webhookItem) build() (*asynq.Task, error) {
	return tasks.NewWebhookDeliverTask(p.WebhookDeliver)
}
func (p *callItem) delivery() *tasks.Delivery   { return &p.Delivery }
func (p *callItem) key() *string                { return &p.IdempotencyKey }
func (p *callItem) build() (*asynq.Task, error) { return tasks.NewHTTPCallTask(p.HTTPCall) }

// kind is one kind of request item.
type kind struct {
	channel string          // config channel name, also "channel" in /v1/messages
	shape   shape           // exact JSON member names
	known   map[string]bool // top-level names, for mapping validation errors
	new     func() item
}

func newKind[T any, P interface {
	*T
	item
}](channel string) *kind {
	s := shapeOf(reflect.TypeFor[T](), "v")
	known := map[string]bool{}
	for name := range s {
		known[name] = true
	}
	return &kind{channel: channel, shape: s, known: known, new: func() item { return P(new(T)) }}
}

var (
	whatsAppKind = newKind[whatsAppItem]("whatsapp")
	smsKind      = newKind[smsItem]("sms")
	webhookKind  = newKind[webhookItem]("webhook")
	callKind     = newKind[callItem]("http")
)

// prepared is an item ready for the producer, or the problem that rejects
// it.
type prepared struct {
	task    *asynq.Task
	problem *Problem
	// stamped is true for a webhook whose timestamp the server chose (the
	// request gave none): a repeat of it is the same request whatever
	// time it was stamped with.
	stamped bool
	// base is the item's JSON Pointer in the body, known its kind's
	// member names and headerKey the Idempotency-Key header: for mapping
	// the producer's refusal to the request's fields.
	base      string
	known     map[string]bool
	headerKey string
}

// prepare decodes, checks and builds one item (raw, at JSON Pointer base
// in the body) for the principal p. headerKey is the Idempotency-Key
// header of a single request ("" for a batch).
func (h *handler) prepare(base string, raw json.RawMessage, kinds []*kind, p Principal, headerKey string) prepared {
	reject := func(errs ...FieldError) prepared {
		detail := "the item is not valid"
		if base == "" {
			detail = "the request is not valid"
		}
		if len(errs) == 1 {
			detail = errs[0].Detail
		}
		return prepared{problem: validationProblem(detail, errs)}
	}
	if !isObject(raw) {
		return reject(FieldError{Pointer: base, Detail: "want a JSON object"})
	}
	k := kinds[0]
	if len(kinds) > 1 {
		var err error
		if k, err = pickKind(raw, kinds); err != nil {
			return reject(FieldError{Pointer: base + "/channel", Detail: err.Error()})
		}
	}
	if errs := unknownFields(base, raw, k.shape); len(errs) > 0 {
		return reject(errs...)
	}
	if fe, ok := loneSurrogate(base, raw); ok {
		return reject(fe)
	}
	it := k.new()
	if errs := decodeValue(base, raw, it, k.shape); len(errs) > 0 {
		return reject(errs...)
	}
	d := it.delivery()
	if p.Tenant != "" {
		if d.Tenant != "" && d.Tenant != p.Tenant {
			return reject(FieldError{Pointer: base + "/tenant", Detail: "tenant: this API key sends for its own tenant only; leave tenant out or give that one"})
		}
		d.Tenant = p.Tenant
	}
	kp := it.key()
	if headerKey != "" {
		if *kp != "" && *kp != headerKey {
			return reject(FieldError{Pointer: base + "/idempotency_key", Detail: "idempotency_key: differs from the Idempotency-Key header; send one of them, or both the same"})
		}
		*kp = headerKey
	}
	wh, isWebhook := it.(*webhookItem)
	stamped := isWebhook && wh.Timestamp.IsZero()
	pr := prepared{base: base, known: k.known, headerKey: headerKey, stamped: stamped}
	// The task as the client sent it: the producer namespaces its key and
	// checks it (Send).
	t, err := it.build()
	if err != nil {
		pr.problem = pr.refusal(err)
		return pr
	}
	pr.task = t
	return pr
}

// refusal is the 422 of an item the tasks package or the producer refused:
// err's text names the field, mapped to a JSON Pointer under the item.
func (pr prepared) refusal(err error) *Problem {
	errs := fieldErrors(pr.base, err.Error(), pr.known)
	if pr.headerKey != "" {
		for i := range errs {
			if errs[i].Pointer == pr.base+"/idempotency_key" {
				errs[i].Detail = "(from the Idempotency-Key header) " + errs[i].Detail
			}
		}
	}
	detail := "the item is not valid"
	if pr.base == "" {
		detail = "the request is not valid"
	}
	if len(errs) == 1 {
		detail = errs[0].Detail
	}
	return validationProblem(detail, errs)
}

// pickKind reads raw's "channel" member (exact name) and returns its kind.
func pickKind(raw json.RawMessage, kinds []*kind) (*kind, error) {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = strconv.Quote(k.channel)
	}
	want := strings.Join(names, " or ")
	v, ok := member(raw, "channel")
	if !ok {
		return nil, fmt.Errorf("channel: required (%s)", want)
	}
	var ch string
	if err := json.Unmarshal(v, &ch); err != nil {
		return nil, fmt.Errorf("channel: want a string, %s", want)
	}
	for _, k := range kinds {
		if k.channel == ch {
			return k, nil
		}
	}
	return nil, fmt.Errorf("channel: %.40q: want %s", ch, want)
}

// member returns the value of the JSON object raw's member name, matched
// exactly; the last one if it repeats, as encoding/json takes it.
func member(raw json.RawMessage, name string) (json.RawMessage, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	var found json.RawMessage
	ok := false
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		if t == name {
			found, ok = v, true
		}
	}
	return found, ok
}

// Accepted describes an enqueued task: the 202 (or, for a repeated
// idempotency key, 200) response of a single request, and an accepted
// batch item.
type Accepted struct {
	// ID is the task ID: the idempotency key, else a random one; for a
	// send with a tenant, after the tenant's namespace
	// (producer.TenantNamespace).
	ID string `json:"id"`
	// Type is the task type ("whatsapp:send").
	Type string `json:"type"`
	// Queue is the asynq queue (the channel's channels.<name>.queue).
	Queue string `json:"queue"`
	// State is asynq's: pending, scheduled, active, retry, archived or
	// completed.
	State string `json:"state"`
	// ETA is when the send is planned to go (Enqueued.ETA); for a
	// duplicate, the time asynq next processes it (NextProcessAt, a whole
	// second), or when it completed or last failed.
	ETA time.Time `json:"eta"`
	// Duplicate is true when the idempotency key was already used by the
	// same request: nothing new was enqueued.
	Duplicate bool `json:"duplicate"`
}

// outcome is one item's result.
type outcome struct {
	status   int
	accepted *Accepted
	problem  *Problem
}

// enqueue sends the prepared items that have a task through the producer,
// in one Send call (one plan per channel, each campaign's new tasks
// counted), and returns every item's outcome. The error is the plan's
// (Redis): nothing was enqueued.
func (h *handler) enqueue(ctx context.Context, items []prepared) ([]outcome, error) {
	out := make([]outcome, len(items))
	var send []producer.Item
	var idx []int
	for i, it := range items {
		if it.problem != nil {
			out[i] = outcome{status: it.problem.Status, problem: it.problem}
			continue
		}
		send = append(send, producer.Item{Task: it.task})
		idx = append(idx, i)
	}
	if len(send) == 0 {
		return out, nil
	}
	res, err := h.prod.Send(ctx, send)
	switch {
	case errors.Is(err, producer.ErrNotCounted):
		h.logger.Warn("api: counting a campaign's new tasks failed; its progress will end early", "err", err)
	case err != nil:
		return nil, err
	}
	for j, r := range res {
		i := idx[j]
		switch {
		case r.Err == nil:
			out[i] = outcome{status: http.StatusAccepted, accepted: &Accepted{
				ID: r.Info.ID, Type: r.Info.Type, Queue: r.Info.Queue, State: stateName(r.Info.State), ETA: r.ETA.UTC(),
			}}
		case errors.Is(r.Err, producer.ErrInvalid):
			p := items[i].refusal(r.Err)
			out[i] = outcome{status: p.Status, problem: p}
		case errors.Is(r.Err, tasks.ErrDuplicate):
			out[i] = h.duplicate(r.Task, r.ID, items[i].stamped)
		case errors.Is(r.Err, tasks.ErrKeyInUse):
			out[i] = outcome{status: http.StatusUnprocessableEntity, problem: keyReused("this idempotency key was already used for a send on another channel; use a new key for a new send")}
		default:
			h.logger.LogAttrs(ctx, slog.LevelWarn, "api: enqueue failed", slog.String("task_id", r.ID), slog.String("type", r.Task.Type()), slog.Any("err", r.Err))
			out[i] = outcome{status: http.StatusServiceUnavailable, problem: unavailable("the task could not be enqueued; retry")}
		}
	}
	return out, nil
}

// duplicate answers a task whose ID was taken: 200 with the existing
// task's state when it is the same request (same type and payload), 422
// when the key was used for a different one (draft-ietf-httpapi-
// idempotency-key-header §2.7, as Stripe does), 409 when the task is gone
// again (its retention ended between the two looks: retry). stamped says
// the server chose t's webhook timestamp; the earlier one's is then taken.
func (h *handler) duplicate(t *asynq.Task, id string, stamped bool) outcome {
	queues := []string{tasks.DefaultQueue(t.Type())}
	if cc := h.cfg.Channels[queues[0]]; cc != nil {
		queues = cc.Queues() // its queue and queue groups
	}
	info, err := tasks.FindTask(h.insp, queues, id)
	switch {
	case tasks.NoSuchTask(err):
		return outcome{status: http.StatusConflict, problem: &Problem{Type: typeConflict, Title: "Conflict", Status: http.StatusConflict,
			Detail: "the idempotency key's task ended while this request was served; retry"}}
	case err != nil:
		h.logger.Warn("api: reading a duplicate task failed", "task_id", id, "err", err)
		return outcome{status: http.StatusServiceUnavailable, problem: unavailable("the task could not be read; retry")}
	}
	if info.Type != t.Type() || !samePayload(info.Payload, t.Payload(), stamped) {
		return outcome{status: http.StatusUnprocessableEntity, problem: keyReused("this idempotency key was already used for a different request; use a new key for a new send")}
	}
	eta := info.NextProcessAt
	switch {
	case info.State == asynq.TaskStateCompleted && !info.CompletedAt.IsZero():
		eta = info.CompletedAt
	case info.State == asynq.TaskStateArchived && !info.LastFailedAt.IsZero():
		eta = info.LastFailedAt
	case eta.IsZero():
		eta = time.Now()
	}
	return outcome{status: http.StatusOK, accepted: &Accepted{
		ID: info.ID, Type: info.Type, Queue: info.Queue, State: stateName(info.State), ETA: eta.UTC(), Duplicate: true,
	}}
}

// samePayload reports whether a task's stored payload is the one a repeated
// request built. stamped: the new payload is a webhook whose timestamp the
// server chose, so the stored payload's timestamp stands in for it.
func samePayload(stored, built []byte, stamped bool) bool {
	if bytes.Equal(stored, built) || !stamped {
		return bytes.Equal(stored, built)
	}
	var old, p tasks.WebhookDeliver
	if json.Unmarshal(stored, &old) != nil || json.Unmarshal(built, &p) != nil {
		return false
	}
	p.Timestamp = old.Timestamp
	b, err := json.Marshal(p)
	return err == nil && bytes.Equal(stored, b)
}

// keyReused is the 422 of an idempotency key used for another request.
func keyReused(detail string) *Problem {
	return &Problem{Type: typeIdempotency, Title: "Idempotency key reused", Status: http.StatusUnprocessableEntity, Detail: detail}
}

func unavailable(detail string) *Problem {
	return &Problem{Type: typeUnavailable, Title: "Service Unavailable", Status: http.StatusServiceUnavailable, Detail: detail}
}

// stateName is asynq's name of a task state; it never panics.
func stateName(s asynq.TaskState) string {
	switch s {
	case asynq.TaskStateActive, asynq.TaskStatePending, asynq.TaskStateScheduled,
		asynq.TaskStateRetry, asynq.TaskStateArchived, asynq.TaskStateCompleted, asynq.TaskStateAggregating:
		return s.String()
	}
	return "unknown"
}

// idempotencyHeader reads the Idempotency-Key header: one field line, an
// RFC 9651 String ("\"abc\"", as draft-ietf-httpapi-idempotency-key-header
// has it) or the bare key (as Stripe takes it).
func idempotencyHeader(r *http.Request) (string, error) {
	vs := r.Header.Values("Idempotency-Key")
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", errors.New("Idempotency-Key: send it once")
	}
	v := strings.TrimSpace(vs[0])
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		inner := v[1 : len(v)-1]
		if strings.ContainsAny(inner, `"\`) {
			return "", errors.New(`Idempotency-Key: want A-Z a-z 0-9 . _ : - (no '"' or '\')`)
		}
		v = inner
	}
	if v == "" {
		return "", errors.New("Idempotency-Key: empty")
	}
	return v, nil
}

func badRequest(detail string, errs ...FieldError) *Problem {
	return &Problem{Type: typeBadRequest, Title: "Bad Request", Status: http.StatusBadRequest, Detail: detail, Errors: errs}
}

// single serves POST /v1/messages, /v1/webhooks and /v1/calls.
func (h *handler) single(kinds []*kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, err := idempotencyHeader(r)
		if err != nil {
			writeProblem(w, badRequest(err.Error()))
			return
		}
		body, ok := h.jsonRequest(w, r)
		if !ok {
			return
		}
		if !json.Valid(body) {
			writeProblem(w, badRequest("the body is not valid JSON", FieldError{Pointer: "", Detail: syntaxDetail(body)}))
			return
		}
		p, _ := PrincipalFrom(r.Context())
		out, err := h.enqueue(r.Context(), []prepared{h.prepare("", body, kinds, p, key)})
		if err != nil {
			h.backendFailed(r, err)
			writeProblem(w, unavailable("the send could not be planned; retry"))
			return
		}
		o := out[0]
		if o.problem != nil {
			writeProblem(w, o.problem)
			return
		}
		writeJSON(w, o.status, o.accepted)
	}
}

// BatchResult is one item's entry in a batch response.
type BatchResult struct {
	// Index is the item's position in "items", from 0.
	Index int `json:"index"`
	// Status is the status the item would have had on its own: 202, 200
	// (a duplicate), 409, 422 or 503.
	Status int `json:"status"`
	*Accepted
	// Problem says why the item was rejected.
	Problem *Problem `json:"problem,omitempty"`
}

// BatchResponse is the 200 response of a .../batch request.
type BatchResponse struct {
	Results []BatchResult `json:"results"`
	// Accepted counts items enqueued now or already (200 duplicates).
	Accepted int `json:"accepted"`
	// Rejected counts the other items.
	Rejected int `json:"rejected"`
}

// batch serves the .../batch endpoints.
func (h *handler) batch(kinds []*kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if len(r.Header.Values("Idempotency-Key")) > 0 {
			writeProblem(w, badRequest("Idempotency-Key: not taken on a batch; give each item its own idempotency_key"))
			return
		}
		body, ok := h.jsonRequest(w, r)
		if !ok {
			return
		}
		if !json.Valid(body) {
			writeProblem(w, badRequest("the body is not valid JSON", FieldError{Pointer: "", Detail: syntaxDetail(body)}))
			return
		}
		if !isObject(body) {
			writeProblem(w, validationProblem(`want {"items": [...]}`, []FieldError{{Pointer: "", Detail: `want a JSON object {"items": [...]}`}}))
			return
		}
		if errs := unknownFields("", body, shape{"items": nil}); len(errs) > 0 {
			writeProblem(w, validationProblem(errs[0].Detail, errs))
			return
		}
		var req struct {
			Items []json.RawMessage `json:"items"`
		}
		if errs := decodeValue("", body, &req, shape{"items": nil}); len(errs) > 0 {
			writeProblem(w, validationProblem(errs[0].Detail, errs))
			return
		}
		switch n := len(req.Items); {
		case n == 0:
			writeProblem(w, validationProblem("items: required, at least 1", []FieldError{{Pointer: "/items", Detail: "items: required, at least 1"}}))
			return
		case n > MaxBatchItems:
			d := fmt.Sprintf("items: %d items, want at most %d", n, MaxBatchItems)
			writeProblem(w, validationProblem(d, []FieldError{{Pointer: "/items", Detail: d}}))
			return
		}
		p, _ := PrincipalFrom(r.Context())
		items := make([]prepared, len(req.Items))
		for i, raw := range req.Items {
			items[i] = h.prepare("/items/"+strconv.Itoa(i), raw, kinds, p, "")
		}
		out, err := h.enqueue(r.Context(), items)
		if err != nil {
			h.backendFailed(r, err)
			writeProblem(w, unavailable("the sends could not be planned; nothing was enqueued; retry"))
			return
		}
		resp := BatchResponse{Results: make([]BatchResult, len(out))}
		for i, o := range out {
			resp.Results[i] = BatchResult{Index: i, Status: o.status, Accepted: o.accepted, Problem: o.problem}
			if o.accepted != nil {
				resp.Accepted++
			} else {
				resp.Rejected++
			}
		}
		writeJSON(w, http.StatusOK, resp)
	}
}

// syntaxDetail describes why body is not valid JSON, with the byte offset.
func syntaxDetail(body []byte) string {
	var v any
	err := json.Unmarshal(body, &v)
	var se *json.SyntaxError
	switch {
	case len(bytes.TrimSpace(body)) == 0:
		return "empty body"
	case errors.As(err, &se):
		return fmt.Sprintf("%s (at byte %d)", strings.TrimPrefix(se.Error(), "json: "), se.Offset)
	case err != nil:
		return strings.TrimPrefix(err.Error(), "json: ")
	}
	return "not valid JSON"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeProblem(w, &Problem{Type: "about:blank", Title: "Internal Server Error", Status: http.StatusInternalServerError})
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (h *handler) backendFailed(r *http.Request, err error) {
	h.logger.LogAttrs(r.Context(), slog.LevelError, "api: backend failed", slog.String("path", r.URL.Path), slog.Any("err", err))
}
