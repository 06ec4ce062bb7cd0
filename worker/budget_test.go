package worker

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testutil"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
)

func TestRetryBudgetSteps(t *testing.T) {
	t.Parallel()
	sched := RetryBudget{Schedule: []time.Duration{5 * time.Second, time.Minute}}
	long := RetryBudget{Schedule: []time.Duration{5 * time.Second, time.Minute}, MaxAttempts: 4}
	day := DefaultProviderRetry
	for _, c := range []struct {
		b        RetryBudget
		attempt  int
		age      time.Duration
		maxRetry int
		step     time.Duration // the wait after this failed attempt
		why      string        // "" while the budget allows a retry
	}{
		{sched, 1, 0, 100, 5 * time.Second, ""},
		{sched, 2, 5 * time.Second, 100, time.Minute, ""},
		{sched, 3, time.Minute, 100, 0, "the schedule's end"},
		{long, 3, time.Minute, 100, time.Minute, ""}, // the last wait repeats
		{long, 4, 2 * time.Minute, 100, 0, "max_attempts 4"},
		{sched, 1, 0, 1, 0, "the task's MaxRetry(1)"}, // MaxRetry(1): one failed attempt
		{sched, 1, 0, -1, 5 * time.Second, ""},        // MaxRetry unknown
		{day, 40, 23 * time.Hour, 100, 0, ""},
		{day, 41, 24 * time.Hour, 100, 0, "max_age 1d"},
		{day, 100, time.Hour, 100, 0, "the task's MaxRetry(100)"},
	} {
		why := c.b.spent(c.attempt, c.age, c.maxRetry)
		require.Equal(t, c.why, why, "%+v attempt %d", c.b, c.attempt)
		if why == "" {
			require.Equal(t, c.step, c.b.step(c.attempt, func(int64) int64 { return 0 }), "%+v attempt %d", c.b, c.attempt)
		}
	}
	// Jitter adds up to 10% of the step, never less than the step.
	require.Equal(t, 5*time.Second+500*time.Millisecond, sched.step(1, func(n int64) int64 { return n - 1 }))

	// capAge: the last retry comes at MaxAge, not past it; a wait longer
	// than what is left is cut, and past MaxAge it is 0.
	first := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	require.Equal(t, time.Hour, day.capAge(3*time.Hour, first, first.Add(23*time.Hour)))
	require.Equal(t, 3*time.Hour, day.capAge(3*time.Hour, first, first.Add(time.Hour)))
	require.Equal(t, time.Duration(0), day.capAge(3*time.Hour, first, first.Add(25*time.Hour)))

	require.Equal(t, "1d3h35m5s", formatAge(27*time.Hour+35*time.Minute+5*time.Second))
	require.Equal(t, "2d", formatAge(48*time.Hour))
	require.Equal(t, "45m0s", formatAge(45*time.Minute+200*time.Millisecond))
}

func TestRetryBudgetCheck(t *testing.T) {
	t.Parallel()
	require.NoError(t, DefaultWebhookRetry.Check())
	require.NoError(t, DefaultProviderRetry.Check())
	for b, want := range map[*RetryBudget]string{
		{}: "want a schedule, max_attempts or max_age",
		{Schedule: []time.Duration{time.Second, 0}}: "schedule[1]: 0s, want more than 0",
		{MaxAttempts: -1}:         "max_attempts: -1",
		{MaxAge: MaxRetryAge + 1}: "max_age: 720h0m0.000000001s, want more than 0 and at most 720h0m0s",
	} {
		require.ErrorContains(t, b.Check(), want)
	}
}

// sim runs a channel's handler the way asynq does, on a fake clock: each
// attempt's error is handed to IsFailure (which moves the retry count),
// the wait comes from the error, and the task is archived on SkipRetry or
// once its retry count has reached its MaxRetry.
type sim struct {
	t    *testing.T
	now  time.Time
	h    *handler
	w    *Worker
	meta taskMeta // of the attempt being made
	logs *syncBuffer
	lim  *throttle.Redis
}

// simTask is one task in a sim: its retry counts, when it is due, and
// what became of it.
type simTask struct {
	task  *asynq.Task
	meta  taskMeta
	due   time.Time
	waits []time.Duration
	err   error // the last attempt's; nil once delivered
	done  bool
}

// newSim builds ch's handler on a real Redis limiter; with may change ch.
func newSim(t *testing.T, ch Channel) *sim {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	s := &sim{t: t, now: time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC), logs: &syncBuffer{}}
	s.lim = throttle.NewRedis(rdb, throttle.Options{Prefix: "bt"})
	w, err := New(Options{Redis: rdb, Limiter: s.lim, Channels: []Channel{ch},
		Logger: slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	require.NoError(t, err)
	s.w = w
	s.h, err = w.handler(ch)
	require.NoError(t, err)
	s.h.now = func() time.Time { return s.now }
	s.h.jitter = func(int64) int64 { return 0 }
	s.h.meta = func(context.Context) taskMeta { return s.meta }
	return s
}

// run attempts task (ID id, MaxRetry maxRetry) until it is delivered or
// archived, moving the clock by each wait. It returns the waits and the
// last error (nil: delivered).
func (s *sim) run(task *asynq.Task, id string, maxRetry int) ([]time.Duration, error) {
	s.t.Helper()
	st := &simTask{task: task, meta: taskMeta{id: id, queue: "webhook", maxRetry: maxRetry}}
	s.runAll(st)
	return st.waits, st.err
}

// runAll runs tasks side by side, each attempt when it is due (the
// earliest first), until every one is delivered or archived.
func (s *sim) runAll(ts ...*simTask) {
	s.t.Helper()
	for _, st := range ts {
		st.due = s.now
	}
	for range 10000 {
		var next *simTask
		for _, st := range ts {
			if !st.done && (next == nil || st.due.Before(next.due)) {
				next = st
			}
		}
		if next == nil {
			return
		}
		s.now, s.meta = next.due, next.meta
		err := s.h.serve(context.Background(), next.task)
		next.err = err
		if err != nil {
			s.w.logError(context.Background(), next.task, err) // asynq's ErrorHandler
		}
		if err == nil || errors.Is(err, asynq.SkipRetry) || next.meta.retried >= next.meta.maxRetry {
			next.done = true
			continue
		}
		if IsFailure(err) {
			next.meta.retried++
		}
		var re *RetryError
		var te *ThrottledError
		switch {
		case errors.As(err, &re):
			next.waits = append(next.waits, re.Wait)
		case errors.As(err, &te):
			next.waits = append(next.waits, te.Wait)
		default:
			s.t.Fatalf("%s attempt %d: %v: neither a *RetryError nor a *ThrottledError", next.meta.id, next.meta.retried, err)
		}
		next.due = s.now.Add(next.waits[len(next.waits)-1])
	}
	s.t.Fatal("still trying after 10000 attempts")
}

// endpoint is a webhook receiver on loopback whose answer status(n) to the
// n-th request (from 1) the test chooses; it counts 2xx answers per
// webhook-id.
type endpoint struct {
	srv       *httptest.Server
	calls     atomic.Int64
	mu        sync.Mutex
	delivered map[string]int
}

func newEndpoint(t *testing.T, status func(n int64, h http.Header) int) *endpoint {
	e := &endpoint{delivered: map[string]int{}}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := status(e.calls.Add(1), w.Header())
		if code/100 == 2 {
			e.mu.Lock()
			e.delivered[r.Header.Get("webhook-id")]++
			e.mu.Unlock()
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// webhookChannel is the bundled webhook channel against e. Its host
// pause is off: a pause lasts real time in Redis, which the fake clock
// does not move (TestProviderThrottlePausesItsScopeInEveryWorker covers
// pauses).
func webhookChannel(s func() time.Time) Channel {
	secret := "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("k"), 32))
	c := &channels.Webhook{Secrets: func(string) ([]string, error) { return []string{secret}, nil }, Now: s,
		Egress: channels.Egress{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}}
	ch := WebhookChannel(c, nil)
	ch.PauseScopes = nil
	return ch
}

func webhookTask(t *testing.T, url, id string) *asynq.Task {
	t.Helper()
	task, err := tasks.NewWebhookDeliverTask(tasks.WebhookDeliver{URL: url, EventType: "invoice.paid",
		IdempotencyKey: id, Payload: json.RawMessage(`{"n":1}`)})
	require.NoError(t, err)
	return task
}

// An endpoint that always answers 503 (a provider throttle, host scope) is
// tried on the Standard Webhooks schedule, then archived with the reason,
// raising endpoint.failing and logging one WARN line.
func TestAlways503IsArchivedAtTheEndOfItsSchedule(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		retryAfter string
		waits      []time.Duration
	}{
		{"no Retry-After", "", DefaultWebhookRetry.Schedule},
		// A pause longer than the step wins; the schedule wins after.
		{"Retry-After 1h", "3600", []time.Duration{time.Hour, time.Hour, time.Hour, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEndpoint(t, func(_ int64, h http.Header) int {
				if c.retryAfter != "" {
					h.Set("Retry-After", c.retryAfter)
				}
				return http.StatusServiceUnavailable
			})
			var s *sim
			s = newSim(t, webhookChannel(func() time.Time { return s.now }))
			start := s.now
			waits, err := s.run(webhookTask(t, e.srv.URL+"/hook", "evt-1"), "evt-1", tasks.DefaultMaxRetry)

			require.Equal(t, c.waits, waits)
			require.EqualValues(t, 8, e.calls.Load(), "8 attempts, the first immediately")
			var be *BudgetSpentError
			require.ErrorAs(t, err, &be)
			require.ErrorIs(t, err, asynq.SkipRetry, "archived, never retried again")
			var total time.Duration
			for _, w := range c.waits {
				total += w
			}
			require.Equal(t, total, be.Age)
			require.Equal(t, start.Add(total), s.now)
			require.Equal(t, 7, s.meta.retried)
			require.Regexp(t, `^budget spent: 8 attempts over \dd\d+h\d+m\d+s, the schedule's end; last: webhook: throttled: HTTP 503`, err.Error())

			host := strings.TrimPrefix(e.srv.URL, "http://")
			evs, _, rerr := s.lim.Events(context.Background(), "0", 100, 0)
			require.NoError(t, rerr)
			var failing []throttle.Event
			for _, ev := range evs {
				if ev.Type == throttle.EventEndpointFailing {
					failing = append(failing, ev)
				}
			}
			require.Len(t, failing, 1)
			require.Equal(t, "webhook:endpoint:"+host, failing[0].Key)
			require.EqualValues(t, 503, failing[0].Code)
			require.Equal(t, err.Error(), failing[0].Reason)

			var warns []string
			for _, l := range strings.Split(s.logs.String(), "\n") {
				if strings.Contains(l, "level=WARN") {
					warns = append(warns, l)
				}
			}
			require.Len(t, warns, 1, "one WARN line: %q", warns)
			require.Contains(t, warns[0], "retry budget spent; archived")
			require.Contains(t, warns[0], "attempts=8")
			require.Contains(t, warns[0], "endpoint=webhook:endpoint:"+host)

			n, rerr := s.h.failures.rdb.Exists(context.Background(), s.h.failures.key(s.meta)).Result()
			require.NoError(t, rerr)
			require.Zero(t, n, "the first failure time is forgotten with the task")
		})
	}
}

// An endpoint that fails for its first 40 minutes and then recovers gets
// every event exactly once, each on its schedule's next step after the
// recovery.
func TestRecoveringEndpointGetsEverythingOnce(t *testing.T) {
	t.Parallel()
	var s *sim
	var recovered time.Time
	e := newEndpoint(t, func(int64, http.Header) int {
		if s.now.Before(recovered) {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	s = newSim(t, webhookChannel(func() time.Time { return s.now }))
	start := s.now
	recovered = start.Add(40 * time.Minute)
	var ts []*simTask
	for i := range 20 {
		id := fmt.Sprint("evt-", i)
		ts = append(ts, &simTask{task: webhookTask(t, e.srv.URL+"/hook", id), meta: taskMeta{id: id, queue: "webhook", maxRetry: tasks.DefaultMaxRetry}})
	}
	s.runAll(ts...)
	want := map[string]int{}
	for _, st := range ts {
		require.NoError(t, st.err, st.meta.id)
		// 503 at 0, 5s, 5m5s, 35m5s; delivered at 2h35m5s.
		require.Equal(t, DefaultWebhookRetry.Schedule[:4], st.waits, st.meta.id)
		want[st.meta.id] = 1
	}
	require.Equal(t, want, e.delivered, "every event delivered exactly once")
	require.EqualValues(t, 20*5, e.calls.Load())
	require.Equal(t, start.Add(2*time.Hour+35*time.Minute+5*time.Second), s.now)
}

// A transient failure (HTTP 500) follows the schedule too; without a
// schedule it backs off as asynq does, never past max_age, and is archived
// at the failure that reaches it.
func TestTransientFailureUsesTheBudget(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, func(int64, http.Header) int { return http.StatusInternalServerError })
	t.Run("schedule", func(t *testing.T) {
		var s *sim
		ch := webhookChannel(func() time.Time { return s.now })
		ch.Retry = RetryBudget{Schedule: []time.Duration{time.Second, time.Minute, time.Hour}}
		s = newSim(t, ch)
		waits, err := s.run(webhookTask(t, e.srv.URL+"/t", "evt-t"), "evt-t", tasks.DefaultMaxRetry)
		require.Equal(t, ch.Retry.Schedule, waits)
		require.ErrorContains(t, err, "budget spent: 4 attempts over 1h1m1s, the schedule's end; last: webhook: transient: HTTP 500")
	})
	t.Run("max age", func(t *testing.T) {
		var s *sim
		ch := webhookChannel(func() time.Time { return s.now })
		ch.Retry = RetryBudget{MaxAge: 6 * time.Hour}
		s = newSim(t, ch)
		waits, err := s.run(webhookTask(t, e.srv.URL+"/t", "evt-a"), "evt-a", tasks.DefaultMaxRetry)
		var total time.Duration
		for i, w := range waits[:len(waits)-1] {
			// asynq's default: n^4 + 15 s + up to 30(n+1) s after the n-th retry.
			n := time.Duration(i)
			require.GreaterOrEqual(t, w, (n*n*n*n+15)*time.Second, "wait %d", i)
			require.Less(t, w, (n*n*n*n+15+30*(n+1))*time.Second, "wait %d", i)
			total += w
		}
		require.Equal(t, 6*time.Hour, total+waits[len(waits)-1], "the last retry comes at max_age, not past it")
		require.ErrorContains(t, err, fmt.Sprintf("budget spent: %d attempts over 6h0m0s, max_age 6h0m0s", len(waits)+1))
	})
	t.Run("the task's MaxRetry", func(t *testing.T) {
		var s *sim
		s = newSim(t, webhookChannel(func() time.Time { return s.now }))
		waits, err := s.run(webhookTask(t, e.srv.URL+"/t", "evt-m"), "evt-m", 3)
		require.Len(t, waits, 2)
		require.ErrorContains(t, err, "budget spent: 3 attempts over 5m5s, the task's MaxRetry(3)")
	})
}

// Sluice's own limit blocks spend nothing: tasks enqueued with MaxRetry(0)
// with MaxRetry raised to 1 (tasks.FloorMaxRetry, as the producer does), blocked again and again by a 1-per-second window,
// are all delivered with a retry count of 0. A task a plain asynq client
// enqueued with MaxRetry(0) cannot be kept (asynq archives it on any error):
// it is archived with a reason that says so.
func TestSluiceBlocksNeverArchive(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	lim := throttle.NewRedis(rdb, throttle.Options{Prefix: "nb"})
	reg := prometheus.NewRegistry()
	delivered := make(chan string, 10)
	ch := Channel{Name: "test", TaskType: "test:send",
		Rules: []rules.Rule{{Key: "test:one", Limit: throttle.Limit{Name: "one", Algorithm: throttle.FixedWindow, Rate: throttle.PerSecond(2)}}},
		Prepare: func(b []byte) (Prepared, error) {
			var p testPayload
			if err := json.Unmarshal(b, &p); err != nil {
				return Prepared{}, err
			}
			return Prepared{Fields: map[string]string{"id": p.ID}, Send: func(ctx context.Context) (channels.Response, error) {
				delivered <- p.ID
				return channels.Response{Status: 200}, nil
			}}, nil
		}}
	w, err := New(Options{Redis: rdb, Limiter: lim, Channels: []Channel{ch}, Concurrency: 8, Metrics: NewMetrics(reg),
		Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Shutdown)

	client := asynq.NewClientFromRedisClient(rdb)
	var out []*asynq.TaskInfo
	for i := range 8 {
		// MaxRetry(0) raised to 1 (tasks.FloorMaxRetry), as producer.Client.Enqueue raises it.
		o := tasks.FloorMaxRetry([]asynq.Option{asynq.Queue("test"), asynq.MaxRetry(0), asynq.Retention(time.Hour)})
		info, err := client.Enqueue(asynq.NewTask("test:send", []byte(fmt.Sprintf(`{"id":"b%d"}`, i))), o...)
		require.NoError(t, err)
		require.Equal(t, tasks.MinMaxRetry, info.MaxRetry, "MaxRetry(0) is raised to 1")
		out = append(out, info)
	}
	got := map[string]bool{}
	for len(got) < 8 {
		select {
		case id := <-delivered:
			require.False(t, got[id], "%s delivered twice", id)
			got[id] = true
		case <-time.After(15 * time.Second):
			t.Fatalf("%d of 8 delivered", len(got))
		}
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	for _, o := range out {
		info, err := insp.GetTaskInfo("test", o.ID)
		require.NoError(t, err)
		require.Equal(t, 0, info.Retried, "%s: blocks spend nothing", o.ID)
	}
	// 8 sends dequeued together through a 2/s window: 6 + 4 + 2 blocks on
	// an idle host; a busy one that spreads the dequeues over the window's
	// seconds blocks fewer, but never none of 8 through 2/s (how many is
	// timing, logged).
	blocks := counter(t, reg, "sluice_throttled_total", "limit", "one")
	t.Logf("%v blocks of 8 sends through a 2/s window", blocks)
	require.Positive(t, blocks, "blocks")
	require.Zero(t, counter(t, reg, "sluice_tasks_total", "outcome", OutcomeBudgetSpent))

	// A plain client's MaxRetry(0), blocked by a pause of the channel:
	// archived at its first block, saying why.
	_, err = lim.Pause(context.Background(), throttle.PauseKey("test", ScopeChannel, ""), throttle.PauseOptions{Wait: 10 * time.Second})
	require.NoError(t, err)
	_, err = asynq.NewClientFromRedisClient(rdb).Enqueue(asynq.NewTask("test:send", []byte(`{"id":"plain"}`)),
		asynq.Queue("test"), asynq.TaskID("plain"), asynq.MaxRetry(0))
	require.NoError(t, err)
	var info *asynq.TaskInfo
	require.Eventually(t, func() bool {
		info, err = insp.GetTaskInfo("test", "plain")
		return err == nil && info.State == asynq.TaskStateArchived
	}, 10*time.Second, 20*time.Millisecond)
	require.Contains(t, info.LastErr, "enqueued with MaxRetry(0), retried 0: asynq archives a task whose retries are spent on any error")
}

// Provider throttles spend attempts through real asynq: a task whose
// provider keeps throttling it is archived by its budget, with asynq's
// retry count at the attempts made, and one that recovers is sent once.
func TestProviderThrottlesSpendTheBudgetInAsynq(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, func(p testPayload, call int) error {
		if p.ID == "always" || call <= 2 {
			return &channels.Error{Class: channels.Throttled, Provider: "webhook", HTTPStatus: 503, Scope: channels.ScopeSender}
		}
		return nil
	}, func(c *Channel) { c.Retry = RetryBudget{Schedule: []time.Duration{time.Second, time.Second}} })
	h.enqueue("always", "", asynq.MaxRetry(tasks.DefaultMaxRetry))
	h.enqueue("recovers", "", asynq.MaxRetry(tasks.DefaultMaxRetry))
	info := h.waitState("always", asynq.TaskStateArchived, 15*time.Second)
	require.Equal(t, 2, info.Retried)
	require.Contains(t, info.LastErr, "budget spent: 3 attempts over")
	require.Contains(t, info.LastErr, "webhook: throttled: HTTP 503")

	r := h.waitSent(15 * time.Second)
	require.Equal(t, "recovers", r.id)
	require.Equal(t, 2, r.retried, "sent at its third and last attempt")
	h.waitState("recovers", asynq.TaskStateCompleted, 5*time.Second)
	select {
	case r := <-h.sent:
		t.Fatalf("%s sent twice", r.id)
	default:
	}
}

var counter = testutil.Counter
