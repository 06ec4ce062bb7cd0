// Package coalesce runs calls in batches: while one batch is being
// served, the calls that arrive queue up and are served together in the
// next, up to a most per batch. A lone call is served at once, so its
// latency is unchanged; under load the round trip and setup of each
// batch are shared, and a linger (SetLinger) spaces a busy Batcher's
// batches so that more calls share each. The limiter's reserve calls (throttle) and the
// worker's delivery records (internal/delivery) go to Redis this way, one
// script call per batch.
package coalesce

import (
	"context"
	"sync"
	"time"
)

// Batcher queues calls of type C and hands them to its serve func in
// batches of at most Max, in the order they were queued, from one
// goroutine: a batch is served before the next is taken. The goroutine
// starts with the first call and ends after Idle with none, so a Batcher
// nobody uses holds no goroutine. Safe for concurrent use.
type Batcher[C any] struct {
	in     chan C
	idle   time.Duration
	serve  func([]C)
	linger time.Duration     // see SetLinger
	due    func(C) time.Time // see SetDue; nil: every call may wait the linger

	// Written by the run goroutine only (a new one starts after the last
	// ended, through mu): when the last batch began, and whether it was
	// busy (SetLinger).
	last time.Time
	busy bool

	mu      sync.Mutex
	running bool // a run goroutine is serving in
}

// New returns a Batcher that serves batches of at most most calls with
// serve (which must hand each call its result: the Batcher only queues)
// and whose goroutine ends after idle without a call.
func New[C any](most int, idle time.Duration, serve func([]C)) *Batcher[C] {
	if most < 1 {
		panic("coalesce: a batch of at most fewer than one call") // a caller's defect: Add would wait forever
	}
	return &Batcher[C]{in: make(chan C, most), idle: idle, serve: serve}
}

// SetLinger has a busy Batcher serve at most one batch per d: a call that
// arrives less than d after the last batch began waits for the rest of d,
// or until the batch is full, for others to join it. Busy means that the
// last batch had company: it held more than one call, or calls were
// waiting once it was served. A call after a quiet spell, and each call of
// a caller that waits for its answer before the next (one call at a time)
// while nobody else keeps the Batcher busy, is served at once; such a
// caller that must not wait beside busy others needs a due (SetDue). Zero
// (the default) serves each batch as soon as the one before is done. Call
// it before the first Add.
func (b *Batcher[C]) SetLinger(d time.Duration) { b.linger = d }

// SetDue bounds the linger by each call's due: a batch waits for company
// no later than the earliest due of its calls, and a call whose due is
// the zero time, or has passed, is served at once, with the calls queued
// beside it. The limiter's reserve calls (throttle) are due within half
// their fastest limit's interval, and a worker's kept delivery records at
// once (internal/delivery). Call it before the first Add.
func (b *Batcher[C]) SetDue(due func(C) time.Time) { b.due = due }

// Add queues c, waiting while most calls are queued already. It returns
// ctx's error, and c is not queued, when ctx ends first.
func (b *Batcher[C]) Add(ctx context.Context, c C) error {
	select {
	case b.in <- c:
	case <-ctx.Done():
		return ctx.Err()
	}
	// After the send: a goroutine that exits finds the channel empty only
	// before this call's send, and then this starts a new one.
	b.mu.Lock()
	if !b.running {
		b.running = true
		go b.run()
	}
	b.mu.Unlock()
	return nil
}

func (b *Batcher[C]) run() {
	idle := time.NewTimer(b.idle)
	defer idle.Stop()
	for {
		var c C
		select {
		case c = <-b.in:
		case <-idle.C:
			b.mu.Lock()
			if len(b.in) == 0 {
				b.running = false
				b.mu.Unlock()
				return
			}
			b.mu.Unlock()
			idle.Reset(b.idle)
			continue
		}
		idle.Reset(b.idle)
		batch := []C{c}
		if b.linger > 0 && b.busy {
			batch = b.gather(batch, b.last.Add(b.linger))
		}
	drain:
		for len(batch) < cap(b.in) {
			select {
			case c := <-b.in:
				batch = append(batch, c)
			default:
				break drain
			}
		}
		b.last = time.Now()
		b.serve(batch)
		b.busy = len(batch) > 1 || len(b.in) > 0
	}
}

// gather adds to batch the calls that arrive until end, or until the
// earliest due of the batch's calls (SetDue), or until it is full.
func (b *Batcher[C]) gather(batch []C, end time.Time) []C {
	end = b.earlier(end, batch[0])
	wait := time.Until(end)
	if wait <= 0 {
		return batch
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for len(batch) < cap(b.in) {
		select {
		case c := <-b.in:
			batch = append(batch, c)
			if e := b.earlier(end, c); e.Before(end) {
				end = e
				if !t.Stop() {
					return batch // (it fired meanwhile)
				}
				wait = time.Until(end)
				if wait <= 0 {
					return batch
				}
				t.Reset(wait)
			}
		case <-t.C:
			return batch
		}
	}
	return batch
}

// earlier returns end, or c's due where that is earlier; a zero due is
// now.
func (b *Batcher[C]) earlier(end time.Time, c C) time.Time {
	if b.due == nil {
		return end
	}
	d := b.due(c)
	if d.IsZero() {
		return time.Time{}
	}
	if d.Before(end) {
		return d
	}
	return end
}
