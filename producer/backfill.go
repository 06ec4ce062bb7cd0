package producer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/control"
	"github.com/sluice-dev/sluice/worker"
)

// backfillPageSize is how many tasks Backfill lists from asynq at a time,
// and so how many claims one pipeline writes at most.
const backfillPageSize = 500

// Backfill writes the claims that the tasks enqueued before claims were
// kept for a task's life lack: an earlier release kept a claim only while
// it enqueued (ClaimTTL) and looked for the ID in the other channels'
// queues instead, so after the upgrade such a task's ID would be free on
// another channel. It walks each channel's queue (worker.Channel's Queue,
// else its task type's default queue) with asynq's Inspector, in every
// state (scheduled, retry, pending, active, completed, archived;
// backfillPageSize tasks a page), and for each task of the channel's
// TaskType writes the claim an enqueued task of that type holds,
// "<type>|enqueued" at ClaimKey(prefix, task ID), with SET NX (a claim
// that exists, live or being taken, is left as it is) for retention
// (0: DefaultClaimRetention) past now, or past the task's NextProcessAt
// when that is later. Tasks of other types in a channel's queue are left
// alone. prefix is the limiter's (throttle.Redis.Prefix).
//
// It runs once per deployment: the first call takes the marker
// control.ClaimBackfillKey(prefix) (SET NX, for retention) and walks; a
// call that finds the marker taken returns 0 and nil, so of many `serve`
// processes starting together one does the work. A task that moves from
// one state to another during the walk may be missed (asynq's pages are
// offsets); a task enqueued by this release holds its claim already.
//
// n is the number of claims written. The error is a channel whose rules
// do not compile (worker.NewPacing), Redis's, or ctx's; on one the marker
// is given back, so that a later call walks again (the claims written
// stay, and are not written twice). A process that dies during the walk
// keeps the marker until it expires: the next walk is then retention later.
func Backfill(ctx context.Context, rdb redis.UniversalClient, prefix string, chans []worker.Channel, retention time.Duration) (n int, err error) {
	queues := map[string]map[string]bool{} // queue → the task types its channels run
	var order []string
	for i, ch := range chans {
		p, err := worker.NewPacing(ch)
		if err != nil {
			return 0, fmt.Errorf("producer: Backfill: channels[%d]: %w", i, err)
		}
		for _, q := range p.Queues() {
			if queues[q] == nil {
				queues[q] = map[string]bool{}
				order = append(order, q)
			}
			queues[q][ch.TaskType] = true
		}
	}
	return backfill(ctx, rdb, prefix, order, queues, retention)
}

// Backfill is the package's Backfill of the Client's channels, on its
// Redis, under its limiter's prefix and with its ClaimRetention. The error
// is Backfill's, or a Client without Redis.
func (c *Client) Backfill(ctx context.Context) (int, error) {
	if c.client == nil {
		return 0, errors.New("producer: Backfill: the Client has no Redis (Options.Redis, Options.Limiter)")
	}
	queues := map[string]map[string]bool{}
	var order []string
	for typ, ch := range c.chans {
		for _, q := range ch.pacing.Queues() {
			if queues[q] == nil {
				queues[q] = map[string]bool{}
				order = append(order, q)
			}
			queues[q][typ] = true
		}
	}
	return backfill(ctx, c.limiter.Client(), c.limiter.Prefix(), order, queues, c.retention)
}

// backfill is Backfill over queues (by name, in order): the task types of
// each queue's channels.
func backfill(ctx context.Context, rdb redis.UniversalClient, prefix string, order []string,
	queues map[string]map[string]bool, retention time.Duration) (n int, err error) {
	if retention <= 0 {
		retention = DefaultClaimRetention
	}
	marker := control.ClaimBackfillKey(prefix)
	took, err := rdb.SetNX(ctx, marker, time.Now().UTC().Format(time.RFC3339), retention).Result()
	if err != nil {
		return 0, fmt.Errorf("producer: Backfill: take the marker %s: %w", marker, err)
	}
	if !took {
		return 0, nil
	}
	defer func() {
		if err != nil {
			_ = rdb.Del(context.WithoutCancel(ctx), marker).Err() // a later call walks again
		}
	}()
	insp := asynq.NewInspectorFromRedisClient(rdb) // shares rdb: not closed
	// Scheduled and retrying tasks first: a task leaving one state during
	// the walk mostly goes to a state listed after it.
	lists := []struct {
		state string
		list  func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error)
	}{
		{"scheduled", insp.ListScheduledTasks}, {"retry", insp.ListRetryTasks}, {"pending", insp.ListPendingTasks},
		{"active", insp.ListActiveTasks}, {"completed", insp.ListCompletedTasks}, {"archived", insp.ListArchivedTasks},
	}
	for _, q := range order {
		for _, l := range lists {
			for page := 1; ; page++ {
				if err := ctx.Err(); err != nil {
					return n, fmt.Errorf("producer: Backfill: %w", err)
				}
				infos, err := l.list(q, asynq.PageSize(backfillPageSize), asynq.Page(page))
				if errors.Is(err, asynq.ErrQueueNotFound) {
					break // nothing was ever enqueued to q
				}
				if err != nil {
					return n, fmt.Errorf("producer: Backfill: list the %s tasks of queue %s: %w", l.state, q, err)
				}
				w, err := writeClaims(ctx, rdb, prefix, queues[q], infos, retention)
				n += w
				if err != nil {
					return n, fmt.Errorf("producer: Backfill: claims of queue %s: %w", q, err)
				}
				if len(infos) < backfillPageSize {
					break
				}
			}
		}
	}
	return n, nil
}

// writeClaims sets, in one pipeline, the enqueued claim of each of infos
// whose type is among types and whose ID has none (SET NX PX): for
// retention past now, or past its NextProcessAt when later. It returns how
// many it set.
func writeClaims(ctx context.Context, rdb redis.UniversalClient, prefix string, types map[string]bool,
	infos []*asynq.TaskInfo, retention time.Duration) (int, error) {
	now := time.Now()
	cmds := make([]*redis.BoolCmd, 0, len(infos))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, ti := range infos {
			if !types[ti.Type] {
				continue
			}
			from := now
			if ti.NextProcessAt.After(now) {
				from = ti.NextProcessAt
			}
			cmds = append(cmds, p.SetNX(ctx, ClaimKey(prefix, ti.ID), claimValue(ti.Type, enqueuedToken), from.Add(retention).Sub(now)))
		}
		return nil
	})
	set := 0
	for _, c := range cmds {
		if c.Val() {
			set++
		}
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return set, err
	}
	return set, nil
}
