package worker

import (
	"container/list"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/tasks"
)

// Bounds of the unrecorded sends (unrecorded).
const (
	// minUnrecorded is the fewest unrecorded sends a worker keeps; it keeps
	// 2 × Options.Concurrency when that is more. Sends complete during a
	// Redis outage only from tasks that were in flight when it began (every
	// new send needs the limiter and asynq, both in Redis), so an outage
	// leaves at most about Concurrency of them.
	minUnrecorded = 10000
	// unrecordedFirstWait and unrecordedMaxWait bound the backoff between
	// two rounds of writes while Redis refuses them: it doubles from the
	// first to the max, with jitter, and starts again at the first after a
	// round that wrote everything. A record therefore lands within about
	// unrecordedMaxWait of Redis' return, well before asynq reruns the
	// task (at least 15 s after, see docs/redis-outages.md).
	unrecordedFirstWait = 250 * time.Millisecond
	unrecordedMaxWait   = 5 * time.Second
	// recordTimeout bounds each DeliveryRecorder call.
	recordTimeout = 2 * time.Second
	// finalFlushTimeout bounds the last round at Shutdown.
	finalFlushTimeout = 10 * time.Second
	// sentWindow is how long a recorded send makes a rerun of its task
	// complete without sending (handler.alreadySent), and how long an
	// unrecorded send is kept: tasks.DefaultRetention (24h). A completed
	// task keeps its ID that long, so an older record may be of an earlier
	// task that had the same idempotency key, whose new task must go.
	sentWindow = tasks.DefaultRetention
)

// unrecorded keeps the sends the provider accepted whose delivery record
// (DeliveryRecorder.RecordSent) could not be written, and writes them again,
// in the order they came, until the recorder takes them: a background loop
// started by the first one retries with backoff (unrecordedFirstWait
// doubling to unrecordedMaxWait) and stops at Shutdown after a last round
// (close).
//
// It exists because asynq v0.26.0 cannot record a task's completion after
// a Redis outage (docs/redis-outages.md): the task runs again once its lease
// has expired, and only a record of the send, in Redis or here, stops a
// second send (handler.alreadySent). At most limit sends are kept (the
// oldest is dropped beyond, with an ERROR log), each for at most
// sentWindow. Safe for concurrent use; a nil *unrecorded keeps nothing.
type unrecorded struct {
	rec    DeliveryRecorder
	limit  int
	logger *slog.Logger
	// gauge reports how many sends are kept (sluice_delivery_unrecorded).
	gauge func(n int)
	now   func() time.Time
	// wait returns the channel a round waits on (time.After; tests step
	// it by hand).
	wait func(d time.Duration) <-chan time.Time

	n     atomic.Int64 // len(byKey), read without the lock by has
	mu    sync.Mutex
	byKey map[unrecordedKey]*list.Element
	fifo  list.List     // of *unrecordedSend, oldest first
	wake  chan struct{} // the journal was empty and got a send
	stopc chan struct{} // closed by close
	done  chan struct{} // closed when the loop has returned; nil: no loop yet
	shut  bool
}

type unrecordedKey struct{ queue, id string }

type unrecordedSend struct {
	s     Sent
	added time.Time
}

func newUnrecorded(rec DeliveryRecorder, limit int, logger *slog.Logger, m *Metrics) *unrecorded {
	return &unrecorded{rec: rec, limit: limit, logger: logger, gauge: m.unrecordedSends, now: time.Now, wait: time.After,
		byKey: map[unrecordedKey]*list.Element{}, wake: make(chan struct{}, 1), stopc: make(chan struct{})}
}

// add keeps s to write later, starting the loop that writes it if none runs.
// A send of the same task replaces the one kept.
func (u *unrecorded) add(s Sent) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.shut {
		u.logger.Error("delivery record: could not record a send after shutdown; if asynq runs the task again it is sent twice",
			"task_id", s.TaskID, "channel", s.Channel)
		return
	}
	k := unrecordedKey{s.Queue, s.TaskID}
	if e, ok := u.byKey[k]; ok {
		e.Value.(*unrecordedSend).s = s
		return
	}
	u.byKey[k] = u.fifo.PushBack(&unrecordedSend{s: s, added: u.now()})
	if u.fifo.Len() > u.limit {
		old := u.fifo.Front().Value.(*unrecordedSend)
		u.removeLocked(u.fifo.Front())
		u.logger.Error("delivery record: too many sends waiting for Redis; forgetting the oldest, which is sent twice if asynq runs its task again",
			"task_id", old.s.TaskID, "channel", old.s.Channel, "limit", u.limit)
	}
	u.n.Store(int64(u.fifo.Len()))
	u.gauge(u.fifo.Len())
	if u.done == nil {
		u.done = make(chan struct{})
		go u.loop()
	}
	if u.fifo.Len() == 1 {
		select {
		case u.wake <- struct{}{}:
		default:
		}
	}
}

// has reports whether the send of the task id in queue is kept: the
// provider accepted it and its record waits for Redis.
func (u *unrecorded) has(queue, id string) bool {
	if u == nil || u.n.Load() == 0 {
		return false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	_, ok := u.byKey[unrecordedKey{queue, id}]
	return ok
}

// len is the number of sends kept.
func (u *unrecorded) len() int {
	if u == nil {
		return 0
	}
	return int(u.n.Load())
}

func (u *unrecorded) removeLocked(e *list.Element) {
	us := e.Value.(*unrecordedSend)
	delete(u.byKey, unrecordedKey{us.s.Queue, us.s.TaskID})
	u.fifo.Remove(e)
}

// flush makes one round: it drops sends kept longer than sentWindow, then
// writes the kept sends oldest first until one fails. The failed one goes to
// the back of the line, so that a record the recorder refuses for its own
// reason does not hold up the others; a record it calls invalid
// (ErrInvalidRecord) is dropped. It returns how many were written and the
// error that ended the round (nil: every send that was kept when the round
// began is written or dropped).
func (u *unrecorded) flush(ctx context.Context) (written int, err error) {
	u.mu.Lock()
	now := u.now()
	for e := u.fifo.Front(); e != nil; {
		next := e.Next()
		if us := e.Value.(*unrecordedSend); now.Sub(us.added) > sentWindow {
			u.removeLocked(e)
			u.logger.Error("delivery record: a send waited for Redis longer than the window; forgotten",
				"task_id", us.s.TaskID, "channel", us.s.Channel, "window", sentWindow)
		}
		e = next
	}
	round := u.fifo.Len()
	u.sync()
	u.mu.Unlock()
	for range round {
		u.mu.Lock()
		e := u.fifo.Front()
		if e == nil {
			u.mu.Unlock()
			break
		}
		us := e.Value.(*unrecordedSend)
		s := us.s
		u.mu.Unlock()

		cctx, cancel := context.WithTimeout(WithKeptRecord(ctx), recordTimeout)
		err := u.rec.RecordSent(cctx, s)
		cancel()

		u.mu.Lock()
		cur, ok := u.byKey[unrecordedKey{s.Queue, s.TaskID}]
		switch {
		case err == nil || errors.Is(err, ErrInvalidRecord):
			if ok && cur == e {
				u.removeLocked(e)
			}
			if err != nil {
				u.logger.Error("delivery record: the recorder refused a kept send; forgotten", "task_id", s.TaskID, "channel", s.Channel, "err", err)
			} else {
				written++
			}
		case ok && cur == e:
			u.fifo.MoveToBack(e)
		}
		u.sync()
		u.mu.Unlock()
		if err != nil && !errors.Is(err, ErrInvalidRecord) {
			return written, err
		}
	}
	return written, nil
}

// sync publishes the count; u.mu is held.
func (u *unrecorded) sync() {
	u.n.Store(int64(u.fifo.Len()))
	u.gauge(u.fifo.Len())
}

// loop writes the kept sends until close: a round after each backoff while
// any are kept, waking when the first one comes.
func (u *unrecorded) loop() {
	defer close(u.done)
	backoff := unrecordedFirstWait
	for {
		if u.len() == 0 {
			backoff = unrecordedFirstWait
			select {
			case <-u.stopc:
				return
			case <-u.wake:
			}
		}
		select {
		case <-u.wake: // this round takes the sends that woke it
		default:
		}
		select {
		case <-u.stopc:
			return
		case <-u.wait(jittered(backoff)):
		}
		written, err := u.flush(context.Background())
		switch {
		case err == nil:
			if written > 0 {
				u.logger.Info("delivery record: wrote the sends kept while Redis refused them", "written", written)
			}
			backoff = unrecordedFirstWait
		case written > 0:
			backoff = unrecordedFirstWait // Redis answers: one record is refused
		default:
			backoff = nextBackoff(backoff)
			u.logger.Debug("delivery record: Redis still refuses the kept sends", "kept", u.len(), "next", backoff, "err", err)
		}
	}
}

// nextBackoff doubles b up to unrecordedMaxWait.
func nextBackoff(b time.Duration) time.Duration {
	return min(2*b, unrecordedMaxWait)
}

// jittered is b less up to half of it ("equal jitter"), so that workers
// that lost Redis together do not write all at once when it returns.
func jittered(b time.Duration) time.Duration {
	return b/2 + rand.N(b/2+1)
}

// close stops the loop, makes a last round bounded by finalFlushTimeout,
// and logs at ERROR the sends still unrecorded: asynq may run their tasks
// again, and they would be sent twice. Later adds are only logged.
func (u *unrecorded) close() {
	if u == nil {
		return
	}
	u.mu.Lock()
	if u.shut {
		u.mu.Unlock()
		return
	}
	u.shut = true
	done := u.done
	close(u.stopc)
	u.mu.Unlock()
	if done == nil {
		return // never had a send to keep
	}
	<-done
	if u.len() == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), finalFlushTimeout)
	defer cancel()
	written, err := u.flush(ctx)
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.fifo.Len() == 0 {
		u.logger.Info("delivery record: wrote the sends kept while Redis refused them", "written", written)
		return
	}
	var ids []string
	for e := u.fifo.Front(); e != nil && len(ids) < 20; e = e.Next() {
		ids = append(ids, e.Value.(*unrecordedSend).s.TaskID)
	}
	u.logger.Error("delivery record: shutting down with sends Redis never recorded; asynq may run their tasks again and send them twice",
		"unrecorded", u.fifo.Len(), "written", written, "task_ids", ids, "err", err)
}
