package coalesce

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// The batcher's goroutine ends after its idle time: no test leaves one.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A lone call is served at once, alone; the calls that arrive while a
// batch is served go together in the next, in their order, at most `most`
// a batch.
func TestCallsThatArriveMeanwhileGoTogether(t *testing.T) {
	var (
		mu      sync.Mutex
		batches [][]int
	)
	first := make(chan struct{})
	release := make(chan struct{})
	served := make(chan struct{}, 100)
	b := New(4, 10*time.Millisecond, func(batch []int) {
		mu.Lock()
		batches = append(batches, append([]int(nil), batch...))
		n := len(batches)
		mu.Unlock()
		if n == 1 {
			close(first)
			<-release // the first batch is in flight while the others arrive
		}
		for range batch {
			served <- struct{}{}
		}
	})
	ctx := context.Background()
	require.NoError(t, b.Add(ctx, 0))
	<-first
	for i := 1; i <= 4; i++ {
		require.NoError(t, b.Add(ctx, i)) // the queue holds 4
	}
	// A fifth waits for room; its context ends first: not queued.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, b.Add(cctx, 99), context.DeadlineExceeded)
	close(release)
	for range 5 {
		<-served
	}
	require.NoError(t, b.Add(ctx, 5))
	<-served
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, [][]int{{0}, {1, 2, 3, 4}, {5}}, batches)
}

// With a linger, a busy Batcher serves at most one batch per linger: the
// calls that arrive soon after a batch began wait and go together, while
// a call after a quiet spell goes at once. A batch that fills up goes
// without waiting out the linger.
func TestLingerGathersTheCallsOfABusyBatcher(t *testing.T) {
	for _, tc := range []struct {
		name   string
		most   int
		linger time.Duration
	}{
		// (long enough that the three Adds below land within it on a busy host)
		{"gathers", 8, 2 * time.Second},
		// (a full batch must not wait the hour)
		{"full goes at once", 3, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			batches := make(chan []int, 10)
			b := New(tc.most, 10*time.Millisecond, func(batch []int) { batches <- append([]int(nil), batch...) })
			b.SetLinger(tc.linger)
			ctx := context.Background()
			require.NoError(t, b.Add(ctx, 0))
			require.Equal(t, []int{0}, <-batches, "a call after a quiet spell goes at once, alone")
			for i := 1; i <= 3; i++ {
				require.NoError(t, b.Add(ctx, i))
			}
			select {
			case got := <-batches:
				require.Equal(t, []int{1, 2, 3}, got, "the calls within the linger go together")
			case <-time.After(15 * time.Second): // (a failure guard: the linger of "gathers" is 2 s)
				t.Fatal("the gathered batch was never served")
			}
		})
	}
}
