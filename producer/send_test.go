package producer_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/producer"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

func smsTask(t *testing.T, p tasks.SMSSend) *asynq.Task {
	t.Helper()
	if p.From == "" {
		p.From = "+12025550100"
	}
	if p.To == "" {
		p.To = "+12025550101"
	}
	if p.Body == "" {
		p.Body = "hi"
	}
	task, err := tasks.NewSMSSendTask(p)
	require.NoError(t, err)
	return task
}

// counts records Options.Count's calls.
type counts struct {
	mu sync.Mutex
	by map[string]int // "tenant/campaign"
}

func (c *counts) add(_ context.Context, tenant, campaign string, n int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.by[tenant+"/"+campaign] += n
	return nil
}

// Send namespaces a tenant's key (the payload's key and the task ID),
// refuses a repeat without sending twice, and counts only new tasks per
// campaign.
func TestSendNamespacesClaimsAndCounts(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	lim := throttle.NewRedis(rdb, throttle.Options{OverrideRefresh: -1})
	cnt := &counts{by: map[string]int{}}
	prod, err := producer.New(producer.Options{Redis: rdb, Limiter: lim, Count: cnt.add,
		Channels: []worker.Channel{{Name: "sms", TaskType: tasks.TypeSMSSend}}})
	require.NoError(t, err)
	ctx := context.Background()
	send := func(p tasks.SMSSend) producer.Result {
		out, err := prod.Send(ctx, []producer.Item{{Task: smsTask(t, p)}})
		require.NoError(t, err)
		return out[0]
	}
	d := tasks.Delivery{Tenant: "acme", Campaign: "spring"}
	r := send(tasks.SMSSend{Delivery: d, IdempotencyKey: "order-1"})
	require.NoError(t, r.Err)
	id := producer.TenantNamespace("acme") + "order-1"
	require.Equal(t, id, r.ID)
	require.Equal(t, id, r.Info.ID)
	p, err := tasks.DecodeSMSSend(r.Task.Payload())
	require.NoError(t, err)
	require.Equal(t, id, p.IdempotencyKey, "the namespaced key is the payload's too")
	require.Equal(t, id, producer.TaskID("acme", "order-1"))
	require.Equal(t, id, producer.TaskID("acme", id), "an ID with its tenant's namespace is kept")

	// The same send again: already enqueued, not sent twice, not counted.
	r = send(tasks.SMSSend{Delivery: d, IdempotencyKey: "order-1"})
	require.ErrorIs(t, r.Err, tasks.ErrDuplicate)
	require.Nil(t, r.Info)
	n, err := asynq.NewInspectorFromRedisClient(rdb).ListPendingTasks("sms")
	require.NoError(t, err)
	require.Len(t, n, 1, "one task")
	require.Equal(t, map[string]int{"acme/spring": 1}, cnt.by)

	// A send with a tenant and no key: the namespace and a random ID.
	r = send(tasks.SMSSend{Delivery: d})
	require.NoError(t, r.Err)
	require.True(t, strings.HasPrefix(r.ID, producer.TenantNamespace("acme")), r.ID)
	require.Len(t, r.ID, len(producer.TenantNamespace("acme"))+32)
	require.Equal(t, map[string]int{"acme/spring": 2}, cnt.by)

	// Without a tenant the key is the ID.
	r = send(tasks.SMSSend{IdempotencyKey: "order-1"})
	require.NoError(t, r.Err)
	require.Equal(t, "order-1", r.ID)
}

// Send refuses, before Redis, what no worker would send: each refusal wraps
// ErrInvalid and names the field. A Client without Redis checks the same.
func TestCheckRefusesWhatNoWorkerWouldSend(t *testing.T) {
	t.Parallel()
	prod, err := producer.New(producer.Options{Channels: []worker.Channel{
		{Name: "sms", TaskType: tasks.TypeSMSSend, MaxPayloadBytes: 300},
		{Name: "webhook", TaskType: tasks.TypeWebhookDeliver},
	}})
	require.NoError(t, err)
	hook := func(url string) *asynq.Task {
		task, err := tasks.NewWebhookDeliverTask(tasks.WebhookDeliver{URL: url, EventType: "e", Payload: []byte(`{}`), IdempotencyKey: "k"})
		require.NoError(t, err)
		return task
	}
	wa, err := tasks.NewWhatsAppSendTask(tasks.WhatsAppSend{PhoneNumberID: "1065", To: "+12025550101", Text: "hi"})
	require.NoError(t, err)
	ns := producer.TenantNamespace("acme")
	for _, tc := range []struct {
		name string
		task *asynq.Task
		want string // "" for accepted
	}{
		{"accepted", smsTask(t, tasks.SMSSend{IdempotencyKey: "a"}), ""},
		{"not a send", asynq.NewTask("x:y", nil), `type: "x:y" is not a send Sluice makes`},
		{"malformed", asynq.NewTask(tasks.TypeSMSSend, []byte(`{"v":1}`)), "payload: "},
		{"reserved prefix", smsTask(t, tasks.SMSSend{IdempotencyKey: ns + "x"}), "idempotency_key: may not start with"},
		{"key too long for a tenant", smsTask(t, tasks.SMSSend{Delivery: tasks.Delivery{Tenant: "acme"}, IdempotencyKey: strings.Repeat("k", 182)}),
			"idempotency_key: 182 characters, want at most 181 for a send with a tenant"},
		{"disabled", wa, "channel: whatsapp is disabled in this configuration (channels.whatsapp.enabled)"},
		{"over the channel's cap", smsTask(t, tasks.SMSSend{Body: strings.Repeat("x", 400)}), "over channels.sms.max_payload_bytes (300)"},
		{"loopback target", hook("http://127.0.0.1:8080/h"), "url http://127.0.0.1:8080: target"},
		{"public target", hook("https://93.184.215.14/h"), ""},
	} {
		r := prod.Check([]producer.Item{{Task: tc.task}})[0]
		if tc.want == "" {
			require.NoError(t, r.Err, tc.name)
			require.NotNil(t, r.Task, tc.name)
			continue
		}
		require.ErrorIs(t, r.Err, producer.ErrInvalid, tc.name)
		require.ErrorContains(t, r.Err, tc.want, tc.name)
	}
	require.ErrorContains(t, prod.CheckChannel("whatsapp"), "channel: whatsapp is disabled")
	require.NoError(t, prod.CheckChannel("sms"))
	_, err = prod.Send(context.Background(), []producer.Item{{Task: smsTask(t, tasks.SMSSend{})}})
	require.ErrorContains(t, err, "it can only Check")
	require.False(t, errors.Is(err, producer.ErrInvalid))
}

// A send held to a later instant (Delivery.SendAt) is scheduled for it,
// not planned now: its task waits in asynq's scheduled set until then, its
// ETA is that instant, and the sends beside it in the same call that are
// not held go as usual; two held to the same instant share one enqueue.
// One more than 35 days ahead is refused.
func TestSendHoldsASendUntilItsSendAt(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	lim := throttle.NewRedis(rdb, throttle.Options{OverrideRefresh: -1})
	prod, err := producer.New(producer.Options{Redis: rdb, Limiter: lim,
		Channels: []worker.Channel{{Name: "sms", TaskType: tasks.TypeSMSSend}}})
	require.NoError(t, err)
	at := time.Now().Add(time.Hour).Truncate(time.Second).UTC()
	tooFar, err := json.Marshal(tasks.SMSSend{V: 1, Delivery: tasks.Delivery{SendAt: time.Now().Add(36 * 24 * time.Hour)},
		From: "+12025550100", To: "+12025550104", Body: "hi"})
	require.NoError(t, err)
	out, err := prod.Send(context.Background(), []producer.Item{
		{Task: smsTask(t, tasks.SMSSend{Delivery: tasks.Delivery{SendAt: at}, IdempotencyKey: "later-1", To: "+12025550101"})},
		{Task: smsTask(t, tasks.SMSSend{IdempotencyKey: "now-1", To: "+12025550102"})},
		{Task: smsTask(t, tasks.SMSSend{Delivery: tasks.Delivery{SendAt: at}, IdempotencyKey: "later-2", To: "+12025550103"})},
		{Task: asynq.NewTask(tasks.TypeSMSSend, tooFar)}, // (built past the constructor, which refuses it too)
	})
	require.NoError(t, err)
	for _, i := range []int{0, 2} {
		require.NoError(t, out[i].Err)
		require.Equal(t, asynq.TaskStateScheduled, out[i].Info.State, "held")
		require.True(t, out[i].Info.NextProcessAt.Equal(at), "%v", out[i].Info.NextProcessAt)
		require.True(t, out[i].ETA.Equal(at), "%v", out[i].ETA)
	}
	require.NoError(t, out[1].Err)
	require.True(t, out[1].ETA.Before(at), "not held: planned now")
	require.ErrorIs(t, out[3].Err, producer.ErrInvalid)
	require.ErrorContains(t, out[3].Err, "send_at:")
}
