package api

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluice-dev/sluice/producer"
	"github.com/sluice-dev/sluice/tasks"
)

// maxTaskID bounds the {id} of GET /v1/tasks/{id}: an idempotency key
// (tasks.MaxIdempotencyKey, a tenant's namespace included) or a random ID.
const maxTaskID = tasks.MaxIdempotencyKey

// TaskStatus is the response of GET /v1/tasks/{id}.
type TaskStatus struct {
	ID    string `json:"id"`
	Type  string `json:"type"`
	Queue string `json:"queue"`
	// State is pending, scheduled, active, retry, archived or completed.
	State string `json:"state"`
	// Tenant is the payload's tenant; omitted for none.
	Tenant string `json:"tenant,omitempty"`
	// Attempts is how many times the task failed and was retried (asynq's
	// Retried); Sluice's own limits never count.
	Attempts int `json:"attempts"`
	// MaxRetry is the most failed attempts it may have.
	MaxRetry int `json:"max_retry"`
	// LastError is the last failure's message; omitted for none.
	LastError string `json:"last_error,omitempty"`
	// LastFailedAt is when it last failed; omitted for never.
	LastFailedAt *time.Time `json:"last_failed_at,omitempty"`
	// NextProcessAt is the slot the task is scheduled for (a planned send's
	// reserved second, or its next retry): only for scheduled and retry.
	NextProcessAt *time.Time `json:"next_process_at,omitempty"`
	// CompletedAt is when it was sent; only for completed.
	CompletedAt *time.Time `json:"completed_at,omitempty"`
	// Delivery is the provider's latest report (Options.Deliveries);
	// omitted for none.
	Delivery *Delivery `json:"delivery,omitempty"`
}

// getTask serves GET /v1/tasks/{id}: the task with that ID in the first
// enabled channel's queue holding one (whatsapp, sms, webhook, http). A key
// bound to a tenant sees only tasks whose payload has its tenant; another's
// task is "not found", as is a task that does not exist. Every send with a
// tenant has its tenant's namespace in its ID (producer.Send gives it,
// whoever sent it: the API, `sluice send`, `sluice enqueue`), so such a
// key may give the id the API returned ("t-…:order-1") or the idempotency
// key it sent ("order-1"): both name one task (producer.TaskID). A bare id
// is also looked up as it is, for the tenant's tasks that have no
// namespace (an earlier release's, or tasks.Enqueue…'s).
func (h *handler) getTask(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !validTaskID(id) {
		d := "id: want 1 to 200 characters of A-Z a-z 0-9 . _ : -"
		writeProblem(w, badRequest(d, FieldError{Pointer: "", Detail: d}))
		return
	}
	p, _ := PrincipalFrom(r.Context())
	full := producer.TaskID(p.Tenant, id)
	if h.serveTask(w, r, p, full) {
		return
	}
	// A task of this tenant without the namespace: enqueued by the release
	// before issue 21, or by tasks.Enqueue… with a tenant. serveTask shows
	// it only when its payload has the key's tenant.
	if full != id && h.serveTask(w, r, p, id) {
		return
	}
	if h.serveBatched(w, r, p, full) {
		return
	}
	writeProblem(w, &Problem{Type: typeNotFound, Title: "Not Found", Status: http.StatusNotFound, Detail: "no task with this id"})
}

// serveTask answers with the task id in the first enabled channel's queue
// (or queue group) holding one that p may see, or with a 503 when Redis fails; false when
// there is none.
func (h *handler) serveTask(w http.ResponseWriter, r *http.Request, p Principal, id string) bool {
	for _, name := range tasks.Channels() {
		cc := h.cfg.Channels[name]
		if cc == nil || !cc.Enabled {
			continue
		}
		info, err := tasks.FindTask(h.insp, cc.Queues(), id)
		switch {
		case tasks.NoSuchTask(err):
			continue
		case err != nil:
			h.backendFailed(r, err)
			writeProblem(w, unavailable("the task could not be read; retry"))
			return true
		}
		tenant := payloadTenant(info.Payload)
		if p.Tenant != "" && tenant != p.Tenant {
			continue // another tenant's: as if it did not exist
		}
		st := TaskStatus{
			ID: info.ID, Type: info.Type, Queue: info.Queue, State: stateName(info.State), Tenant: tenant,
			Attempts: info.Retried, MaxRetry: info.MaxRetry, LastError: info.LastErr,
			LastFailedAt: timePtr(info.LastFailedAt),
		}
		if info.State == asynq.TaskStateScheduled || info.State == asynq.TaskStateRetry {
			st.NextProcessAt = timePtr(info.NextProcessAt)
		}
		if info.State == asynq.TaskStateCompleted {
			st.CompletedAt = timePtr(info.CompletedAt)
		}
		if h.deliveries != nil {
			d, err := h.deliveries(r.Context(), info.ID)
			if err != nil {
				// The task's state is still worth answering with.
				h.logger.Warn("api: delivery lookup failed", "task_id", info.ID, "err", err)
			}
			st.Delivery = d
		}
		writeJSON(w, http.StatusOK, st)
		return true
	}
	return false
}

// serveBatched answers for a send that a batch task carries or carried
// (channels.<name>.batch_sends) and that has no asynq task of its own: its
// claim names its type. It is "scheduled" until its delivery record says
// the provider accepted it ("completed"), also once its batch is due: the
// claim does not say when that is (the enqueue's answer said "pending" for
// a send of a second that had begun). The ID has the tenant's namespace
// (serveTask's first try), so a tenant sees only its own. False when id is
// no such send, or a 503 was written.
func (h *handler) serveBatched(w http.ResponseWriter, r *http.Request, p Principal, id string) bool {
	typ, ok, err := h.prod.BatchedType(r.Context(), id)
	if err != nil {
		h.backendFailed(r, err)
		writeProblem(w, unavailable("the task could not be read; retry"))
		return true
	}
	if !ok {
		return false
	}
	cc := h.cfg.Channels[tasks.DefaultQueue(typ)] // the channel's name, as its type's default queue
	if cc == nil || !cc.Enabled {
		return false
	}
	st := TaskStatus{ID: id, Type: typ, Queue: cc.Queue, State: stateName(asynq.TaskStateScheduled), Tenant: p.Tenant}
	if h.deliveries != nil {
		d, err := h.deliveries(r.Context(), id)
		if err != nil {
			h.logger.Warn("api: delivery lookup failed", "task_id", id, "err", err)
		}
		st.Delivery = d
		if d != nil && d.Status != "archived" {
			st.State = stateName(asynq.TaskStateCompleted) // sent: the provider has it
		}
	}
	writeJSON(w, http.StatusOK, st)
	return true
}

func validTaskID(id string) bool {
	if id == "" || len(id) > maxTaskID {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// payloadTenant is the "tenant" of a task payload, "" if none or unreadable.
func payloadTenant(b []byte) string {
	var p struct {
		Tenant string `json:"tenant"`
	}
	_ = json.Unmarshal(b, &p)
	return p.Tenant
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
