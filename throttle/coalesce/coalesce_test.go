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

// With a linger, a busy Batcher (its last batch held more than one call)
// serves at most one batch per linger: the calls that arrive soon after a
// batch began wait and go together. A batch that fills up goes without
// waiting out the linger, and a caller that makes one call at a time,
// waiting for each answer, never waits.
func TestLingerGathersTheCallsOfABusyBatcher(t *testing.T) {
	for _, tc := range []struct {
		name   string
		most   int
		linger time.Duration
	}{
		// (long enough that the Adds below land within it on a busy host)
		{"gathers", 8, 2 * time.Second},
		// (a full batch must not wait the hour)
		{"full goes at once", 3, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, batches := busyBatcher(t, tc.most, tc.linger, nil)
			ctx := context.Background()
			for i := 4; i <= 6; i++ {
				require.NoError(t, b.Add(ctx, i))
			}
			require.Equal(t, []int{4, 5, 6}, nextBatch(t, batches), "after a busy batch, the calls within the linger go together")
		})
	}
	t.Run("one call at a time", func(t *testing.T) {
		batches := make(chan []int, 10)
		b := New(8, 10*time.Millisecond, func(batch []int) { batches <- append([]int(nil), batch...) })
		b.SetLinger(time.Hour)
		for i := range 3 {
			require.NoError(t, b.Add(context.Background(), i))
			require.Equal(t, []int{i}, nextBatch(t, batches), "a lone caller's call goes at once")
		}
	})
}

// SetDue cuts a busy Batcher's linger short: a batch waits for company no
// later than its calls' earliest due, and a call due now (the zero time)
// goes at once with the calls queued beside it.
func TestDueCutsTheLingerShort(t *testing.T) {
	far := time.Now().Add(2 * time.Hour)
	var mu sync.Mutex
	dues := map[int]time.Time{0: far, 1: far, 2: far, 3: {}, 4: far, 5: {}}
	b, batches := busyBatcher(t, 8, time.Hour, func(i int) time.Time {
		mu.Lock()
		defer mu.Unlock()
		return dues[i]
	})
	next := func() []int { t.Helper(); return nextBatch(t, batches) }
	ctx := context.Background()
	// Busy now: 4 would wait the hour, but 5 is due at once and takes it along.
	require.NoError(t, b.Add(ctx, 4))
	require.NoError(t, b.Add(ctx, 5))
	require.Equal(t, []int{4, 5}, next())
	// A call due in 20 ms goes by its due, not after the hour.
	mu.Lock()
	dues[6] = time.Now().Add(20 * time.Millisecond)
	mu.Unlock()
	require.NoError(t, b.Add(ctx, 6))
	require.Equal(t, []int{6}, next())
}

// nextBatch is the next batch served. Its guard is a failure guard, not a
// timing assertion: the batch is served within it, or the Batcher held it
// for an hour's linger.
func nextBatch(t *testing.T, batches chan []int) []int {
	t.Helper()
	const guard = 15 * time.Second
	select {
	case got := <-batches:
		return got
	case <-time.After(guard):
		t.Fatal("no batch served: a linger held it")
		return nil
	}
}

// busyBatcher returns a Batcher of at most most calls a batch, with the
// linger and, unless nil, the due, and the channel it serves batches to,
// made busy: its first batch, {0}, was in flight while 1 to 3 queued, and
// both have been served, {1, 2, 3} together (at once if full or due, else
// after the linger).
func busyBatcher(t *testing.T, most int, linger time.Duration, due func(int) time.Time) (*Batcher[int], chan []int) {
	t.Helper()
	batches := make(chan []int, 10)
	first, release := make(chan struct{}), make(chan struct{})
	b := New(most, 10*time.Millisecond, func(batch []int) {
		if batch[0] == 0 {
			close(first)
			<-release // calls 1 to 3 queue meanwhile: the next batch is busy
		}
		batches <- append([]int(nil), batch...)
	})
	b.SetLinger(linger)
	if due != nil {
		b.SetDue(due)
	}
	ctx := context.Background()
	require.NoError(t, b.Add(ctx, 0))
	<-first
	for i := 1; i <= 3; i++ {
		require.NoError(t, b.Add(ctx, i))
	}
	close(release)
	require.Equal(t, []int{0}, nextBatch(t, batches), "a call after a quiet spell goes at once, alone")
	require.Equal(t, []int{1, 2, 3}, nextBatch(t, batches), "the calls that queued meanwhile go together")
	return b, batches
}
