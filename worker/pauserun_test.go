package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/internal/emulator"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testutil"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
)

// TestAcceptedSendEndsThePauseRun: a Twilio 20429 pauses the account for
// the backoff (1s plus jitter); throttled again with no accepted send
// between, the pause doubles, up to 30 s; one accepted send after a pause
// ends the run, and the next 20429 pauses for the backoff again (in a row
// 1), not for minutes.
func TestAcceptedSendEndsThePauseRun(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	clock := testutil.NewClock(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	lim := throttle.NewRedis(rdb, throttle.Options{Prefix: "pr", Clock: clock.Now, OverrideRefresh: -1})
	throttled := &channels.Error{Class: channels.Throttled, Provider: channels.ProviderTwilio, HTTPStatus: 429, Code: 20429,
		Scope: channels.ScopeAccount, Growth: 2, MaxWait: 30 * time.Second, Message: "Too many concurrent requests"}
	ch := Channel{Name: "sms", TaskType: "test:send", PauseScopes: map[string]string{channels.ScopeAccount: "{account}"},
		Prepare: func(b []byte) (Prepared, error) {
			var p testPayload
			if err := json.Unmarshal(b, &p); err != nil {
				return Prepared{}, err
			}
			return Prepared{Fields: map[string]string{"account": "AC1", "to": p.To}, Send: func(context.Context) (channels.Response, error) {
				if p.Step == "throttle" {
					return channels.Response{Status: 429}, throttled
				}
				return channels.Response{Status: 201, ProviderID: "SM1"}, nil
			}}, nil
		}}
	w, err := New(Options{Redis: rdb, Limiter: lim, Channels: []Channel{ch}, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	h := w.handlers["sms"]
	h.now = clock.Now
	ctx := context.Background()
	key := throttle.PauseKey("sms", channels.ScopeAccount, "AC1")
	send := func(step string) error {
		return h.process(ctx, asynq.NewTask("test:send", []byte(`{"id":"x","to":"+12025550123","step":"`+step+`"}`)), &attempt{})
	}
	// throttleOnce sends a task that the provider throttles and returns the
	// pause it set; the clock then moves past its end.
	throttleOnce := func() throttle.Paused {
		t.Helper()
		var te *ThrottledError
		require.ErrorAs(t, send("throttle"), &te)
		p, err := lim.PauseOf(ctx, key)
		require.NoError(t, err)
		require.NotNil(t, p, "the 20429 paused the account")
		clock.Advance(p.Until.Sub(clock.Now()) + 100*time.Millisecond)
		return *p
	}
	backoff := func(p throttle.Paused) time.Duration { return p.Until.Sub(p.Since) }

	p := throttleOnce()
	require.Equal(t, 1, p.InARow)
	base := backoff(p)
	require.True(t, base >= time.Second && base <= 1200*time.Millisecond, "the first pause is the backoff plus jitter, got %v", base)
	p = throttleOnce()
	require.Equal(t, 2, p.InARow, "throttled again with nothing accepted between: in a row")
	require.True(t, backoff(p) >= 2*time.Second && backoff(p) <= 2400*time.Millisecond, "and doubled (jitter drawn again), got %v", backoff(p))

	require.NoError(t, send("accept"))
	p = throttleOnce()
	require.Equal(t, 1, p.InARow, "a send accepted after the pause ended the run")
	base = backoff(p)
	require.True(t, base >= time.Second && base <= 1200*time.Millisecond, "the pause after an accepted send is the backoff again, got %v", base)

	// Nothing gets through: the pause grows to 30 s and stays there.
	for want := 2; want <= 7; want++ {
		p = throttleOnce()
		require.Equal(t, want, p.InARow)
	}
	require.Equal(t, 30*time.Second, backoff(p), "a 20429's pause grows to at most 30 s")
	require.NoError(t, send("accept"))
	require.Equal(t, 1, throttleOnce().InARow)
}

// TestUncodedWhatsApp429PausesTheNumberInEveryWorker: a WhatsApp 429 with
// no error code and Retry-After: 5 (the strict emulator's bare 429) pauses
// the number, whatsapp:paused:sender:<id>, for 5 s in Redis: another
// Worker sharing it sends nothing to that number until the pause ends,
// and another number goes on.
func TestUncodedWhatsApp429PausesTheNumberInEveryWorker(t *testing.T) {
	t.Parallel()
	emu, err := emulator.Start(emulator.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })
	rdb := redistest.Start(t).Client(t)
	clock := testutil.NewClock(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	lim := throttle.NewRedis(rdb, throttle.Options{Prefix: "pw", Clock: clock.Now, OverrideRefresh: -1})
	wa := &channels.WhatsApp{BaseURL: emu.WhatsAppURL(), Token: emulator.DefaultWhatsAppToken}
	var hs []*handler
	for range 2 {
		w, err := New(Options{Redis: rdb, Limiter: lim, Channels: []Channel{WhatsAppChannel(wa, nil)}, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		h := w.handlers["whatsapp"]
		h.now = clock.Now
		hs = append(hs, h)
	}
	const number, other = "106540352242922", "106540352242923"
	ctx := context.Background()
	send := func(h *handler, from, to string) error {
		task, err := tasks.NewWhatsAppSendTask(tasks.WhatsAppSend{PhoneNumberID: from, To: to, Text: "hi", IdempotencyKey: from + ":" + to[1:]})
		require.NoError(t, err)
		return h.process(ctx, task, &attempt{})
	}
	emu.FaultWith(emulator.ChannelWhatsApp, number, emulator.FaultOptions{Code: emulator.Bare429, RetryAfter: 5 * time.Second})

	var te *ThrottledError
	require.ErrorAs(t, send(hs[0], number, "+12025550101"), &te)
	key := throttle.PauseKey("whatsapp", channels.ScopeSender, number)
	require.Equal(t, ProviderLimit, te.Limit)
	require.Equal(t, key, te.Key, "the uncoded 429 paused the number")
	p, err := lim.PauseOf(ctx, key)
	require.NoError(t, err)
	require.NotNil(t, p)
	require.Equal(t, 5*time.Second, p.Until.Sub(p.Since), "for its Retry-After")
	require.Equal(t, 0, p.Code)

	// The other worker: blocked by the pause, without a request.
	require.ErrorAs(t, send(hs[1], number, "+12025550102"), &te)
	require.Equal(t, throttle.PauseName, te.Limit)
	require.Equal(t, key, te.Key)
	require.Equal(t, 5*time.Second, te.Wait)
	require.NoError(t, send(hs[1], other, "+12025550102"), "another number is not paused")
	st := emu.Stats()[emulator.ChannelWhatsApp]
	require.Equal(t, 1, st.Accepted, "only the other number's send reached the provider")
	require.Equal(t, map[string]int{"429": 1}, st.ThrottledByCode)

	clock.Advance(5 * time.Second)
	require.NoError(t, send(hs[1], number, "+12025550102"), "the pause has ended")
	require.Equal(t, 2, emu.Stats()[emulator.ChannelWhatsApp].Accepted)
}
