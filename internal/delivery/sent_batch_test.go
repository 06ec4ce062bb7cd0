package delivery_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/delivery"
)

// Many RecordSent calls at once share script calls (sent_batch.go), and
// each send's record is what it would be alone: counted once (also a send
// recorded twice), a status the provider reported
// before applied, a send without a provider id recorded without an index.
func TestRecordSentCallsAtOnce(t *testing.T) {
	t.Parallel()
	s, _, rdb := newStore(t)
	ctx := context.Background()
	const n = 300
	for i := range n {
		if i%3 == 1 {
			// Its callback came first.
			_, err := s.Update(ctx, "whatsapp", fmt.Sprintf("wamid.%d", i), delivery.Status{State: delivery.StateDelivered, At: t0.Add(time.Second)})
			require.NoError(t, err)
		}
	}
	calls := func() int64 {
		st, err := rdb.Info(ctx, "commandstats").Result()
		require.NoError(t, err)
		var c int64
		for _, name := range []string{"evalsha", "eval"} {
			var v int64
			if i := strings.Index(st, "cmdstat_"+name+":calls="); i >= 0 {
				_, _ = fmt.Sscanf(st[i+len("cmdstat_"+name+":calls="):], "%d", &v)
			}
			c += v
		}
		return c
	}
	// The script is loaded (a first call's NOSCRIPT and EVAL are not
	// counted), and every caller waits for one signal.
	require.NoError(t, s.RecordSent(ctx, delivery.Sent{TaskID: "warm", Queue: "whatsapp", Channel: "whatsapp", Status: "sent", At: t0}))
	before := calls()
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	start := make(chan struct{})
	for i := range n {
		r := delivery.Sent{TaskID: fmt.Sprint("task-", i), Queue: "whatsapp", Channel: "whatsapp", Tenant: "acme", Campaign: "bulk",
			Status: "sent", At: t0}
		if i%3 != 0 {
			r.ProviderID = fmt.Sprintf("wamid.%d", i)
		}
		times := 1
		if i%10 == 0 {
			times = 2 // the worker wrote it again after a timeout
		}
		for range times {
			wg.Go(func() {
				<-start
				errs <- s.RecordSent(ctx, r)
			})
		}
	}
	close(start)
	wg.Wait()
	close(errs)
	recorded := 0
	for err := range errs {
		require.NoError(t, err)
		recorded++
	}
	scripts := calls() - before
	t.Logf("%d RecordSent calls in %d script calls", recorded, scripts)
	// One script call a send without the coalescing; a lone call goes at
	// once, so how many share one depends on the host, but with every
	// caller released at once, far fewer calls than sends.
	require.LessOrEqual(t, scripts, int64(recorded/2), "RecordSent calls made at once share script calls")

	p, err := s.Progress(ctx, "acme", "bulk")
	require.NoError(t, err)
	require.Equal(t, delivery.Progress{Sent: n, Delivered: n / 3}, p, "each send counted once")
	for i := range n {
		got, err := s.Get(ctx, fmt.Sprint("task-", i))
		require.NoError(t, err)
		want := delivery.StateSent
		if i%3 == 1 {
			want = delivery.StateDelivered
		}
		require.Equal(t, want, got.State, "task-%d", i)
		if i%3 != 0 {
			require.Equal(t, fmt.Sprintf("wamid.%d", i), got.ProviderID)
			u, err := s.Update(ctx, "whatsapp", got.ProviderID, delivery.Status{State: delivery.StateRead})
			require.NoError(t, err)
			require.True(t, u.Found, "the index names task-%d", i)
		}
	}
}
