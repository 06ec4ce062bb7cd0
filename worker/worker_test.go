package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testutil"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/throttle"
)

func TestScheduleDelayNeverReturnsEarly(t *testing.T) {
	base := time.Date(2026, 11, 20, 12, 0, 10, 0, time.UTC)
	ms := time.Millisecond
	for _, c := range []struct {
		now  time.Duration // after base
		wait time.Duration
		want time.Duration
	}{
		{0, 0, 0},
		{300 * ms, 700 * ms, 700 * ms},                 // due on a whole second: as is
		{300 * ms, 710 * ms, 700 * ms},                 // 10ms past a second: clock skew, not a reason to wait a second more
		{300 * ms, 800 * ms, 1700 * ms},                // due 11.1s: asynq would release it at 11.0s, so 12.0s
		{100 * ms, 12500 * time.Microsecond, 900 * ms}, // a short wait still ends on a whole second
		{0, 6 * time.Second, 6 * time.Second},
	} {
		got := scheduleDelay(base.Add(c.now), c.wait)
		require.Equal(t, c.want, got, "now +%v wait %v", c.now, c.wait)
		if c.wait > skewAllowance {
			require.GreaterOrEqual(t, got+skewAllowance, c.wait, "never earlier than the wait")
		}
	}
}

func TestIsFailure(t *testing.T) {
	require.False(t, IsFailure(fmt.Errorf("wrapped: %w", &ThrottledError{Channel: "sms", Limit: "sender"})), "Sluice's own limit: free")
	require.False(t, IsFailure(&ThrottledError{Channel: "sms", Limit: throttle.PauseName}), "a pause the task met: free")
	ce := &channels.Error{Class: channels.Throttled, Provider: "twilio", Code: 20429}
	require.True(t, IsFailure(&ThrottledError{Channel: "sms", Limit: ProviderLimit, Err: ce}), "a provider throttle spends an attempt")
	require.False(t, IsFailure(&ThrottledError{Channel: "sms", Limit: "provider"}), "a configured limit named provider: free")
	refused := &channels.Error{Class: channels.Unauthorized, Provider: "twilio", Code: 20003, Scope: channels.ScopeChannel}
	require.False(t, IsFailure(&ThrottledError{Channel: "sms", Limit: ProviderLimit, Err: refused}), "refused credentials pause the channel: free")
	require.True(t, IsFailure(errors.New("boom")))
}

// testPayload is the payload of the test channel's tasks.
type testPayload struct {
	ID   string `json:"id"`
	Step string `json:"step,omitempty"`
	To   string `json:"to,omitempty"`
}

type sendRecord struct {
	id      string
	retried int
	at      time.Time
}

type harness struct {
	t       *testing.T
	redis   *redistest.Server
	client  *asynq.Client
	insp    *asynq.Inspector
	limiter *throttle.Redis
	sent    chan sendRecord
	mu      sync.Mutex
	calls   map[string]int
}

// newHarness runs a Worker with one channel, "test", whose Send is fn;
// each of with may change the channel first.
func newHarness(t *testing.T, rs []rules.Rule, fn func(p testPayload, call int) error, with ...func(*Channel)) *harness {
	t.Helper()
	srv := redistest.Start(t)
	h := &harness{t: t, redis: srv, sent: make(chan sendRecord, 100), calls: map[string]int{}}
	rdb := srv.Client(t)
	h.client = asynq.NewClientFromRedisClient(rdb)
	h.insp = asynq.NewInspectorFromRedisClient(rdb)
	h.limiter = throttle.NewRedis(rdb, throttle.Options{Prefix: "wt"})
	ch := Channel{Name: "test", TaskType: "test:send", Rules: rs,
		Prepare: func(b []byte) (Prepared, error) {
			var p testPayload
			if err := json.Unmarshal(b, &p); err != nil || p.ID == "" {
				return Prepared{}, fmt.Errorf("id: missing or not JSON: %q", b)
			}
			return Prepared{Fields: map[string]string{"id": p.ID, "to": p.To}, Send: func(ctx context.Context) (channels.Response, error) {
				h.mu.Lock()
				h.calls[p.ID]++
				n := h.calls[p.ID]
				h.mu.Unlock()
				if err := fn(p, n); err != nil {
					return channels.Response{}, err
				}
				retried, _ := asynq.GetRetryCount(ctx)
				h.sent <- sendRecord{id: p.ID, retried: retried, at: time.Now()}
				return channels.Response{Status: 200}, nil
			}}, nil
		}}
	for _, f := range with {
		f(&ch)
	}
	w, err := New(Options{
		Redis: rdb, Limiter: h.limiter, Channels: []Channel{ch}, Concurrency: 4,
		Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: time.Second,
	})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Shutdown)
	return h
}

func (h *harness) enqueue(id string, payload string, opts ...asynq.Option) {
	h.t.Helper()
	if payload == "" {
		payload = fmt.Sprintf(`{"id":%q}`, id)
	}
	opts = append([]asynq.Option{asynq.Queue("test"), asynq.TaskID(id), asynq.MaxRetry(5), asynq.Retention(time.Hour)}, opts...)
	_, err := h.client.Enqueue(asynq.NewTask("test:send", []byte(payload)), opts...)
	require.NoError(h.t, err)
}

func (h *harness) waitSent(timeout time.Duration) sendRecord {
	h.t.Helper()
	select {
	case r := <-h.sent:
		return r
	case <-time.After(timeout):
		h.t.Fatalf("no send within %v", timeout)
		return sendRecord{}
	}
}

// waitState polls the inspector until the task reaches state (a state
// change in Redis has no signal to subscribe to).
func (h *harness) waitState(id string, state asynq.TaskState, timeout time.Duration) *asynq.TaskInfo {
	h.t.Helper()
	return testutil.Task(h.t, h.insp, "test", id, timeout, testutil.In(state))
}

func TestBlockedTaskWaitsItsRetryAfterAndKeepsRetryCount(t *testing.T) {
	t.Parallel()
	// One send per 3 s per id: the second task is blocked for ~3 s.
	rules := []rules.Rule{{Key: "test:pace:{id}", Limit: throttle.Limit{Name: "pace", Algorithm: throttle.GCRA, Rate: throttle.Rate{Limit: 1, Period: 3 * time.Second}}}}
	h := newHarness(t, rules, func(testPayload, int) error { return nil })

	enqueuedA := time.Now()
	h.enqueue("a", `{"id":"same","step":"a"}`)
	first := h.waitSent(10 * time.Second)
	h.enqueue("b", `{"id":"same","step":"b"}`)
	second := h.waitSent(30 * time.Second)

	gap := second.at.Sub(first.at)
	require.Equal(t, 0, second.retried, "a throttled task keeps its retry count")
	// b's turn is 3s after a's slot, which came after a was enqueued; a's
	// send itself can run a little after its slot on a busy host, so the
	// bound is measured from the enqueue.
	require.GreaterOrEqual(t, second.at.Sub(enqueuedA), 3*time.Second-skewAllowance, "never before RetryAfter")
	// The wait is RetryAfter rounded up to a whole second plus one
	// forwarder tick, about 4s on an idle host (logged: how soon is
	// timing). asynq's default backoff for a first retry is at least 15s
	// after the block, which came after the first send: a gap under 15s
	// is RetryAfter's.
	t.Logf("the blocked task was sent %v after the first", gap.Round(time.Millisecond))
	require.Less(t, gap, 15*time.Second, "waited RetryAfter, not the default backoff")
	info := h.waitState("b", asynq.TaskStateCompleted, 30*time.Second)
	require.Equal(t, 0, info.Retried)
}

func TestMalformedPayloadIsArchivedWithReason(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, func(testPayload, int) error { return nil })
	h.enqueue("bad", `{"nope":1}`)
	info := h.waitState("bad", asynq.TaskStateArchived, 10*time.Second)
	require.Contains(t, info.LastErr, "malformed payload")
	require.Contains(t, info.LastErr, "id: missing")
	require.Equal(t, 0, info.Retried, "archived at once, not retried")
}

func TestProviderOutcomes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, func(p testPayload, call int) error {
		switch p.ID {
		case "throttled-once":
			if call == 1 {
				return &channels.Error{Class: channels.Throttled, Provider: "twilio", Code: 20429, RetryAfter: time.Second}
			}
		case "permanent":
			return &channels.Error{Class: channels.Permanent, Provider: "whatsapp", Code: 131026, Message: "Message undeliverable"}
		case "transient":
			return &channels.Error{Class: channels.Transient, Provider: "whatsapp", HTTPStatus: 500, Code: 131000}
		}
		return nil
	})
	h.enqueue("throttled-once", "")
	h.enqueue("permanent", "")
	h.enqueue("transient", "")

	r := h.waitSent(10 * time.Second)
	require.Equal(t, "throttled-once", r.id)
	require.Equal(t, 1, r.retried, "a provider throttle spends one attempt of the budget")

	info := h.waitState("permanent", asynq.TaskStateArchived, 10*time.Second)
	require.Contains(t, info.LastErr, "131026")
	require.Equal(t, 0, info.Retried)

	info = h.waitState("transient", asynq.TaskStateRetry, 10*time.Second)
	require.Equal(t, 1, info.Retried, "a transient failure spends a retry")
}

func TestConcurrencyLeaseReleasedAfterSend(t *testing.T) {
	t.Parallel()
	rules := []rules.Rule{{Key: "test:conc", Limit: throttle.Limit{Name: "conc", Algorithm: throttle.Concurrency, Max: 1, Lease: time.Minute}}}
	h := newHarness(t, rules, func(testPayload, int) error { return nil })
	for i := range 5 {
		h.enqueue(fmt.Sprint("c", i), "")
	}
	for range 5 {
		h.waitSent(10 * time.Second)
	}
	for i := range 5 {
		h.waitState(fmt.Sprint("c", i), asynq.TaskStateCompleted, 5*time.Second)
	}
	n, err := h.redis.Client(t).ZCard(context.Background(), h.limiter.Key("test:conc")).Result()
	require.NoError(t, err)
	require.Zero(t, n, "every lease released")
}

func TestDistinctRuleCountsRecipients(t *testing.T) {
	t.Parallel()
	// At most 2 distinct recipients per day on one key.
	rules := []rules.Rule{{Key: "test:tier", Member: "{to}", Limit: throttle.Limit{Name: "tier", Algorithm: throttle.Distinct, Rate: throttle.PerDay(2)}}}
	h := newHarness(t, rules, func(testPayload, int) error { return nil })
	send := func(id, to string) {
		t.Helper()
		h.enqueue(id, fmt.Sprintf(`{"id":%q,"to":%q}`, id, to))
	}

	send("a", "+12025550101")
	require.Equal(t, "a", h.waitSent(10*time.Second).id)
	send("b", "+12025550102")
	require.Equal(t, "b", h.waitSent(10*time.Second).id)

	// A third recipient is over the tier: requeued for about a day, its
	// retry count untouched.
	send("c", "+12025550103")
	info := h.waitState("c", asynq.TaskStateRetry, 10*time.Second)
	require.Equal(t, 0, info.Retried, "a throttled task keeps its retry count")
	require.Contains(t, info.LastErr, "tier")
	require.Greater(t, time.Until(info.NextProcessAt), 23*time.Hour, "back when the first recipient leaves the window")

	// A recipient already counted passes, and so does a task without one
	// (the member renders empty: the rule does not apply).
	send("d", "+12025550101")
	require.Equal(t, "d", h.waitSent(10*time.Second).id)
	send("e", "")
	require.Equal(t, "e", h.waitSent(10*time.Second).id)

	members, err := h.redis.Client(t).ZRange(context.Background(), h.limiter.Key("test:tier"), 0, -1).Result()
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"+12025550101", "+12025550102"}, members, "only the admitted recipients are counted")
	select {
	case r := <-h.sent:
		t.Fatalf("unexpected send of %s", r.id)
	default:
	}
}

func TestHandlerRejectsBadRules(t *testing.T) {
	w := &Worker{opts: Options{}, logger: slog.New(slog.DiscardHandler)}
	prep := func([]byte) (Prepared, error) { return Prepared{}, nil }
	g := throttle.Limit{Name: "g", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1)}
	_, err := w.Handler(Channel{Name: "sms", TaskType: "sms:send", Prepare: prep, Rules: []rules.Rule{{Key: "whatsapp:x:{to}", Limit: g}}})
	require.ErrorContains(t, err, `scope "whatsapp" must be the channel name "sms"`)
	_, err = w.Handler(Channel{Name: "sms", TaskType: "sms:send", Prepare: prep, Rules: []rules.Rule{{Key: "sms:x:{to", Limit: g}}})
	require.ErrorContains(t, err, `key "sms:x:{to": "{" without "}"`)
	dist := throttle.Limit{Name: "tier", Algorithm: throttle.Distinct, Rate: throttle.PerDay(250)}
	_, err = w.Handler(Channel{Name: "sms", TaskType: "sms:send", Prepare: prep, Rules: []rules.Rule{{Key: "sms:tier:{from}", Limit: dist}}})
	require.ErrorContains(t, err, `distinct limit "tier": member "": want a template such as {to}`)
	_, err = w.Handler(Channel{Name: "sms", TaskType: "sms:send", Prepare: prep, Rules: []rules.Rule{{Key: "sms:tier:{from}", Member: "{to", Limit: dist}}})
	require.ErrorContains(t, err, `member "{to": "{" without "}"`)
	_, err = w.Handler(Channel{Name: "sms", TaskType: "sms:send", Prepare: prep, Rules: []rules.Rule{{Key: "sms:x:{to}", Member: "{to}", Limit: g}}})
	require.ErrorContains(t, err, `member is only used by distinct limits, not gcra`)
	_, err = w.Handler(Channel{Name: "sms", TaskType: "sms:send", Prepare: prep, Rules: []rules.Rule{{Key: "sms:x}{to}", Limit: g}}})
	require.ErrorContains(t, err, `key "sms:x}{to}": "}" without "{"`)
	_, err = w.Handler(Channel{Name: "sms", TaskType: "sms:send", Prepare: prep, Rules: []rules.Rule{{Key: "sms:x:{from}", Limit: g, CostField: "to"}}})
	require.ErrorContains(t, err, `cost "to" is not a whole-number field of sms:send tasks (want one of: segments)`)
	_, err = w.Handler(Channel{Name: "sms", TaskType: "sms:send", Prepare: prep, Rules: []rules.Rule{{Key: "sms:x:{from}", Limit: throttle.Limit{Name: "g", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1), Burst: 3}, CostField: "segments"}}})
	require.NoError(t, err)
}

// TestProviderThrottlePausesItsScopeInEveryWorker: a 131048 for one number
// pauses it in both workers: no other send to that number reaches the
// provider until the pause ends, sends to another number go on, and every
// task is delivered once after it.
func TestProviderThrottlePausesItsScopeInEveryWorker(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	client := asynq.NewClientFromRedisClient(rdb)
	lim := throttle.NewRedis(rdb, throttle.Options{Prefix: "wp"})
	const pauseFor = 2 * time.Second
	var mu sync.Mutex
	var calls []sendRecord // every provider call, in order
	delivered := make(chan string, 100)
	ch := Channel{Name: "test", TaskType: "test:send", PauseScopes: map[string]string{channels.ScopeSender: "{to}"},
		Rules: []rules.Rule{{Key: "test:number:{to}", Limit: throttle.Limit{Name: "throughput", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(100), Burst: 1}}},
		Prepare: func(b []byte) (Prepared, error) {
			var p testPayload
			if err := json.Unmarshal(b, &p); err != nil {
				return Prepared{}, err
			}
			return Prepared{Fields: map[string]string{"id": p.ID, "to": p.To}, Send: func(ctx context.Context) (channels.Response, error) {
				mu.Lock()
				first := len(calls) == 0
				calls = append(calls, sendRecord{id: p.ID, at: time.Now()})
				mu.Unlock()
				if first {
					return channels.Response{}, &channels.Error{Class: channels.Throttled, Provider: "test", Code: 131048,
						Scope: channels.ScopeSender, RetryAfter: pauseFor, Message: "spam rate limit"}
				}
				delivered <- p.ID
				return channels.Response{Status: 200}, nil
			}}, nil
		}}
	for range 2 {
		w, err := New(Options{Redis: rdb, Limiter: lim, Channels: []Channel{ch}, Concurrency: 8,
			Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: time.Second})
		require.NoError(t, err)
		require.NoError(t, w.Start())
		t.Cleanup(w.Shutdown)
	}
	enqueue := func(id, to string) {
		_, err := client.Enqueue(asynq.NewTask("test:send", []byte(fmt.Sprintf(`{"id":%q,"to":%q}`, id, to))),
			asynq.Queue("test"), asynq.TaskID(id), asynq.MaxRetry(3))
		require.NoError(t, err)
	}
	enqueue("first", "n1")
	// Once the first call was throttled, 20 more for n1 and one for n2.
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(calls) == 1 }, 5*time.Second, 10*time.Millisecond)
	for i := range 20 {
		enqueue(fmt.Sprint("n1-", i), "n1")
	}
	enqueue("other", "n2")
	require.Equal(t, "other", <-delivered, "a send to another number goes on during the pause")
	got := map[string]bool{"other": true}
	for len(got) < 22 {
		select {
		case id := <-delivered:
			require.False(t, got[id], "%s delivered twice", id)
			got[id] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 22 delivered", len(got))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	start := calls[0].at
	for _, c := range calls[1:] {
		if c.id != "other" && c.at.Sub(start) < pauseFor-50*time.Millisecond {
			t.Fatalf("%s reached the provider %v after the throttle, within the %v pause", c.id, c.at.Sub(start), pauseFor)
		}
	}
	require.Len(t, calls, 23, "one call per task, plus the throttled one")
	p, err := lim.Pauses(context.Background(), "test:")
	require.NoError(t, err)
	require.Empty(t, p, "the pause has ended")
}
