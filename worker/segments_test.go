package worker

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/internal/emulator"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
)

// TestSMSSegmentsAgainstStrictTwilio: on a 1 MPS sender of the strict
// Twilio emulator, which counts MPS in message segments, sends of 2, 1
// and 3 segments with the sender rule's `cost: segments` are all accepted,
// none throttled (20429), each after the previous one's segments are out.
func TestSMSSegmentsAgainstStrictTwilio(t *testing.T) {
	t.Parallel()
	emu, err := emulator.Start(emulator.Options{}) // 1 MPS per From, sliding 1 s window
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })
	srv := redistest.Start(t)
	rdb := srv.Client(t)

	sender := rules.Rule{Limit: throttle.Limit{Name: "sender", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1), Burst: 1},
		Key: "sms:sender:{sender}", CostField: "segments"}
	ch := SMSChannel(&channels.Twilio{BaseURL: emu.TwilioURL(), AccountSID: emulator.DefaultTwilioAccountSID,
		AuthToken: emulator.DefaultTwilioAuthToken}, []rules.Rule{sender})
	w, err := New(Options{Redis: rdb, Limiter: throttle.NewRedis(rdb, throttle.Options{Prefix: "ws"}), Channels: []Channel{ch},
		Concurrency: 4, ShutdownTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Shutdown)

	bodies := []string{strings.Repeat("a", 300), "short", strings.Repeat("é", 307)} // 2, 1, 3 segments
	client := asynq.NewClientFromRedisClient(rdb)
	for i, body := range bodies {
		task, err := tasks.NewSMSSendTask(tasks.SMSSend{From: "+14155550101", To: "+14155552345", Body: body, IdempotencyKey: string(rune('a' + i))})
		require.NoError(t, err)
		_, err = client.EnqueueContext(context.Background(), task)
		require.NoError(t, err)
		// One at a time, so the order on the sender is the order here.
		deadline := time.Now().Add(15 * time.Second)
		for emu.Stats()[emulator.ChannelSMS].Accepted < i+1 {
			require.True(t, time.Now().Before(deadline), "send %d not accepted within 15s: %+v", i, emu.Stats()[emulator.ChannelSMS])
			time.Sleep(20 * time.Millisecond)
		}
	}
	st := emu.Stats()[emulator.ChannelSMS]
	require.Equal(t, 3, st.Accepted)
	require.Zero(t, st.Throttled, "no 20429: the sender's segments were paced (%v)", st.ThrottledByCode)
	recs := emu.Records()
	for i := 1; i < len(recs); i++ {
		prev := tasks.CountSegments(bodies[i-1]).Count
		require.GreaterOrEqual(t, recs[i].At.Sub(recs[i-1].At), time.Duration(prev)*time.Second,
			"send %d came before the %d segments of send %d were out", i, prev, i-1)
	}
}
