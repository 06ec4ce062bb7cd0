package worker

import (
	"context"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/throttle"
)

// repacer is implemented by limiters that name a send planned at a rate of
// before (*throttle.Redis; see throttle.Redis.NextTooLate).
type repacer interface {
	NextTooLate(ctx context.Context, reqs []throttle.Request, at time.Time, hold time.Duration) (string, error)
}

// pullNext runs now the send planned next on a slow limit of reqs that an
// adaptive limit held down when it was planned, and whose place is later
// than the limit's rate of now needs (throttle.Redis.NextTooLate), after
// the send on reqs, which took its slot at slot (this host's clock; zero:
// none taken), went through. The task comes back before its place and is
// held until the limit's next slot; once sent, it pulls the next one, so
// the planned sends close up at the rate of now instead of going at the
// spacing of a throttled minute (docs/adaptive.md). Failures only leave
// the send at its place: another worker ran it, or Redis did not answer.
func (h *handler) pullNext(ctx context.Context, reqs []throttle.Request, fields map[string]string, slot time.Time) {
	rp, ok := h.w.opts.Limiter.(repacer)
	if !ok || h.w.insp == nil || slot.IsZero() {
		return
	}
	id, err := rp.NextTooLate(ctx, reqs, h.clock.limiter(slot), h.ch.Hold)
	if err != nil || id == "" {
		return
	}
	// The next send is the same sender's: in this send's queue, its
	// sender's queue group, or the channel's own queue (a send a plain
	// asynq client enqueued, or one queued before the groups were raised).
	for _, queue := range h.nextQueues(h.meta(ctx).queue, fields) {
		if err := h.w.insp.RunTask(queue, id); err == nil {
			h.w.logger.Debug("planned send run early: its limit's rate is back up since it was planned", "channel", h.ch.Name, "task_id", id)
			return
		}
	}
}

// nextQueues are the queues pullNext asks, in order, without repeats:
// this send's queue (current, "" when unknown), its sender's group and the
// channel's queue.
func (h *handler) nextQueues(current string, fields map[string]string) []string {
	out := make([]string, 0, 3)
	for _, q := range []string{current, h.ch.QueueFor(fields), h.ch.Queue} {
		if q != "" && !slices.Contains(out, q) {
			out = append(out, q)
		}
	}
	return out
}
