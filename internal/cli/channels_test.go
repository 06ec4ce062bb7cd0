package cli

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/worker"
)

// TestChannelsPauseStatusResume: an operator pauses the WhatsApp channel; a
// worker's send waits for the pause without reaching the provider; status
// shows the pause and the waiting task; resume ends it and runs the task.
func TestChannelsPauseStatusResume(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	sent := make(chan string, 4)
	cfg := config.Default()
	ch := worker.Channel{Name: "whatsapp", TaskType: tasks.TypeWhatsAppSend, Rules: cfg.Channels["whatsapp"].Rules(),
		PauseScopes: worker.WhatsAppPauseScopes,
		Prepare: func(b []byte) (worker.Prepared, error) {
			p, err := tasks.DecodeWhatsAppSend(b)
			if err != nil {
				return worker.Prepared{}, err
			}
			return worker.Prepared{Fields: p.Fields(), Send: func(context.Context) (channels.Response, error) {
				sent <- p.To
				return channels.Response{Status: 200, ProviderID: "wamid.1"}, nil
			}}, nil
		}}
	w, err := worker.New(worker.Options{Redis: rdb, Limiter: app.NewLimiter(cfg, rdb, nil), Channels: []worker.Channel{ch},
		Concurrency: 2, Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Shutdown)

	r := run(t, "--redis", srv.URL(), "channels", "pause", "whatsapp", "--for", "1h", "--reason", "token rotation")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "channel whatsapp paused until ")

	task, err := tasks.NewWhatsAppSendTask(tasks.WhatsAppSend{PhoneNumberID: "106540352242922", To: "+12025550100", Text: "hi"}, asynq.Queue("whatsapp"))
	require.NoError(t, err)
	client := asynq.NewClientFromRedisClient(rdb)
	_, err = client.Enqueue(task)
	require.NoError(t, err)

	// The send waits for the pause: it is dequeued once and waits in the
	// retry set, and the provider is not called.
	var st []channelStatus
	require.Eventually(t, func() bool {
		r = run(t, "--redis", srv.URL(), "channels", "status", "whatsapp", "--json")
		st = nil
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &st) == nil && len(st) == 1 && st[0].Retry == 1
	}, 10*time.Second, 50*time.Millisecond)
	require.Len(t, st[0].Pauses, 1)
	require.Equal(t, "whatsapp:paused:channel", st[0].Pauses[0].Key)
	require.Equal(t, "token rotation", st[0].Pauses[0].Reason)
	require.Greater(t, time.UnixMilli(st[0].Pauses[0].Until), time.Now().Add(59*time.Minute))
	require.Empty(t, sent, "a paused channel's send reached the provider")

	r = run(t, "--redis", srv.URL(), "channels", "resume", "whatsapp")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "channel whatsapp resumed: 1 pause(s) ended, 1 waiting task(s) run now")
	select {
	case to := <-sent:
		require.Equal(t, "+12025550100", to)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting task was not sent after resume")
	}
	r = run(t, "--redis", srv.URL(), "channels", "status")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^whatsapp\s+whatsapp\s+running\s`, r.stdout)
}

func TestChannelsPauseUntilResumedStopsTheQueue(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	task, err := tasks.NewSMSSendTask(tasks.SMSSend{From: "+12025550100", To: "+12025550101", Body: "hi"}, asynq.Queue("sms"))
	require.NoError(t, err)
	_, err = asynq.NewClientFromRedisClient(rdb).Enqueue(task)
	require.NoError(t, err)
	r := run(t, "--redis", srv.URL(), "channels", "pause", "sms")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "channel sms paused until resumed")
	insp := asynq.NewInspectorFromRedisClient(rdb)
	qi, err := insp.GetQueueInfo("sms")
	require.NoError(t, err)
	require.True(t, qi.Paused, "asynq does not dequeue the channel's queue")
	r = run(t, "--redis", srv.URL(), "channels", "status", "sms")
	require.Regexp(t, `(?m)^sms\s+sms\s+paused\s`, r.stdout)
	require.Contains(t, r.stdout, "sms:paused:channel paused by an operator until resumed: paused by an operator")
	r = run(t, "--redis", srv.URL(), "channels", "resume", "sms")
	require.Equal(t, 0, r.code, r.stderr)
	qi, err = insp.GetQueueInfo("sms")
	require.NoError(t, err)
	require.False(t, qi.Paused)
	r = run(t, "--redis", srv.URL(), "channels", "pause", "fax")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, `channel "fax": not configured`)
}

// An operator's pause with --for leaves the queue running, but the channel
// is paused: status says so, counts no throttles in a row, and the event is
// operator.paused (not provider.paused), which `events tail --type` takes.
func TestChannelsPauseForIsShownAsAnOperatorsPause(t *testing.T) {
	srv := redistest.Start(t)
	r := run(t, "--redis", srv.URL(), "channels", "pause", "sms", "--for", "1h", "--reason", "carrier maintenance")
	require.Equal(t, 0, r.code, r.stderr)

	r = run(t, "--redis", srv.URL(), "channels", "status", "sms")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^sms\s+sms\s+paused\s`, r.stdout)
	require.Regexp(t, `sms:paused:channel paused by an operator until \S+ \(in (1h0m0s|59m5\ds)\): carrier maintenance`, r.stdout)
	require.NotContains(t, r.stdout, "in a row")

	r = run(t, "--redis", srv.URL(), "channels", "status", "sms", "--json")
	var st []channelStatus
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Len(t, st[0].Pauses, 1)
	require.Equal(t, 0, st[0].Pauses[0].InARow)

	r = run(t, "--redis", srv.URL(), "events", "tail", "--from-start", "--count", "1", "--type", "operator.paused")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `^\S+ operator.paused sms:paused:channel until=\S+ reason="carrier maintenance"\n$`, r.stdout)
	r = run(t, "--redis", srv.URL(), "events", "tail", "--from-start", "--count", "1", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `"type":"operator.paused"`)
}

// With queue groups, `enqueue` puts a send in its sender's group, `channels
// pause` (until resumed) stops the channel's queue and every group,
// `status` counts the groups' tasks with the queue's, and `resume` starts
// them all again.
func TestChannelsCoverTheQueueGroups(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cfg := writeFile(t, "sluice.yaml", "channels:\n  sms:\n    spread_by: sender\n    queue_groups: 4\n")
	group := tasks.GroupQueue("sms", 4, "+12025550100")
	r := run(t, "--config", cfg, "enqueue", "sms", "--from", "+12025550100", "--to", "+12025550123", "--body", "hi", "--key", "g-1", "--redis", srv.URL())
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "queue="+group)
	insp := asynq.NewInspectorFromRedisClient(srv.Client(t))
	_, err := insp.GetTaskInfo(group, "g-1")
	require.NoError(t, err)
	// and one a plain asynq client put in the channel's own queue
	plain, err := tasks.NewSMSSendTask(tasks.SMSSend{From: "+12025550100", To: "+12025550124", Body: "hi"}, asynq.Queue("sms"))
	require.NoError(t, err)
	_, err = asynq.NewClientFromRedisClient(srv.Client(t)).Enqueue(plain)
	require.NoError(t, err)

	r = run(t, "--config", cfg, "--redis", srv.URL(), "channels", "pause", "sms")
	require.Equal(t, 0, r.code, r.stderr)
	for _, q := range tasks.GroupQueues("sms", 4) {
		paused, err := srv.Client(t).Exists(context.Background(), "asynq:{"+q+"}:paused").Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, paused, "%s is paused", q)
	}
	r = run(t, "--config", cfg, "--redis", srv.URL(), "channels", "status", "sms", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var st []channelStatus
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Len(t, st, 1)
	require.Equal(t, 4, st[0].QueueGroups)
	require.True(t, st[0].QueuePaused)
	require.Equal(t, 2, st[0].Pending+st[0].Scheduled, "the group's task is counted with the queue's")
	r = run(t, "--config", cfg, "--redis", srv.URL(), "channels", "status", "sms")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^sms\s+sms \(\+4 groups\)\s+paused\s`, r.stdout)

	// One group running again (a pause cut short): not shown as paused.
	require.NoError(t, insp.UnpauseQueue(group))
	r = run(t, "--config", cfg, "--redis", srv.URL(), "channels", "status", "sms", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	st = nil
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.False(t, st[0].QueuePaused)
	require.Equal(t, 1, st[0].QueuesPaused, "of the two queues that exist (the plain one, paused, and the group)")

	r = run(t, "--config", cfg, "--redis", srv.URL(), "channels", "resume", "sms")
	require.Equal(t, 0, r.code, r.stderr)
	for _, q := range tasks.GroupQueues("sms", 4) {
		paused, err := srv.Client(t).Exists(context.Background(), "asynq:{"+q+"}:paused").Result()
		require.NoError(t, err)
		require.Zero(t, paused, "%s is resumed", q)
	}
}
