package config

import (
	"fmt"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluice-dev/sluice/worker"
)

// retry reads a channel's retry budget, which replaces the default as a
// whole:
//
//	retry:
//	  schedule: [5s, 5m, 30m, 2h, 5h, 10h, 10h]  # waits before each retry
//	  max_attempts: 8                            # failed attempts; default len(schedule)+1
//	  max_age: 24h                               # from the first failed attempt
//
// Values are checked by worker.RetryBudget.Check; each error names the
// field's line and column.
func (d *decoder) retry(n *yaml.Node, path string, c *ChannelConfig) {
	var b worker.RetryBudget
	before := len(d.errs)
	d.mapping(n, path, "field", []string{"schedule", "max_attempts", "max_age"}, func(key string, _, v *yaml.Node) {
		p := join(path, key)
		switch key {
		case "schedule":
			b.Schedule = d.retrySchedule(v, p)
		case "max_attempts":
			if m, ok := d.integer(v, p, 1); ok {
				if m > worker.MaxRetryAttempts {
					d.errorf(resolve(v), p, "want 1 to %d, got %d", worker.MaxRetryAttempts, m)
					return
				}
				b.MaxAttempts = int(m)
			}
		case "max_age":
			if a, ok := d.duration(v, p); ok {
				if a > worker.MaxRetryAge {
					d.errorf(resolve(v), p, "want at most %s, got %s", worker.MaxRetryAge, a)
					return
				}
				b.MaxAge = a
			}
		}
	})
	if len(d.errs) > before {
		return
	}
	if err := b.Check(); err != nil {
		d.errorf(resolve(n), path, "%v", err)
		return
	}
	c.Retry = b
}

// retrySchedule reads a list of waits; nil when any is bad (reported).
func (d *decoder) retrySchedule(n *yaml.Node, path string) []time.Duration {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "want a list of waits such as [5s, 5m, 30m, 2h], got %s", describe(n))
		return nil
	}
	if len(n.Content) > worker.MaxRetrySchedule {
		d.errorf(n, path, "%d waits, want at most %d", len(n.Content), worker.MaxRetrySchedule)
		return nil
	}
	out := make([]time.Duration, 0, len(n.Content))
	ok := true
	for i, item := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		w, good := d.duration(item, p)
		if good && w > worker.MaxRetryWait {
			d.errorf(resolve(item), p, "want at most %s, got %s", worker.MaxRetryWait, w)
			good = false
		}
		ok = ok && good
		out = append(out, w)
	}
	if !ok {
		return nil
	}
	return out
}
