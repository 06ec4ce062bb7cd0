package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/throttle"
)

// A refused credential pauses the channel in every worker after one
// provider call, archives nothing, and the first probe that succeeds
// resumes the channel and delivers every waiting task once.
func TestRefusedCredentialsPauseTheChannelUntilAProbeSucceeds(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	client := asynq.NewClientFromRedisClient(rdb)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	lim := throttle.NewRedis(rdb, throttle.Options{Prefix: "wa"})
	var bad atomic.Bool
	bad.Store(true)
	refused := &channels.Error{Class: channels.Unauthorized, Provider: "test", HTTPStatus: 401, Code: 190,
		Scope: channels.ScopeChannel, Message: "Error validating access token: Session has expired"}
	var (
		mu        sync.Mutex
		refusedAt time.Time   // the first refused send
		probedAt  []time.Time // each probe
		sendCalls int
		probes    []string // "refused" or "accepted", in order
		probeFor  []string // the fields the probe was given: the refused send's
	)
	delivered := make(chan string, 100)
	ch := Channel{Name: "test", TaskType: "test:send", ProbeEvery: 100 * time.Millisecond, ProbeMax: 200 * time.Millisecond,
		Prepare: func(b []byte) (Prepared, error) {
			var p testPayload
			if err := json.Unmarshal(b, &p); err != nil {
				return Prepared{}, err
			}
			return Prepared{Fields: map[string]string{"id": p.ID, "to": p.To}, Send: func(ctx context.Context) (channels.Response, error) {
				mu.Lock()
				sendCalls++
				if refusedAt.IsZero() {
					refusedAt = time.Now()
				}
				mu.Unlock()
				if bad.Load() {
					return channels.Response{}, refused
				}
				delivered <- p.ID
				return channels.Response{Status: 200}, nil
			}}, nil
		},
		Probe: func(_ context.Context, f map[string]string) error {
			mu.Lock()
			defer mu.Unlock()
			probeFor = append(probeFor, f["to"])
			probedAt = append(probedAt, time.Now())
			if bad.Load() {
				probes = append(probes, "refused")
				return refused
			}
			probes = append(probes, "accepted")
			return nil
		}}
	for range 2 {
		w, err := New(Options{Redis: rdb, Limiter: lim, Channels: []Channel{ch}, Concurrency: 8,
			Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: time.Second})
		require.NoError(t, err)
		w.probeTick = 10 * time.Millisecond
		require.NoError(t, w.Start())
		t.Cleanup(w.Shutdown)
	}
	enqueue := func(id string) {
		_, err := client.Enqueue(asynq.NewTask("test:send", []byte(fmt.Sprintf(`{"id":%q,"to":"+1202555%04s"}`, id, id))),
			asynq.Queue("test"), asynq.TaskID(id), asynq.MaxRetry(3), asynq.Retention(time.Hour))
		require.NoError(t, err)
	}
	enqueue("0")
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return sendCalls == 1 }, 5*time.Second, 5*time.Millisecond)
	const n = 50
	for i := 1; i < n; i++ {
		enqueue(fmt.Sprint(i))
	}
	// Every task waits for the pause, and probes are refused meanwhile.
	require.Eventually(t, func() bool {
		qi, err := insp.GetQueueInfo("test")
		mu.Lock()
		defer mu.Unlock()
		return err == nil && qi.Retry == n && len(probes) >= 2
	}, 10*time.Second, 10*time.Millisecond)
	mu.Lock()
	require.Equal(t, 1, sendCalls, "one provider call while the credentials are refused")
	require.NotContains(t, probes, "accepted")
	require.Equal(t, "+12025550000", probeFor[0], "the probe gets the refused send's fields")
	// The first turn to probe comes ProbeEvery after the refusal, the next
	// twice that after the first turn (a tolerance of 5ms for the clocks of
	// Redis and Go). A probe runs a little after its turn is claimed, later
	// on a busy host, so two probes can be closer than their turns: each
	// is measured from the refusal.
	require.GreaterOrEqual(t, probedAt[0].Sub(refusedAt), 95*time.Millisecond, "first probe")
	require.GreaterOrEqual(t, probedAt[1].Sub(refusedAt), 295*time.Millisecond, "second probe")
	t.Logf("probes %v and %v after the refusal", probedAt[0].Sub(refusedAt).Round(time.Millisecond), probedAt[1].Sub(refusedAt).Round(time.Millisecond))
	mu.Unlock()
	p, err := lim.PauseOf(context.Background(), throttle.PauseKey("test", ScopeChannel, ""))
	require.NoError(t, err)
	require.NotNil(t, p, "the channel is paused")
	require.Equal(t, 190, p.Code)
	require.Contains(t, p.Reason, "credentials refused")
	require.Greater(t, time.Until(p.Until), time.Hour, "paused until a probe or an operator ends it, not for a backoff")
	qi, err := insp.GetQueueInfo("test")
	require.NoError(t, err)
	require.Zero(t, qi.Archived)
	ts, err := insp.ListRetryTasks("test")
	require.NoError(t, err)
	for _, ti := range ts {
		require.Zero(t, ti.Retried, "waiting for a pause uses up no retry (task %s)", ti.ID)
		// RunWaiting finds a pause's tasks by " on KEY: " in their last error.
		require.Contains(t, ti.LastErr, " on test:paused:channel: ", "task %s", ti.ID)
	}

	bad.Store(false) // the credentials are fixed
	got := map[string]bool{}
	for len(got) < n {
		select {
		case id := <-delivered:
			require.False(t, got[id], "%s delivered twice", id)
			got[id] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d delivered after the credentials were fixed", len(got), n)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, n+1, sendCalls, "each task sent once, plus the refused call")
	require.Equal(t, "accepted", probes[len(probes)-1])
	require.Equal(t, 1, countOf(probes, "accepted"), "one probe resumed the channel; no more probes after it")
	pz, err := lim.Pauses(context.Background(), "test:")
	require.NoError(t, err)
	require.Empty(t, pz, "the channel's pause has ended")
}

func countOf(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}

// A refusal that comes back right after a probe ended the pause (the probe
// passes, sends are refused: a token that may read the number but not send
// from it) spends the task's budget, so the loop ends with the task
// archived and its reason, instead of going on forever.
func TestRefusalAfterASuccessfulProbeSpendsTheBudget(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	client := asynq.NewClientFromRedisClient(rdb)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	lim := throttle.NewRedis(rdb, throttle.Options{Prefix: "wl"})
	var sends, probes atomic.Int32
	ch := Channel{Name: "test", TaskType: "test:send", ProbeEvery: 20 * time.Millisecond, ProbeMax: 80 * time.Millisecond,
		Prepare: func(b []byte) (Prepared, error) {
			return Prepared{Fields: map[string]string{"to": "+12025550100"}, Send: func(context.Context) (channels.Response, error) {
				sends.Add(1)
				return channels.Response{}, &channels.Error{Class: channels.Unauthorized, Provider: "test", HTTPStatus: 401,
					Scope: channels.ScopeChannel, Message: "token may not send from this number"}
			}}, nil
		},
		Probe: func(context.Context, map[string]string) error { probes.Add(1); return nil }}
	w, err := New(Options{Redis: rdb, Limiter: lim, Channels: []Channel{ch}, Concurrency: 2,
		Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: time.Second})
	require.NoError(t, err)
	w.probeTick = 5 * time.Millisecond
	require.NoError(t, w.Start())
	t.Cleanup(w.Shutdown)
	_, err = client.Enqueue(asynq.NewTask("test:send", []byte(`{}`)), asynq.Queue("test"), asynq.TaskID("t"),
		asynq.MaxRetry(3), asynq.Retention(time.Hour))
	require.NoError(t, err)
	var info *asynq.TaskInfo
	require.Eventually(t, func() bool {
		info, err = insp.GetTaskInfo("test", "t")
		return err == nil && info.State == asynq.TaskStateArchived
	}, 20*time.Second, 10*time.Millisecond, "the task is archived once its budget is spent")
	require.Contains(t, info.LastErr, "budget spent")
	require.Contains(t, info.LastErr, "token may not send from this number")
	require.LessOrEqual(t, sends.Load(), int32(4), "refused sends: the first, then one per repeat until the budget's 3 attempts")
	t.Logf("%d refused sends, %d probes, then archived: %s", sends.Load(), probes.Load(), info.LastErr)
}
