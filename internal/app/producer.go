package app

import (
	"context"
	"net"
	"net/netip"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/producer"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

// NewProducer returns the producer of cfg's enabled channels: their rules,
// headroom, tenant weights and pause scopes as the workers pace them, their
// payload caps, cfg's egress policy and worker.max_retry. rdb and lim
// (both, or neither: a producer that can only Check, for a dry run or a
// look before Redis is reached) are where it enqueues and plans; count
// (nil: none) is told each campaign's new tasks (delivery.Store.AddEnqueued).
func NewProducer(cfg *config.Config, rdb redis.UniversalClient, lim *throttle.Redis,
	count func(ctx context.Context, tenant, campaign string, n int) error) (*producer.Client, error) {
	var chans []worker.Channel
	for _, name := range tasks.Channels() {
		cc := cfg.Channels[name]
		if cc == nil || !cc.Enabled {
			continue
		}
		taskType, _ := tasks.ChannelTaskType(name)
		ch := worker.Channel{Name: name, TaskType: taskType, Queue: cc.Queue, Rules: cc.Rules(), PauseScopes: worker.BundledPauseScopes(name)}
		cc.ChannelSettings.Apply(&ch) // the headroom, tenant weights and payload cap the workers use
		chans = append(chans, ch)
	}
	opts := producer.Options{Channels: chans, Egress: egressOf(cfg.Egress.AllowCIDRs), MaxRetry: cfg.Worker.MaxRetry, Count: count}
	if wa := cfg.Channels["whatsapp"]; wa != nil && wa.Enabled {
		opts.WhatsAppTemplates = wa.Templates
	}
	if wh := cfg.Channels["webhook"]; wh != nil && wh.Enabled {
		opts.WebhookEndpoints = webhookEndpoints(wh)
	}
	if rdb != nil {
		opts.Redis, opts.Limiter = rdb, lim
	}
	return producer.New(opts)
}

// CheckTarget holds a webhook or HTTP-call target to the egress policy
// egress.allow_cidrs (allow) gives, as the producer and the worker's dialer
// hold it (producer.CheckTarget): for a flag such as `sluice send --url`,
// checked once before any row. The error names field.
func CheckTarget(allow []netip.Prefix, field, target string) error {
	return producer.CheckTarget(egressOf(allow), field, target)
}

// Resolver looks up target names for the enqueue-time check (the producer's
// CheckTarget) and the webhook and HTTP-call clients NewWorker builds; nil
// is net.DefaultResolver. Tests stand in a fake DNS (internal/dnstest)
// before they start.
var Resolver *net.Resolver

// egressOf is the egress policy egress.allow_cidrs (allow) gives, for the
// enqueue-time checks and the webhook and HTTP-call clients alike.
func egressOf(allow []netip.Prefix) channels.Egress {
	return channels.Egress{Allow: allow, Resolver: Resolver}
}
