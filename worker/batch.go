package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluice-dev/sluice/control"
	"github.com/sluice-dev/sluice/tasks"
)

// Batch tasks (tasks.TypeBatch). A producer with channels.<name>.batch_sends
// enqueues the sends of one sender planned for the same second as one asynq
// task, so that asynq's enqueue, forward, dequeue and completion, four
// scripts that are most of a paced send's Redis work beside the pacing, are
// paid once per batch (docs/pacing.md, "Batch tasks").
//
// The worker runs each send of a batch through its channel's handler as if
// it were its own task: the same reservation, hold, send, delivery record,
// retry budget and logs, under the send's own ID. A send that Sluice's
// limits hold back for at most maxBatchWait waits in its batch; one that
// must come back later (a longer block, a provider throttle, a failure the
// budget retries) becomes a task of its own, with its ID, its MaxRetry and
// the retries it spent (tasks.HeaderRetried), due when asynq would have
// retried it; one the budget gives up on becomes a task that is archived at
// once with the reason (tasks.HeaderArchive). The batch completes once
// every send is sent or has its own task.
//
// A batch starts its sends in order, each a little before its planned
// instant (batchLead) and once the one before has its slot (or is done);
// two at a time while the batch is behind its pace (chain), and a worker
// runs at most Options.Concurrency sends of batches at a time,
// as it runs that many tasks. A worker that starts behind a backlog
// dequeues many seconds' batches at once: starting all their sends at once
// took the host's CPU from the sends already held for their slots, which
// then left late and bunched (a strict provider counts 81 in a second), and
// pushed each number's firm slots past the hold, so that the sends beyond
// it were planned again.
//
// A batch that runs again (asynq retries it: its lease was lost, its
// worker died, Redis refused a send's own task; or asynq put it back at a
// shutdown without counting a retry, which its run mark,
// control.BatchRunKey, tells) skips the sends that went (the delivery
// record, as for any task that runs again) and those that have their own
// task already, so a send runs in one place at a time and goes once.

// memberKey is the context key of a batch's send's taskMeta.
type memberKey struct{}

// reservedKey is the context key of the func a batch's send calls once its
// slot is firm: the batch then starts its next send.
type reservedKey struct{}

// reserved tells the batch that runs ctx's send that its slot is firm,
// and whether the batch is behind its pace: the send's first ask was firm
// at once, its slot due as the limiter decided (chain); nothing for a
// task's own send.
func reserved(ctx context.Context, behind bool) {
	if f, ok := ctx.Value(reservedKey{}).(func(bool)); ok {
		f(behind)
	}
}

// member is a batch's send as serveBatch starts it: admitted is closed
// once its slot is firm (behind, as reserved tells), it waits in the
// batch, or it is done.
type member struct {
	once     sync.Once
	admitted chan struct{}
	behind   bool
}

// admit closes m.admitted, the first time, with what reserved tells.
func (m *member) admit(behind bool) {
	m.once.Do(func() {
		m.behind = behind
		close(m.admitted)
	})
}

// chain is the order in which a batch starts its sends: the next starts
// once the one before has its slot, so that a batch behind a backlog does
// not start all its sends at once (see serveBatch). That keeps a number at
// its pace only while a reservation's round trip is shorter than the
// pace's interval, and behind a backlog it is not: with every batch due at
// once, round trips took 8 to 43 ms on the 2-core host (Redis busy with
// the batches' dequeues and full reserve scripts), and a lone batch sent
// one send a round trip, half of an 80/s number's pace, until the number's
// next batch was dequeued (`make bench-scale`: the worst number lost up to
// 300 ms of slots in its first second). So while a batch is behind its
// pace, the last send admitted given a slot due as the limiter decided
// (Reservation.Delay 0: the firm book had no slot ahead of it), two of its
// sends ask at once (behindDepth): it keeps the pace up to round trips of
// twice the interval. A batch ahead of its pace (its slots in the future)
// asks one at a time, as before. The two may reach the limiter in either
// order, so while a batch is behind, two of its sends may take their slots
// out of the batch's order; each is still one send, once.
type chain struct {
	asking []*member // started, not yet admitted, oldest first
	depth  int       // how many may be asking: 1, or behindDepth
}

// behindDepth is how many of a batch's sends ask at once while it is
// behind its pace (chain).
const behindDepth = 2

// started notes m as asking and returns once the batch may start its next
// send: fewer than the depth asking, the depth set by the last send
// admitted. It returns false when ctx ends first.
func (c *chain) started(ctx context.Context, m *member) bool {
	c.asking = append(c.asking, m)
	for len(c.asking) >= max(c.depth, 1) {
		first := c.asking[0]
		select {
		case <-first.admitted: // its slot is firm, it waits in the batch, or it is done
		default:
			select {
			case <-first.admitted:
			case <-ctx.Done():
				return false
			}
		}
		c.depth = 1
		if first.behind {
			c.depth = behindDepth
		}
		c.asking = c.asking[1:]
	}
	return true
}

// withMember returns ctx carrying m as the task's meta (asynqMeta).
func withMember(ctx context.Context, m taskMeta) context.Context {
	return context.WithValue(ctx, memberKey{}, m)
}

// taskID is the ID of the task or batch send ctx runs.
func taskID(ctx context.Context) string { return asynqMeta(ctx).id }

// batchRunTTL is how long a batch's run mark (control.BatchRunKey) lasts
// when the batch does not complete: asynq puts a batch back without
// counting a retry only at a shutdown, and the batch runs again within
// moments; a retry it counts says so itself. A completed batch's mark is
// deleted.
const batchRunTTL = time.Hour

// batchRan marks the batch of meta bm as started and reports whether it
// had started before: asynq counts a retry, or the mark was set (asynq put
// it back without one, at a shutdown).
func (w *Worker) batchRan(ctx context.Context, bm taskMeta) (bool, error) {
	if bm.retried > 0 {
		return true, nil
	}
	fresh, err := w.opts.Redis.SetNX(ctx, control.BatchRunKey(w.prefix(), bm.queue, bm.id), 1, batchRunTTL).Result()
	return !fresh, err
}

// batchEnqueueTimeout bounds the enqueue of a batch's sends' own tasks,
// also after the batch's context ended (a shutdown).
const batchEnqueueTimeout = 5 * time.Second

// serveBatch runs a batch task (see above).
func (w *Worker) serveBatch(ctx context.Context, t *asynq.Task) error {
	b, err := tasks.DecodeBatch(t.Payload())
	if err != nil {
		w.opts.Metrics.outcome(unknownChannel, OutcomeMalformed)
		return permanent(err)
	}
	bm := asynqMeta(ctx)
	skip := make([]bool, len(b.Sends))
	rerun, err := w.batchRan(ctx, bm)
	if err != nil {
		return fmt.Errorf("batch of %d sends: mark its run: %w", len(b.Sends), err)
	}
	if rerun {
		// Its sends look for a send already made (alreadySent), as a task
		// that runs again does, and for a task of their own.
		bm.rerun = true
		for i, s := range b.Sends {
			own, err := w.ownTask(bm.queue, s.ID)
			if err != nil {
				return fmt.Errorf("batch of %d sends runs again: look for send %s's own task: %w", len(b.Sends), s.ID, err)
			}
			skip[i] = own
		}
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []error
	)
	// settle gives send s, whose attempt ended in err, its own task where
	// it must come back, at once: a wait measured from the batch's end
	// would bring it back late.
	settle := func(s tasks.BatchSend, m taskMeta, err error) {
		if err == nil || errors.Is(err, asynq.RevokeTask) {
			return
		}
		st := asynq.NewTask(s.Type, s.Payload)
		w.logError(withMember(ctx, m), st, err)
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchEnqueueTimeout)
		defer cancel()
		if err := w.enqueueOwn(ectx, m, st, err); err != nil {
			mu.Lock()
			failed = append(failed, fmt.Errorf("send %s: %w", s.ID, err))
			mu.Unlock()
		}
	}
	var c chain
	for i, s := range b.Sends {
		if skip[i] {
			continue
		}
		m := taskMeta{id: s.ID, queue: bm.queue, retried: bm.retried, maxRetry: s.MaxRetry, rerun: bm.rerun}
		h := w.handlerOfType(s.Type)
		if h == nil {
			// Its own task: the mux archives it with the reason.
			settle(s, m, permanent(fmt.Errorf("unknown task type %.64q in a batch: no handler", s.Type)))
			continue
		}
		if s.At > 0 && !sleep(ctx, time.Until(time.UnixMilli(s.At).Add(-batchLead))) || ctx.Err() != nil {
			break // shutting down: the batch comes back (below)
		}
		mb := &member{admitted: make(chan struct{})}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer mb.admit(false)
			err := w.serveMember(context.WithValue(withMember(ctx, m), reservedKey{}, mb.admit), h, asynq.NewTask(s.Type, s.Payload))
			if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
				return // cut off by a shutdown or a deadline: the batch comes back
			}
			settle(s, m, err)
		}()
		c.started(ctx, mb) // (ctx ended: the loop ends above)
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		// asynq puts the batch back, at a shutdown without a retry (its run
		// mark tells its next run), else with one: the next run skips the
		// sends that went or have a task of their own, and runs the rest.
		return fmt.Errorf("batch of %d sends cut off: %w", len(b.Sends), err)
	}
	if len(failed) > 0 {
		// The batch runs again: its sends with their own task by now are
		// skipped, the others run again.
		return fmt.Errorf("batch of %d sends: %d could not get their own task: %w", len(b.Sends), len(failed), errors.Join(failed...))
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchEnqueueTimeout)
	defer cancel()
	w.opts.Redis.Del(dctx, control.BatchRunKey(w.prefix(), bm.queue, bm.id)) // done; left, it expires
	return nil
}

// prefix is the limiter's key prefix, "sluice" by default.
func (w *Worker) prefix() string {
	if p, ok := w.opts.Limiter.(prefixer); ok && p.Prefix() != "" {
		return p.Prefix()
	}
	return "sluice"
}

// batchLead is how long before its planned instant a batch's send starts
// (decoded, its slot reserved, then held until it): the sends of a batch
// start over its second, as they go, not all at its start.
const batchLead = 300 * time.Millisecond

// maxBatchWait is the longest a batch's send that a Sluice limit holds
// back waits in its batch for another try; a longer wait is its own task's.
const maxBatchWait = 5 * time.Second

// serveMember runs a batch's send (ctx carries its meta) through h, in one
// of the worker's places for batch sends (members). A send that Sluice's
// limits hold back for at most maxBatchWait (a new place a second or two
// on: the number's firm slots are past the hold; a short pause) tries
// again in its batch when asynq would have brought its own task back,
// giving its place up meanwhile: the task would have cost an enqueue, a
// forward, a dequeue and a completion more.
func (w *Worker) serveMember(ctx context.Context, h *handler, t *asynq.Task) error {
	for {
		select {
		case w.members <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err() // cut off: the batch comes back
		}
		err := h.serve(ctx, t)
		<-w.members
		var te *ThrottledError
		if errors.Is(err, asynq.SkipRetry) || !errors.As(err, &te) || te.Err != nil {
			return err // sent, given up, or the provider's answer or a failure: as a task's
		}
		// When asynq would bring its own task back (a new place: the
		// second of it), never sooner than minBatchWait.
		wait := max(RetryDelay(0, err, t), minBatchWait)
		if wait > maxBatchWait {
			return err
		}
		reserved(ctx, false) // the batch's next send need not wait behind this one
		if !sleep(ctx, wait) {
			return err
		}
	}
}

// minBatchWait is the least a held-back batch send waits before it tries
// again: a place already due comes back at once, but not in a loop.
const minBatchWait = 50 * time.Millisecond

// enqueueOwn gives a batch's send (meta m, task st) whose attempt ended in
// err a task of its own, as asynq would have handled err for a task: due
// after RetryDelay, its retries counted (tasks.HeaderRetried) when err is a
// failure (IsFailure), or archived at once (tasks.HeaderArchive) when err
// skips retries. A task that exists already (the batch ran before) is
// fine.
func (w *Worker) enqueueOwn(ctx context.Context, m taskMeta, st *asynq.Task, err error) error {
	retried := m.retried
	headers := map[string]string{}
	opts := []asynq.Option{asynq.TaskID(m.id), asynq.Queue(m.queue), asynq.Retention(tasks.DefaultRetention)}
	if m.maxRetry >= 0 {
		opts = append(opts, asynq.MaxRetry(max(m.maxRetry, tasks.MinMaxRetry)))
	}
	switch {
	case errors.Is(err, asynq.SkipRetry):
		headers[tasks.HeaderArchive] = strings.TrimPrefix(err.Error(), asynq.SkipRetry.Error()+": ")
	default:
		if IsFailure(err) {
			retried++
		}
		opts = append(opts, asynq.ProcessIn(RetryDelay(m.retried, err, st)))
	}
	if retried > 0 {
		headers[tasks.HeaderRetried] = strconv.Itoa(retried)
	}
	_, eerr := w.client.EnqueueContext(ctx, asynq.NewTaskWithHeaders(st.Type(), st.Payload(), headers), opts...)
	if errors.Is(eerr, asynq.ErrTaskIDConflict) || errors.Is(eerr, asynq.ErrDuplicateTask) {
		return nil
	}
	return eerr
}

// ownTask reports whether the send id has a task of its own in queue (a
// batch that runs again). The error is Redis's: the batch runs nothing
// then, and runs again later.
func (w *Worker) ownTask(queue, id string) (bool, error) {
	_, err := w.insp.GetTaskInfo(queue, id)
	switch {
	case err == nil:
		return true, nil
	case tasks.NoSuchTask(err):
		return false, nil
	}
	return false, err
}

// handlerOfType is the handler of the channel whose task type is typ; nil
// when none is.
func (w *Worker) handlerOfType(typ string) *handler {
	for _, h := range w.handlers {
		if h.ch.TaskType == typ {
			return h
		}
	}
	return nil
}

// archiveMarked is mux middleware that archives at once a task a batch gave
// up on (tasks.HeaderArchive), with the reason its batch had: the send was
// tried and recorded there.
func archiveMarked(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		if why, ok := t.Headers()[tasks.HeaderArchive]; ok {
			return permanent(errors.New(why))
		}
		return next.ProcessTask(ctx, t)
	})
}
