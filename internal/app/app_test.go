package app

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
)

func TestLimiterOptionsFollowTheEventsSection(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		yaml string
		want throttle.EventOptions
	}{
		{"defaults", "", throttle.EventOptions{MaxLen: 10000, WarnAt: 0.1}},
		{"cleanup batch", "cleanup: {batch: 7}", throttle.EventOptions{MaxLen: 10000, WarnAt: 0.1}},
		{"set", "events: {max_len: 50, warn_at: 0.5}", throttle.EventOptions{MaxLen: 50, WarnAt: 0.5}},
		{"warnings off", "events: {warn_at: 0}", throttle.EventOptions{MaxLen: 10000, WarnAt: -1}},
		{"disabled", "events: {enabled: false}", throttle.EventOptions{Disabled: true, MaxLen: 10000, WarnAt: 0.1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.Parse("sluice.yaml", []byte(c.yaml))
			require.NoError(t, err)
			got := LimiterOptions(cfg, nil)
			if diff := cmp.Diff(c.want, got.Events); diff != "" {
				t.Errorf("Events (-want +got):\n%s", diff)
			}
			require.Equal(t, "sluice", got.Prefix)
			require.Equal(t, int64(cfg.Cleanup.Batch), got.ScanBatch, "cleanup.batch pages the key walks")
			require.Equal(t, OverrideRefresh, got.OverrideRefresh)
			require.LessOrEqual(t, got.OverrideRefresh, time.Second/2, "a change is honoured within 1s")
		})
	}
}

// A blocked consume writes a limits.exceeded event unless events are
// disabled; a warn_at of 0.5 warns when half the capacity is used.
func TestNewLimiterWritesConfiguredEvents(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	lim := throttle.Limit{Name: "daily", Algorithm: throttle.FixedWindow, Rate: throttle.PerDay(2)}

	consume3 := func(l *throttle.Redis, key string) {
		t.Helper()
		for i, allowed := range []bool{true, true, false} {
			d, err := l.Consume(ctx, throttle.Request{Key: key, Limit: lim})
			require.NoError(t, err)
			require.Equal(t, allowed, d.Allowed, "consume %d", i+1)
		}
	}

	on, err := config.Parse("on.yaml", []byte("redis: {key_prefix: on}\nevents: {warn_at: 0.5}"))
	require.NoError(t, err)
	l := NewLimiter(on, rdb, nil)
	consume3(l, "sms:daily:+12025550101")
	evs, _, err := l.Events(ctx, "0", 10, 0)
	require.NoError(t, err)
	var types []string
	for _, e := range evs {
		require.Equal(t, "sms:daily:+12025550101", e.Key)
		types = append(types, e.Type)
	}
	require.Equal(t, []string{throttle.EventWarning, throttle.EventExceeded}, types)

	off, err := config.Parse("off.yaml", []byte("redis: {key_prefix: off}\nevents: {enabled: false}"))
	require.NoError(t, err)
	l = NewLimiter(off, rdb, nil)
	consume3(l, "sms:daily:+12025550101")
	evs, _, err = l.Events(ctx, "0", 10, 0)
	require.NoError(t, err)
	require.Empty(t, evs, "events disabled")
}

// A campaign's tasks hold places in the number's backlog; an operator deletes
// some and archives others; the cleanup job's sweep releases exactly those
// places once they are overdue, and leaves the tasks that still exist.
// With spread_by the number's backlog is in its own scope, which the sweep
// maps back to the channel's queue.
func TestSweepReleasesDeletedAndArchivedTasks(t *testing.T) {
	t.Parallel()
	for spread, key := range map[string]string{"": "whatsapp:number:1065", "phone_number_id": "whatsapp/1065:number:1065"} {
		t.Run("spread_by "+spread, func(t *testing.T) {
			t.Parallel()
			sweepDeletedAndArchived(t, spread, key)
		})
	}
}

func sweepDeletedAndArchived(t *testing.T, spread, key string) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	cfg := config.Default()
	cfg.Channels["whatsapp"].SpreadBy = spread
	now := time.Now()
	clock := func() time.Time { return now }
	lim := NewLimiter(cfg, rdb, clock)
	enq, err := NewProducer(cfg, rdb, lim, nil)
	require.NoError(t, err)
	var ts []*asynq.Task
	for i := range 200 {
		task, err := tasks.NewWhatsAppSendTask(tasks.WhatsAppSend{PhoneNumberID: "1065", To: fmt.Sprintf("+1202555%04d", 1000+i),
			Text: "hi", IdempotencyKey: fmt.Sprintf("k%d", i)})
		require.NoError(t, err)
		ts = append(ts, task)
	}
	out, err := enq.Enqueue(ctx, ts)
	require.NoError(t, err)
	for _, r := range out {
		require.NoError(t, r.Err)
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	require.NoError(t, insp.DeleteTask("whatsapp", "k1"))
	require.NoError(t, insp.ArchiveTask("whatsapp", "k2"))
	require.NoError(t, insp.DeleteTask("whatsapp", "k150"))

	gone := taskGone(cfg, lim)
	n, err := lim.SweepBacklogs(ctx, backlogGrace, gone)
	require.NoError(t, err)
	require.Zero(t, n, "nothing is overdue yet")
	now = now.Add(time.Hour)
	n, err = lim.SweepBacklogs(ctx, backlogGrace, gone)
	require.NoError(t, err)
	require.Equal(t, 3, n, "the places of the 3 deleted and archived tasks on their number (a pair keeps no backlog beside it)")
	b, err := lim.Backlog(ctx, key)
	require.NoError(t, err)
	require.EqualValues(t, 197, b.Planned)
}

func TestRegistryExposesAsynqQueueSeries(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	c := asynq.NewClientFromRedisClient(rdb)
	for range 3 {
		if _, err := c.Enqueue(asynq.NewTask("sms:send", []byte(`{}`)), asynq.Queue("sms")); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := NewRegistry(rdb).Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "asynq_queue_size" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["queue"] == "sms" && m.GetGauge().GetValue() == 3 {
				return
			}
		}
	}
	t.Fatalf("no asynq_queue_size{queue=\"sms\"} 3 among %d families", len(mfs))
}

// `sluice send` and `sluice enqueue` plan past a paused number, as the
// workers reserve: the sends are not dequeued during the pause only to be
// planned again for its end.
func TestProducerPlansPastAPausedNumber(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	cfg := config.Default()
	lim := NewLimiter(cfg, rdb, nil)
	enq, err := NewProducer(cfg, rdb, lim, nil)
	require.NoError(t, err)
	p, err := lim.Pause(ctx, "whatsapp:paused:sender:1065", throttle.PauseOptions{Wait: time.Minute, Operator: true})
	require.NoError(t, err)
	task, err := tasks.NewWhatsAppSendTask(tasks.WhatsAppSend{PhoneNumberID: "1065", To: "+12025551000", Text: "hi"})
	require.NoError(t, err)
	other, err := tasks.NewWhatsAppSendTask(tasks.WhatsAppSend{PhoneNumberID: "1066", To: "+12025551000", Text: "hi"})
	require.NoError(t, err)
	out, err := enq.Enqueue(ctx, []*asynq.Task{task, other})
	require.NoError(t, err)
	require.NoError(t, out[0].Err)
	require.NoError(t, out[1].Err)
	require.False(t, out[0].ETA.Before(p.Until.Truncate(time.Second)), "ETA %v: want at the pause's end %v or later", out[0].ETA, p.Until)
	require.True(t, out[1].ETA.Before(p.Since.Add(2*time.Second)), "another number is not paused: ETA %v", out[1].ETA)
}

// Every queue of a channel, its queue and its groups, takes the channel's
// priority (asynq skips empty queues, so a share of the priority among the
// groups would starve a channel with one busy sender).
func TestQueueWeightsGiveEveryGroupTheChannelsPriority(t *testing.T) {
	cfg := config.Default()
	for _, name := range []string{"webhook", "http"} {
		cfg.Channels[name].Enabled = false
	}
	cfg.Channels["whatsapp"].Priority, cfg.Channels["sms"].Priority = 6, 3
	require.Equal(t, map[string]int{"whatsapp": 6, "sms": 3}, queueWeights(cfg))

	cfg.Channels["whatsapp"].SpreadBy, cfg.Channels["whatsapp"].QueueGroups = "phone_number_id", 3
	require.Equal(t, map[string]int{"whatsapp": 6, "whatsapp.g0": 6, "whatsapp.g1": 6, "whatsapp.g2": 6, "sms": 3}, queueWeights(cfg))

	cfg.Channels["whatsapp"].SpreadBy = "" // queue_groups without spread_by: one queue
	require.Equal(t, map[string]int{"whatsapp": 6, "sms": 3}, queueWeights(cfg))

	cfg.Channels["sms"].Queue = "whatsapp" // a shared plain queue: the priorities add up
	require.Equal(t, map[string]int{"whatsapp": 9}, queueWeights(cfg))
}
