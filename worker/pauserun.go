package worker

import (
	"context"
	"time"

	"github.com/sluice-dev/sluice/throttle"
)

// pauseRunEnder is implemented by limiters whose pauses grow in runs
// (*throttle.Redis).
type pauseRunEnder interface {
	EndPauseRun(ctx context.Context, key string) (bool, error)
}

// endPauseRuns ends the run of pauses of each scope of a send the
// provider accepted (reqs, the send's requests; start, when it left, on
// time.Now's clock) whose pause had ended before the send left: the
// scope's next throttle pauses it for the first wait again, not a grown
// one (docs/providers.md, "Repeats"). The worker's pause book says which
// scopes had a pause whose run is still open, so this makes a Redis call
// once per pause and worker, and none on the common path. The channel's
// own scope (ScopeChannel: `sluice channels pause`, refused credentials)
// keeps its run: it is the credential loop's count (unauthorized), and a
// send accepted from one number does not vouch for another's token.
// Failures are logged; the run is then ended by a later send.
func (h *handler) endPauseRuns(ctx context.Context, reqs []throttle.Request, start time.Time) {
	// The book is on h.now's clock (time.Now but in tests).
	keys := h.w.pauses.takeRuns(reqs, h.now().Add(-time.Since(start)))
	if len(keys) == 0 {
		return
	}
	re, ok := h.pauser.(pauseRunEnder)
	if !ok {
		return
	}
	own := throttle.PauseKey(h.ch.Name, ScopeChannel, "")
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	for _, k := range keys {
		if k == own {
			continue
		}
		ended, err := re.EndPauseRun(ctx, k)
		if err != nil {
			h.w.pauses.reopenRun(k)
			h.w.logger.Warn("end a pause run after an accepted send; the scope's next pause may be longer", "channel", h.ch.Name, "key", k, "err", err)
			continue
		}
		if ended {
			h.w.logger.Debug("send accepted after a pause: the scope's next pause starts at its first wait", "channel", h.ch.Name, "key", k)
		}
	}
}
