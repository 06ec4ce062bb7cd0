package producer_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testutil"
	"github.com/sluice-dev/sluice/producer"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

// The sends waiting for a paused number are planned for the pause's end
// and come back once each, at the number's pace: enqueued with the
// producer they are planned at enqueue and dequeued once; enqueued by a
// plain asynq client they are planned at their first dequeue, and dequeued
// once more. None is sent back without a place (outcome "throttled").
func TestPausedNumberResumesOncePerSend(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	lim := throttle.NewRedis(rdb, throttle.Options{Prefix: "pp"})
	reg := prometheus.NewRegistry()
	var mu sync.Mutex
	sentAt := map[string][]time.Time{}
	delivered := make(chan string, 1000)
	ch := worker.Channel{Name: "whatsapp", TaskType: tasks.TypeWhatsAppSend,
		PauseScopes: map[string]string{channels.ScopeSender: "{phone_number_id}"},
		Rules: []rules.Rule{{Key: "whatsapp:number:{phone_number_id}",
			Limit: throttle.Limit{Name: "throughput", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(100), Burst: 1}}},
		Prepare: func(b []byte) (worker.Prepared, error) {
			p, err := tasks.DecodeWhatsAppSend(b)
			if err != nil {
				return worker.Prepared{}, err
			}
			return worker.Prepared{Fields: p.Fields(), Send: func(context.Context) (channels.Response, error) {
				mu.Lock()
				sentAt[p.IdempotencyKey] = append(sentAt[p.IdempotencyKey], time.Now())
				mu.Unlock()
				delivered <- p.IdempotencyKey
				return channels.Response{Status: 200}, nil
			}}, nil
		}}
	ctx := context.Background()
	pause := throttle.PauseKey("whatsapp", channels.ScopeSender, "1065")
	p, err := lim.Pause(ctx, pause, throttle.PauseOptions{Wait: 3 * time.Second})
	require.NoError(t, err)

	const each = 150
	task := func(key string) *asynq.Task {
		tk, err := tasks.NewWhatsAppSendTask(tasks.WhatsAppSend{PhoneNumberID: "1065", To: "+12025550101", Text: "hi", IdempotencyKey: key})
		require.NoError(t, err)
		return tk
	}
	enq, err := producer.New(producer.Options{Redis: rdb, Limiter: lim, Channels: []worker.Channel{ch}})
	require.NoError(t, err)
	var ts []*asynq.Task
	for i := range each {
		ts = append(ts, task(fmt.Sprint("e", i)))
	}
	out, err := enq.Enqueue(ctx, ts)
	require.NoError(t, err)
	resume := p.Until.Truncate(time.Second)
	if resume.Before(p.Until) {
		resume = resume.Add(time.Second)
	}
	for _, o := range out {
		require.NoError(t, o.Err)
		require.False(t, o.ETA.Before(resume), "%s planned at %v, before the pause's end %v", o.ID, o.ETA, resume)
	}
	client := asynq.NewClientFromRedisClient(rdb)
	for i := range each {
		_, err := client.Enqueue(task(fmt.Sprint("c", i)), asynq.Queue(ch.Name), asynq.TaskID(fmt.Sprint("c", i)))
		require.NoError(t, err)
	}

	w, err := worker.New(worker.Options{Redis: rdb, Limiter: lim, Channels: []worker.Channel{ch}, Concurrency: 50, Metrics: worker.NewMetrics(reg),
		Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Shutdown)

	for got := 0; got < 2*each; got++ {
		select {
		case <-delivered:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d delivered", got, 2*each)
		}
	}
	mu.Lock()
	for k, ats := range sentAt {
		require.Len(t, ats, 1, "%s sent %d times", k, len(ats))
		require.False(t, ats[0].Before(p.Until.Add(-50*time.Millisecond)), "%s sent at %v, within the pause (until %v)", k, ats[0], p.Until)
	}
	mu.Unlock()
	// A send signals delivered before its outcome is counted: wait for the
	// last one's count.
	require.Eventually(t, func() bool {
		return counter(t, reg, "sluice_tasks_total", "outcome", worker.OutcomeSent) >= float64(2*each)
	}, 10*time.Second, time.Millisecond, "every delivered send counted")
	sent := counter(t, reg, "sluice_tasks_total", "outcome", worker.OutcomeSent)
	planned := counter(t, reg, "sluice_tasks_total", "outcome", worker.OutcomePlanned)
	bounced := counter(t, reg, "sluice_tasks_total", "outcome", worker.OutcomeThrottled)
	t.Logf("%v sent, %v planned, %v sent back without a place", sent, planned, bounced)
	require.Equal(t, float64(2*each), sent)
	require.Zero(t, bounced, "a paused send is planned, not sent back to come again when the pause ends")
	// Each plain send is planned once, at its first dequeue; the
	// producer's are not planned again (5% leeway for a busy host, where a
	// send may come back too late for its slot).
	require.LessOrEqual(t, planned, 1.05*each, "dequeues: %v for %d sends", sent+planned, 2*each)
}

var counter = testutil.Counter
