package producer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
)

// Batch tasks. A channel with BatchSends (channels.<name>.batch_sends) has
// the sends of one sender (batchKey) planned for the same second carried by
// batch tasks (tasks.TypeBatch) of up to tasks.MaxBatchSends: one asynq
// task, scheduled for that second (pending at once for the second that has
// begun), instead of one per send. The worker runs each
// send as its own task would run (worker, batch.go).
//
// Only Send batches, and only sends that this call planned anew (a repeat
// that already holds a place goes as its own task, for asynq to answer)
// with an idempotency key whose claim this call took. The claim is kept as
// batched (batchedToken) before the batch is enqueued: asynq holds no task
// of the send's ID, so the claim answers a repeat of the key with
// tasks.ErrDuplicate, for its life (Options.ClaimRetention past the slot),
// and tells the cleanup the send's place is still wanted.

// batchKey groups sends: their queue, due second (Unix) and first paced
// limit's key (the channel's first GCRA rule: a WhatsApp number, an SMS
// sender, a webhook host), so that a batch is one sender's second: the
// worker starts a batch's sends in turn, and a sender whose slots are
// taken further ahead holds back only its own.
type batchKey struct {
	queue string
	due   int64
	lead  string
}

// enqueueBatches enqueues as batch tasks the sends of ts that may go in one
// (above): planned[i] a new place, claimed the claims this call took (only
// sends with an idempotency key have one), and maxRetry[i] each task's
// MaxRetry. It sets their out[i].Info (the send as asynq would show its own
// task: scheduled, due at its second, or pending for a second that has
// begun) or, for a batch asynq refused, their
// out[i].Err. A second with one such send leaves it to the caller.
func (c *Client) enqueueBatches(ctx context.Context, ts []*asynq.Task, queues []string, planned []bool, claimed claims, maxRetry []int, out []Enqueued) {
	groups := map[batchKey][]int{}
	var order []batchKey
	for i, t := range ts {
		ch := c.chans[t.Type()]
		// Only sends with an idempotency key whose claim this call took: the
		// claim, kept as batched, is the one record that the send exists
		// (for a repeat, and for the cleanup's sweep of places).
		if out[i].Err != nil || ch == nil || !ch.batch || !planned[i] || claimed.held[i] == "" {
			continue
		}
		// A second that has begun is batched too: its batch is pending at
		// once, as its sends' own tasks would be, and costs asynq one task
		// instead of one a send. (A worker started behind a backlog
		// dequeued some 1,200 such tasks of 30 numbers' first seconds
		// before the batches of the seconds after them, which held those
		// numbers idle for up to 0.4s.)
		due := out[i].ETA.Truncate(time.Second)
		k := batchKey{queue: queues[i], due: due.Unix()}
		if len(out[i].Keys) > 0 {
			k.lead = out[i].Keys[0]
		}
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	for _, k := range order {
		g := groups[k]
		for len(g) >= 2 {
			n := min(len(g), tasks.MaxBatchSends)
			if len(g)-n == 1 {
				n-- // leave two for the next batch rather than one alone
			}
			c.enqueueBatch(ctx, ts, k, g[:n], maxRetry, out, claimed)
			g = g[n:]
		}
	}
}

// enqueueBatch enqueues one batch task of ts[idx], due at k's second. A
// batch asynq did not take gives its sends' new places back, unless its
// outcome is unknown.
func (c *Client) enqueueBatch(ctx context.Context, ts []*asynq.Task, k batchKey, idx []int, maxRetry []int, out []Enqueued, claimed claims) {
	sends := make([]tasks.BatchSend, len(idx))
	for j, i := range idx {
		sends[j] = tasks.BatchSend{ID: out[i].ID, Type: ts[i].Type(), Payload: ts[i].Payload(), MaxRetry: maxRetry[i], At: out[i].ETA.UnixMilli()}
	}
	payload, err := tasks.EncodeBatch(sends)
	if err != nil {
		return // each goes as its own task
	}
	// The claims say batched before the batch exists: a repeat of a key
	// from a caller racing this one is then a duplicate, not a task of its
	// own beside the batch (asynq cannot tell: the batch's ID is not the
	// send's).
	if err := c.keepClaims(ctx, ts, idx, out, batchedToken, claimed); err != nil {
		c.unmarkBatched(ctx, ts, idx, out)
		for _, i := range idx {
			delete(claimed.held, i) // given back: another caller may hold it now
		}
		return // each goes as its own task
	}
	due := time.Unix(k.due, 0)
	// A batch due in a second that has begun is pending at once, as asynq
	// makes a task due in the past (its answer says which, below).
	state, next := asynq.TaskStateScheduled, due
	if !due.After(time.Now()) {
		state, next = asynq.TaskStatePending, time.Now()
	}
	id := "batch-" + randomID()
	info, err := c.client.EnqueueContext(ctx, asynq.NewTask(tasks.TypeBatch, payload), asynq.TaskID(id), asynq.Queue(k.queue),
		asynq.ProcessAt(due), asynq.MaxRetry(tasks.DefaultMaxRetry))
	if err == nil {
		state, next = info.State, info.NextProcessAt // asynq's own reading of the second
	}
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		// The reply may have been lost after Redis enqueued it: ask. Sent
		// as their own tasks as well, the sends would go twice.
		_, ierr := asynq.NewInspectorFromRedisClient(c.limiter.Client()).GetTaskInfo(k.queue, id)
		switch {
		case ierr == nil:
			err = nil
		case tasks.NoSuchTask(ierr):
			c.unmarkBatched(ctx, ts, idx, out) // not enqueued: the keys are free again
		default:
			// Unknown: the claims stay batched and the places kept, so a
			// retry of these keys is a duplicate rather than a second send.
			err = fmt.Errorf("%w: %w (and asking asynq failed: %w)", ErrBatchOutcomeUnknown, err, ierr)
		}
	}
	for _, i := range idx {
		if err != nil {
			out[i].Err = fmt.Errorf("enqueue %s (id %q) in a batch task: %w", ts[i].Type(), out[i].ID, err)
			if !errors.Is(err, ErrBatchOutcomeUnknown) {
				c.release(ctx, ts[i], out[i].ID)
			}
			continue
		}
		out[i].Info = &asynq.TaskInfo{ID: out[i].ID, Queue: k.queue, Type: ts[i].Type(), Payload: ts[i].Payload(),
			State: state, MaxRetry: maxRetry[i], NextProcessAt: next}
	}
}

// ErrBatchOutcomeUnknown is wrapped by a send's error when the enqueue of
// the batch task carrying it failed and asynq could not be asked whether it
// landed: the send may be enqueued. Its claim stays batched, so a repeat of
// its key is tasks.ErrDuplicate; check the task (GET /v1/tasks/{id}) before
// sending it under a new key.
var ErrBatchOutcomeUnknown = errors.New("batch task enqueue outcome unknown")

// unmarkBatched gives back the batched claims of ts[idx], whose batch was
// not enqueued.
func (c *Client) unmarkBatched(ctx context.Context, ts []*asynq.Task, idx []int, out []Enqueued) {
	_, _ = evalPipelined(context.WithoutCancel(ctx), c.limiter.Client(), unclaimScript, len(idx), func(k int) ([]string, []any) {
		i := idx[k]
		return []string{ClaimKey(c.limiter.Prefix(), out[i].ID)}, []any{claimValue(ts[i].Type(), batchedToken)}
	})
}

// BatchedType returns the task type of the send with ID id that a batch
// task carries or carried (its claim is kept as batched), and false when
// the ID's claim is not a batched one. The error is Redis's.
func (c *Client) BatchedType(ctx context.Context, id string) (string, bool, error) {
	if c.limiter == nil {
		return "", false, nil
	}
	return batchedType(ctx, c.limiter, id)
}

// Batched reports whether a batch task carries, or carried, the send of
// type typ with ID id (its claim under lim's prefix is kept as batched): it
// has no asynq task of its own until its batch gives it one.
func Batched(ctx context.Context, lim *throttle.Redis, typ, id string) (bool, error) {
	t, ok, err := batchedType(ctx, lim, id)
	return ok && t == typ, err
}

// batchedType reads the claim of id under lim's prefix: its type, and
// whether it is kept as batched.
func batchedType(ctx context.Context, lim *throttle.Redis, id string) (string, bool, error) {
	v, err := lim.Client().Get(ctx, ClaimKey(lim.Prefix(), id)).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	typ, token, _ := strings.Cut(v, "|")
	return typ, token == batchedToken, nil
}
