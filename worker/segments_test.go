package worker

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/internal/emulator"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/testutil"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
)

// TestSMSSegmentsAgainstStrictTwilio: on a 1 MPS sender of the strict
// Twilio emulator, which counts MPS in message segments, sends of 2, 1
// and 3 segments with the sender rule's `cost: segments` are all accepted
// once, and each leaves the worker after the previous one's segments are
// out. The departures are timed in the worker's HTTP client, every attempt
// included: a send that leaves late on a busy host can reach the strict
// emulator closer than its cap to the next one and draw a 20429 (logged,
// not a pacing fault), but no attempt leaves a whole segment's second
// early, as one whose cost were not its segments would.
func TestSMSSegmentsAgainstStrictTwilio(t *testing.T) {
	t.Parallel()
	emu, err := emulator.Start(emulator.Options{}) // 1 MPS per From, sliding 1 s window
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })
	srv := redistest.Start(t)
	rdb := srv.Client(t)

	sender := rules.Rule{Limit: throttle.Limit{Name: "sender", Algorithm: throttle.GCRA, Rate: throttle.PerSecond(1), Burst: 1},
		Key: "sms:sender:{sender}", CostField: "segments"}
	dep := &departures{next: http.DefaultTransport}
	hc := channels.NewHTTPClient()
	hc.Transport = dep
	ch := SMSChannel(&channels.Twilio{BaseURL: emu.TwilioURL(), AccountSID: emulator.DefaultTwilioAccountSID,
		AuthToken: emulator.DefaultTwilioAuthToken, HTTP: hc}, []rules.Rule{sender})
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
		testutil.Accepted(t, emu, emulator.ChannelSMS, i+1, 15*time.Second)
	}
	st := emu.Stats()[emulator.ChannelSMS]
	require.Equal(t, 3, st.Accepted)
	require.Equal(t, 3, st.Unique)
	t.Logf("provider throttle responses: %d %v (0 on an idle host)", st.Throttled, st.ThrottledByCode)
	recs := emu.Records()
	for i := 1; i < len(recs); i++ {
		prev := tasks.CountSegments(bodies[i-1]).Count
		require.GreaterOrEqual(t, recs[i].At.Sub(recs[i-1].At), time.Duration(prev)*time.Second,
			"send %d came before the %d segments of send %d were out", i, prev, i-1)
	}
	at, segs := dep.get()
	require.Len(t, at, 3+st.Throttled, "attempts: the sends and those the provider throttled")
	require.NotContains(t, segs, 0, "every attempt's Body read")
	for i := 1; i < len(at); i++ {
		gap, want := at[i].Sub(at[i-1]), time.Duration(segs[i-1])*time.Second
		t.Logf("attempt %d left %v after attempt %d of %d segment(s)", i, gap.Round(time.Millisecond), i-1, segs[i-1])
		// Half a second is far more than a busy host delays a send, and
		// less than the second a send's cost left out would save.
		require.GreaterOrEqual(t, gap, want-500*time.Millisecond, "attempt %d left before the %d segment(s) of attempt %d were out", i, segs[i-1], i-1)
	}
}

// departures is an http.RoundTripper that notes when each request leaves
// and how many segments its Body form field is.
type departures struct {
	next http.RoundTripper
	mu   sync.Mutex
	at   []time.Time
	segs []int
}

func (d *departures) RoundTrip(req *http.Request) (*http.Response, error) {
	now := time.Now()
	segs := 0
	if req.GetBody != nil {
		if b, err := req.GetBody(); err == nil {
			raw, _ := io.ReadAll(b)
			_ = b.Close()
			if form, err := url.ParseQuery(string(raw)); err == nil {
				segs = tasks.CountSegments(form.Get("Body")).Count
			}
		}
	}
	d.mu.Lock()
	d.at, d.segs = append(d.at, now), append(d.segs, segs)
	d.mu.Unlock()
	return d.next.RoundTrip(req)
}

func (d *departures) get() ([]time.Time, []int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.at), slices.Clone(d.segs)
}
