package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/control"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
)

// batchWorker runs a worker with one channel, "sms" (task type test:send),
// limited to 1 send in 2s per payload "to" and, for the sends whose step is
// "slow", 1 an hour in all; its Send answers by the step: "bad" refused for
// good (Twilio 21211), "flaky" a transient failure (HTTP 502), others
// accepted. It returns the sends accepted, by ID, as they come.
func batchWorker(t *testing.T) (*Worker, redis.UniversalClient, <-chan string) {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	lim := throttle.NewRedis(rdb, throttle.Options{Prefix: "wb"})
	sent := make(chan string, 100)
	ch := Channel{Name: "sms", TaskType: "test:send",
		Rules: []rules.Rule{gcraRule("recipient", "sms:to:{to}", throttle.Rate{Limit: 1, Period: 2 * time.Second}),
			gcraRule("hourly", "sms:hourly:{hourly}", throttle.Rate{Limit: 1, Period: time.Hour})},
		Retry: RetryBudget{Schedule: []time.Duration{time.Minute}},
		Prepare: func(b []byte) (Prepared, error) {
			var p testPayload
			if err := json.Unmarshal(b, &p); err != nil || p.ID == "" {
				return Prepared{}, errors.New("id: missing")
			}
			hourly := p.ID // a key of its own: never holds it back
			if p.Step == "slow" {
				hourly = "slow"
			}
			return Prepared{Fields: map[string]string{"to": p.To, "hourly": hourly}, Send: func(context.Context) (channels.Response, error) {
				switch p.Step {
				case "bad":
					return channels.Response{}, &channels.Error{Class: channels.Permanent, Provider: "twilio", HTTPStatus: 400, Code: 21211, Message: "Invalid 'To' Phone Number"}
				case "flaky":
					return channels.Response{}, &channels.Error{Class: channels.Transient, Provider: "twilio", HTTPStatus: 502, Message: "Bad Gateway"}
				}
				sent <- p.ID
				return channels.Response{ProviderID: "SM" + p.ID, Status: 201}, nil
			}}, nil
		}}
	w, err := New(Options{Redis: rdb, Limiter: lim, Channels: []Channel{ch}, Concurrency: 4,
		Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: time.Second})
	require.NoError(t, err)
	return w, rdb, sent
}

func batchOf(t *testing.T, sends ...testPayload) []byte {
	t.Helper()
	bs := make([]tasks.BatchSend, len(sends))
	for i, p := range sends {
		b, err := json.Marshal(p)
		require.NoError(t, err)
		bs[i] = tasks.BatchSend{ID: "id-" + p.ID, Type: "test:send", Payload: b, MaxRetry: 5}
	}
	payload, err := tasks.EncodeBatch(bs)
	require.NoError(t, err)
	return payload
}

// Each send of a batch goes as its own task would: sent (one that Sluice's
// limits hold back for a moment waits in its batch), or given a task of its
// own with its ID when it must come back later (a Sluice limit's block of
// an hour, a failure the budget retries, with its retry counted) or is
// given up (archived at once, with the reason). The batch completes.
func TestBatchRunsEachSendAsItsOwnTask(t *testing.T) {
	w, rdb, sent := batchWorker(t)
	require.NoError(t, w.Start())
	t.Cleanup(w.Shutdown)
	payload := batchOf(t,
		testPayload{ID: "a", To: "+12025550101"},
		testPayload{ID: "b", To: "+12025550102"},
		testPayload{ID: "c", To: "+12025550101"}, // a's recipient: one of the two waits 2s, in the batch
		testPayload{ID: "d", To: "+12025550103", Step: "bad"},
		testPayload{ID: "e", To: "+12025550104", Step: "flaky"},
		testPayload{ID: "f", To: "+12025550105", Step: "slow"},
		testPayload{ID: "g", To: "+12025550106", Step: "slow"}, // f's hourly limit: one of the two waits an hour
	)
	_, err := asynq.NewClientFromRedisClient(rdb).Enqueue(asynq.NewTask(tasks.TypeBatch, payload), asynq.Queue("sms"), asynq.TaskID("batch-1"))
	require.NoError(t, err)

	got := map[string]bool{}
	for range 4 {
		got[recv(t, sent)] = true
	}
	require.True(t, got["a"] && got["b"] && got["c"], "a, b and c sent by the batch: %v", got)
	held := "g" // the one of f and g that came second waits an hour
	if got["g"] {
		held = "f"
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	require.Eventually(t, func() bool {
		_, err := insp.GetTaskInfo("sms", "batch-1")
		return errors.Is(err, asynq.ErrTaskNotFound)
	}, 10*time.Second, 10*time.Millisecond, "the batch completes")
	for _, id := range []string{"a", "b", "c", "f", "g"} {
		if id == held {
			continue
		}
		_, err := insp.GetTaskInfo("sms", "id-"+id)
		require.ErrorIs(t, err, asynq.ErrTaskNotFound, "%s went from the batch: no task of its own", id)
	}
	hl, err := insp.GetTaskInfo("sms", "id-"+held)
	require.NoError(t, err)
	require.Equal(t, asynq.TaskStateScheduled, hl.State, "%s waits for the hourly limit", held)
	require.Greater(t, time.Until(hl.NextProcessAt), 50*time.Minute, "%s is due when its limit frees, about an hour on", held)
	require.Empty(t, hl.Headers[tasks.HeaderRetried], "a Sluice limit's block spends no retry")
	require.Equal(t, 5, hl.MaxRetry)
	var d *asynq.TaskInfo
	require.Eventually(t, func() bool {
		d, _ = insp.GetTaskInfo("sms", "id-d")
		return d != nil && d.State == asynq.TaskStateArchived
	}, 10*time.Second, 10*time.Millisecond, "d's own task is archived at once")
	require.Contains(t, d.LastErr, "Invalid 'To' Phone Number", "d is archived with its batch's reason")
	e, err := insp.GetTaskInfo("sms", "id-e")
	require.NoError(t, err)
	require.Equal(t, asynq.TaskStateScheduled, e.State, "e waits for its retry")
	require.Equal(t, "1", e.Headers[tasks.HeaderRetried], "e's failure is counted")
	wait := time.Until(e.NextProcessAt)
	require.True(t, wait > 40*time.Second && wait <= 67*time.Second, "e comes back after its budget's first wait (1m and up to 10%% jitter, less the time since): in %v", wait)
}

// A send's own task counts the attempts it made in its batch: with one
// failure there and a budget of one retry, its next failure is its last.
func TestOwnTaskCountsTheBatchsAttempts(t *testing.T) {
	w, rdb, _ := batchWorker(t)
	require.NoError(t, w.Start())
	t.Cleanup(w.Shutdown)
	b, err := json.Marshal(testPayload{ID: "e", To: "+12025550104", Step: "flaky"})
	require.NoError(t, err)
	_, err = asynq.NewClientFromRedisClient(rdb).Enqueue(asynq.NewTaskWithHeaders("test:send", b, map[string]string{tasks.HeaderRetried: "1"}),
		asynq.Queue("sms"), asynq.TaskID("id-e"), asynq.MaxRetry(5))
	require.NoError(t, err)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	var e *asynq.TaskInfo
	require.Eventually(t, func() bool {
		e, _ = insp.GetTaskInfo("sms", "id-e")
		return e != nil && e.State == asynq.TaskStateArchived
	}, 10*time.Second, 10*time.Millisecond, "e: %+v", e)
	require.Contains(t, e.LastErr, "2 attempts", "the attempt in the batch counts")
}

// A batch that runs again (its worker died after giving some sends their
// own task, or asynq put it back without counting a retry: a shutdown, a
// lost lease) skips those: a send runs in one place at a time. asynq's
// retry count tells the first; the batch's run mark the second, and a
// batch that completes deletes its mark.
func TestBatchThatRunsAgainSkipsSendsWithTheirOwnTask(t *testing.T) {
	for _, tc := range []struct {
		name    string
		retried int  // asynq's count
		mark    bool // the first run's mark is set
	}{{"retried", 1, false}, {"put back", 0, true}} {
		t.Run(tc.name, func(t *testing.T) {
			w, rdb, sent := batchWorker(t)
			ctx := context.Background()
			own, err := json.Marshal(testPayload{ID: "x", To: "+12025550105"})
			require.NoError(t, err)
			_, err = asynq.NewClientFromRedisClient(rdb).Enqueue(asynq.NewTask("test:send", own), asynq.Queue("sms"), asynq.TaskID("id-x"),
				asynq.ProcessIn(time.Hour))
			require.NoError(t, err)
			mark := control.BatchRunKey("wb", "sms", "batch-2")
			if tc.mark {
				require.NoError(t, rdb.Set(ctx, mark, 1, time.Hour).Err())
			}
			payload := batchOf(t, testPayload{ID: "x", To: "+12025550105"}, testPayload{ID: "y", To: "+12025550106"})
			bctx := withMember(ctx, taskMeta{id: "batch-2", queue: "sms", retried: tc.retried, maxRetry: 25}) // as asynq starts it
			require.NoError(t, w.serveBatch(bctx, asynq.NewTask(tasks.TypeBatch, payload)))
			require.Equal(t, "y", recv(t, sent))
			select {
			case id := <-sent:
				t.Fatalf("%s sent: x runs from its own task only", id)
			default:
			}
			n, err := rdb.Exists(ctx, mark).Result()
			require.NoError(t, err)
			require.Zero(t, n, "a completed batch's mark is deleted")
		})
	}
}

// A batch's sends run at once, not one after the other: each is held until
// its own slot, so a batch of a second's sends takes about that second.
func TestBatchSendsRunTogether(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	lim := throttle.NewRedis(rdb, throttle.Options{Prefix: "wt"})
	var mu sync.Mutex
	inFlight, most := 0, 0
	release := make(chan struct{})
	ch := Channel{Name: "sms", TaskType: "test:send",
		Prepare: func(b []byte) (Prepared, error) {
			return Prepared{Send: func(context.Context) (channels.Response, error) {
				mu.Lock()
				inFlight++
				most = max(most, inFlight)
				if inFlight == 3 {
					close(release)
				}
				mu.Unlock()
				<-release
				return channels.Response{ProviderID: "SM", Status: 201}, nil
			}}, nil
		}}
	w, err := New(Options{Redis: rdb, Limiter: lim, Channels: []Channel{ch}, Concurrency: 3,
		Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: time.Second})
	require.NoError(t, err)
	payload := batchOf(t, testPayload{ID: "1"}, testPayload{ID: "2"}, testPayload{ID: "3"})
	require.NoError(t, w.serveBatch(context.Background(), asynq.NewTask(tasks.TypeBatch, payload)))
	require.Equal(t, 3, most, "the three sends were in flight together")
}

// A worker runs no more batch sends at once than its concurrency: the
// others wait for a place.
func TestBatchSendsTakeTheWorkersConcurrency(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	lim := throttle.NewRedis(rdb, throttle.Options{Prefix: "wc"})
	var mu sync.Mutex
	inFlight, most, done := 0, 0, 0
	ch := Channel{Name: "sms", TaskType: "test:send",
		Prepare: func(b []byte) (Prepared, error) {
			return Prepared{Send: func(context.Context) (channels.Response, error) {
				mu.Lock()
				inFlight++
				most = max(most, inFlight)
				mu.Unlock()
				runtime.Gosched()
				mu.Lock()
				inFlight--
				done++
				mu.Unlock()
				return channels.Response{ProviderID: "SM", Status: 201}, nil
			}}, nil
		}}
	w, err := New(Options{Redis: rdb, Limiter: lim, Channels: []Channel{ch}, Concurrency: 2,
		Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: time.Second})
	require.NoError(t, err)
	var sends []testPayload
	for i := range 20 {
		sends = append(sends, testPayload{ID: fmt.Sprint(i)})
	}
	require.NoError(t, w.serveBatch(context.Background(), asynq.NewTask(tasks.TypeBatch, batchOf(t, sends...))))
	require.Equal(t, 20, done)
	require.LessOrEqual(t, most, 2, "at most Concurrency sends at once")
}

// A batch whose payload does not decode is archived with the reason.
func TestMalformedBatchIsArchived(t *testing.T) {
	w, _, _ := batchWorker(t)
	err := w.serveBatch(context.Background(), asynq.NewTask(tasks.TypeBatch, []byte(`{"v":1,"sends":[{"id":"","type":"test:send","payload":{}}]}`)))
	require.ErrorIs(t, err, asynq.SkipRetry)
	require.True(t, strings.Contains(err.Error(), "sends[0]: id: required"), err.Error())
}

// A batch starts its next send once the one before has its slot; while it
// is behind its pace (the slot it was given was due at once), two of its
// sends ask at once, never three; once a slot lies ahead, one again.
func TestBatchBehindItsPaceAsksTwoAtOnce(t *testing.T) {
	var c chain
	newMember := func() *member { return &member{admitted: make(chan struct{})} }
	// ctx ends at once: started returns true only when it did not have to
	// wait for a send still asking.
	ended, cancel := context.WithCancel(context.Background())
	cancel()

	m1 := newMember()
	require.False(t, c.started(ended, m1), "the first send asks alone: the next waits for its slot")
	m1.admit(true) // due at once: the batch is behind
	m2 := newMember()
	require.True(t, c.started(ended, m2), "behind its pace: the next send starts while this one asks")
	require.Equal(t, behindDepth, c.depth)
	m3 := newMember()
	require.False(t, c.started(ended, m3), "two asking: the third waits")
	require.Equal(t, []*member{m2, m3}, c.asking)

	m2.admit(false) // slots ahead: one at a time again
	m3.admit(false)
	m4 := newMember()
	require.False(t, c.started(ended, m4), "ahead of its pace: the next waits for this one's slot")
	require.Equal(t, 1, c.depth)
	require.Equal(t, []*member{m4}, c.asking)

	// A wait ends when the send asking is admitted.
	go m4.admit(true)
	bound, stop := context.WithTimeout(context.Background(), time.Minute) // (a hang bound)
	defer stop()
	m5 := newMember()
	require.True(t, c.started(bound, m5), "m4 admitted behind its pace: m5 asks beside it")
	require.Equal(t, behindDepth, c.depth)
	require.Equal(t, []*member{m5}, c.asking)
}

// dueReserver grants each call a firm slot due at once (At == Now), or
// one 40ms ahead with ahead, or a prefetched one with local.
type dueReserver struct {
	throttle.Limiter
	ahead, local bool
}

func (d dueReserver) Reserve(context.Context, throttle.ReserveOptions, ...throttle.Request) (throttle.Reservation, error) {
	now := time.Now()
	r := throttle.Reservation{Decision: throttle.Decision{Allowed: true, Now: now}, Firm: true, At: now, Local: d.local}
	if d.ahead {
		r.At = now.Add(40 * time.Millisecond)
	}
	return r, nil
}

// A batch's send tells its batch whether it is behind its pace: a slot due
// at once is; one ahead, or a prefetched one, is not.
func TestReservedTellsTheBatchWhetherItIsBehind(t *testing.T) {
	reqs := []throttle.Request{{Key: "t:k:1", Limit: throttle.Limit{Name: "k", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(80), Burst: 1}}}
	for _, tc := range []struct {
		name   string
		res    dueReserver
		behind bool
	}{
		{"due at once", dueReserver{}, true},
		{"ahead", dueReserver{ahead: true}, false},
		{"prefetched", dueReserver{local: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &handler{w: &Worker{}, ch: Channel{Name: "t", Hold: 2 * time.Second}, rules: &rules.Set{}, now: time.Now}
			mb := &member{admitted: make(chan struct{})}
			ctx := context.WithValue(context.Background(), reservedKey{}, mb.admit)
			_, err := h.reserve(ctx, tc.res, Prepared{}, reqs, &attempt{})
			require.NoError(t, err)
			select {
			case <-mb.admitted:
			default:
				t.Fatal("the batch was not told the slot is firm")
			}
			require.Equal(t, tc.behind, mb.behind)
		})
	}
}
