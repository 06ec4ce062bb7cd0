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
