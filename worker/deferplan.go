package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
)

// Deferrer is implemented by limiters that can move a paused scope's plan
// past the pause's end (*throttle.Redis): with one, a provider throttle
// that pauses a scope moves its waiting sends' tasks to their new seconds
// in asynq, so that none is dequeued inside the pause only to be planned
// again (docs/pacing.md, "Pauses").
type Deferrer interface {
	DeferPlanned(ctx context.Context, until time.Time, reqs ...throttle.Request) (throttle.Deferred, error)
}

// deferBinding is, per pause scope, the channel's GCRA rules keyed by
// exactly the scope's fields: their backlogs hold the scope's planned
// sends (the sender's rate limit for a sender's pause).
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
		f := t.Fields()
		slices.Sort(f)
		f = slices.Compact(f)
		for _, p := range pauses {
			sf := p.key.Fields()
			slices.Sort(sf)
			sf = slices.Compact(sf)
			if slices.Equal(f, sf) {
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
// paused until until (limiter clock) past the pause's end: the limiter
// moves their places, then their tasks move by the same whole seconds in
// asynq's scheduled and retry sets. Failures are logged: a task left at its
// old second comes back, finds its place past the pause and waits for it
// (one dequeue more).
func (h *handler) deferPlanned(ctx context.Context, scope string, fields map[string]string, reqs []throttle.Request, until time.Time) {
	b := h.deferral
	if b == nil || h.w.opts.Redis == nil {
		return
	}
	var picked []throttle.Request
	for _, r := range b.byScope[scope] {
		key, ok := r.key.Render(fields)
		if !ok {
			continue
		}
		for _, q := range reqs {
			if q.Key == key && q.Limit.Name == r.name {
				picked = append(picked, q)
				break
			}
		}
	}
	if len(picked) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	d, err := b.deferrer.DeferPlanned(ctx, until, picked...)
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
	moved, err := moveTasks(ctx, h.w.opts.Redis, h.queue(), []string{d.Probe}, d.ProbeShift)
	if err == nil && len(d.TaskIDs) > 0 {
		var n int
		n, err = moveTasks(ctx, h.w.opts.Redis, h.queue(), d.TaskIDs, d.Shift)
		moved += n
	}
	if err != nil {
		h.w.logger.Warn("pause: could not move planned tasks past it; they come back and wait", "channel", h.ch.Name, "scope", scope, "err", err)
	}
	h.w.logger.Debug("pause: planned sends moved past it", "channel", h.ch.Name, "scope", scope,
		"shift", d.Shift, "planned", 1+len(d.TaskIDs), "tasks_moved", moved)
}

// moveTasks moves the tasks ids of queue that wait in asynq's scheduled or
// retry set (asynq:{queue}:scheduled, asynq:{queue}:retry: sorted sets of
// task ID by Unix second, asynq's layout since v0.18) later by shift, and
// reports how many it moved. ZADD XX INCR changes only a member that is
// there: a task already forwarded to pending, running or gone is left
// alone. The keys share the queue's hash tag, so one pipeline serves a
// Cluster too.
func moveTasks(ctx context.Context, rdb redis.UniversalClient, queue string, ids []string, shift time.Duration) (int, error) {
	by := float64(shift / time.Second)
	keys := []string{"asynq:{" + queue + "}:scheduled", "asynq:{" + queue + "}:retry"}
	moved := 0
	for start := 0; start < len(ids); start += 500 {
		end := min(start+500, len(ids))
		pipe := rdb.Pipeline()
		cmds := make([]*redis.FloatCmd, 0, 2*(end-start))
		for _, id := range ids[start:end] {
			for _, k := range keys {
				cmds = append(cmds, pipe.ZAddArgsIncr(ctx, k, redis.ZAddArgs{XX: true, Members: []redis.Z{{Score: by, Member: id}}}))
			}
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return moved, err
		}
		for _, c := range cmds {
			if c.Err() == nil {
				moved++
			}
		}
	}
	return moved, nil
}

// queue is the asynq queue of the channel's tasks.
func (h *handler) queue() string {
	if h.ch.Queue != "" {
		return h.ch.Queue
	}
	return tasks.DefaultQueue(h.ch.TaskType)
}
