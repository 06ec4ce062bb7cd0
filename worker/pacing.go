package worker

import (
	"fmt"

	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
)

// Pacing is how a channel's workers reserve its sends: the limiter requests
// of its rules and pause scopes, its tenants' weights and its headroom, read
// from a Channel with the defaults the worker gives them. A producer that
// plans sends at enqueue (producer.Client) plans with it, so that a send is
// planned against what it is reserved against when it is dequeued.
type Pacing struct {
	ch     Channel
	rules  *rules.Set
	pauses []pauseScope
}

// NewPacing compiles ch's Rules and PauseScopes against its TaskType's
// fields and checks its TenantWeights; Name and TaskType are required,
// Prepare is not used. The error names the channel: a task type the tasks
// package does not know, a rule or pause scope that does not compile, a
// weight out of range.
func NewPacing(ch Channel) (*Pacing, error) {
	fields, known := tasks.FieldNames(ch.TaskType)
	if !known {
		return nil, fmt.Errorf("channel %s: task type %q: not one the tasks package defines", ch.Name, ch.TaskType)
	}
	set, err := rules.Compile(ch.Name, ch.SpreadBy, fields, ch.Rules)
	if err == nil {
		err = ch.checkWeights()
	}
	if err == nil {
		err = ch.checkGroups()
	}
	var pauses []pauseScope
	if err == nil {
		pauses, err = pauseScopes(ch, fields)
	}
	if err != nil {
		return nil, err
	}
	return &Pacing{ch: ch, rules: set, pauses: pauses}, nil
}

// Channel is the channel the pacing was made from.
func (p *Pacing) Channel() Channel { return p.ch }

// Queue is the queue the channel's workers serve: Channel.Queue, else the
// task type's default queue.
func (p *Pacing) Queue() string { return p.ch.queueName() }

// Queues are every queue the channel's workers serve (Channel.Queues).
func (p *Pacing) Queues() []string { return p.ch.Queues() }

// QueueFor is the queue of a send with fields (Channel.QueueFor): its
// sender's queue group where the channel has groups, else Queue.
func (p *Pacing) QueueFor(fields map[string]string) string { return p.ch.QueueFor(fields) }

// Rules returns the requests of the channel's rules for a send with fields
// (the payload's Fields()), without its pauses.
func (p *Pacing) Rules(fields map[string]string) []throttle.Request {
	return p.rules.Requests(fields)
}

// Requests returns what a worker reserves for a send with fields: Rules'
// requests and the pause request of each pause scope the send names, so
// that a send whose scope is paused is planned from the pause's end.
func (p *Pacing) Requests(fields map[string]string) []throttle.Request {
	return pauseRequests(p.Rules(fields), p.pauses, fields)
}

// Weight is tenant's share weight: Channel.TenantWeights', else 1.
func (p *Pacing) Weight(tenant string) float64 { return p.ch.weight(tenant) }

// Headroom is the fraction the worker paces below each rate: the
// channel's Headroom, 0 meaning throttle.DefaultHeadroom and a negative
// one none (0).
func (p *Pacing) Headroom() float64 { return p.ch.headroom() }
