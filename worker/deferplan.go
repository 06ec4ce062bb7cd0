package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/control"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/throttle"
)

// Deferrer is implemented by limiters that can move a paused scope's plan
// past the pause's end (*throttle.Redis): with one, a provider throttle
// that pauses a scope moves its waiting sends' tasks to their new seconds
// in asynq, so that none is dequeued inside the pause only to be planned
// again (docs/pacing.md, "Paused scopes").
type Deferrer interface {
	DeferPlanned(ctx context.Context, until time.Time, probe bool, reqs ...throttle.Request) (throttle.Deferred, error)
}

// deferBinding is, per pause scope, the channel's GCRA rules keyed by
// exactly the scope's fields: their backlogs hold the scope's planned
// sends (the sender's rate limit for a sender's pause; with a hold under
// 6.1 s a pair's limit keeps none beside its number's, so a pair's pause
// moves nothing: throttle.PlanTail).
type deferBinding struct {
	deferrer Deferrer
	byScope  map[string][]adaptRule
}

// newDeferBinding returns ch's binding, or nil when the limiter cannot
// defer plans or no rule is keyed by a pause scope's fields.
func newDeferBinding(ch Channel, lim throttle.Limiter, set *rules.Set, fields []string, pauses []pauseScope) (*deferBinding, error) {
	d, ok := lim.(Deferrer)
	if !ok {
		return nil, nil
	}
	b := &deferBinding{deferrer: d, byScope: map[string][]adaptRule{}}
	for _, r := range set.Rules() {
		if r.Limit.Algorithm != throttle.GCRA {
			continue
		}
		t, err := rules.ParseKey(ch.Name, r.Key, fields)
		if err != nil {
			return nil, fmt.Errorf("channel %s: limit %q: %w", ch.Name, r.Limit.Name, err)
		}
		t = t.SpreadBy(ch.SpreadBy)
		f := fieldSet(t)
		for _, p := range pauses {
			if slices.Equal(f, fieldSet(p.key)) {
				b.byScope[p.scope] = append(b.byScope[p.scope], adaptRule{r.Limit.Name, t})
			}
		}
	}
	if len(b.byScope) == 0 {
		return nil, nil
	}
	return b, nil
}

// deferPlanned moves the planned sends of the scope a provider throttle
// paused until until (limiter clock) past the pause's end, the first alone
// with probe (DeferPlanned): the limiter
// moves their places, then their tasks move by the same whole seconds in
// asynq's scheduled and retry sets. Failures are logged: a task left at its
// old second comes back, finds its place past the pause and waits for it
// (one dequeue more).
func (h *handler) deferPlanned(ctx context.Context, scope string, fields map[string]string, reqs []throttle.Request, until time.Time, probe bool) {
	b := h.deferral
	if b == nil || h.w.opts.Redis == nil {
		return
	}
	var picked []throttle.Request
	for _, r := range b.byScope[scope] {
		picked = r.appendMatch(picked, fields, reqs)
	}
	if len(picked) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	d, err := b.deferrer.DeferPlanned(ctx, until, probe, picked...)
	if err != nil {
		h.w.logger.Warn("pause: could not move the scope's planned sends past it; they come back and wait", "channel", h.ch.Name, "scope", scope, "err", err)
		return
	}
	if d.TooMany {
		h.w.logger.Info("pause: the scope's backlog is too large to move; its sends come back and wait", "channel", h.ch.Name, "scope", scope, "most", throttle.MaxDeferredSends)
		return
	}
	if d.Probe == "" {
		return
	}
	moves := make([]taskMove, 0, 1+len(d.TaskIDs))
	moves = append(moves, taskMove{TaskID: d.Probe, By: d.ProbeShift})
	for _, id := range d.TaskIDs {
		moves = append(moves, taskMove{TaskID: id, By: d.Shift})
	}
	// The scope's sends wait in the channel's queue or, with queue groups,
	// in the group of their sender (one group for a sender's scope, any for
	// the channel's): a task is moved only where it is, so each queue is
	// asked.
	moved := 0
	for _, q := range h.deferQueues(fields, picked) {
		n, err := moveTasks(ctx, h.w.opts.Redis, q, moves)
		moved += n
		if err != nil {
			h.w.logger.Warn("pause: could not move planned tasks past it; they come back and wait", "channel", h.ch.Name, "scope", scope, "queue", q, "err", err)
		}
	}
	h.w.logger.Debug("pause: planned sends moved past it", "channel", h.ch.Name, "scope", scope,
		"shift", d.Shift, "planned", 1+len(d.TaskIDs), "tasks_moved", moved)
}

// deferQueues are the queues whose tasks deferPlanned moves for picked: the
// channel's queue and its sender's group when every picked key is in the
// sender's scope (spread_by), else every queue of the channel.
func (h *handler) deferQueues(fields map[string]string, picked []throttle.Request) []string {
	if len(h.queues) == 1 || fields[h.ch.SpreadBy] == "" {
		return h.queues
	}
	for _, r := range picked {
		if scope, _, _ := strings.Cut(r.Key, ":"); !strings.Contains(scope, "/") {
			return h.queues
		}
	}
	return []string{h.ch.Queue, h.ch.QueueFor(fields)}
}

// taskMove is a queued task to move by whole seconds.
type taskMove struct {
	TaskID string
	By     time.Duration
}

// moveTasks moves each task of moves that waits in queue's scheduled or
// retry set (control.AsynqDelayedKeys) by its whole seconds,
// and reports how many it moved. ZADD XX INCR changes only a member that is
// there: a task already forwarded to pending, running or gone is left
// alone. The keys share the queue's hash tag, so one pipeline serves a
// Cluster too.
func moveTasks(ctx context.Context, rdb redis.UniversalClient, queue string, moves []taskMove) (int, error) {
	scheduled, retry := control.AsynqDelayedKeys(queue)
	keys := []string{scheduled, retry}
	moved := 0
	for start := 0; start < len(moves); start += 500 {
		end := min(start+500, len(moves))
		pipe := rdb.Pipeline()
		cmds := make([]*redis.FloatCmd, 0, 2*(end-start))
		for _, m := range moves[start:end] {
			by := float64(m.By / time.Second)
			for _, k := range keys {
				cmds = append(cmds, pipe.ZAddArgsIncr(ctx, k, redis.ZAddArgs{XX: true, Members: []redis.Z{{Score: by, Member: m.TaskID}}}))
			}
		}
		// Exec reports the first failed command, which may be a task not
		// there (redis.Nil) ahead of a real failure: read each one.
		_, _ = pipe.Exec(ctx)
		var first error
		for _, c := range cmds {
			switch err := c.Err(); {
			case err == nil:
				moved++
			case !errors.Is(err, redis.Nil) && first == nil:
				first = err
			}
		}
		if first != nil {
			return moved, first
		}
	}
	return moved, nil
}
