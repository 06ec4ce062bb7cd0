package app

import (
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/redact"
	"github.com/sluice-dev/sluice/tasks"
)

// CheckTask holds a built task to what a worker with cfg would accept, so a
// producer (the CLI, an API) is refused now, not by an archived task later:
// the channel's max_payload_bytes, and for webhook and http tasks the
// target against egress (loopback, private, link-local and the rest, unless
// egress.allow_cidrs admits them). URLs in errors show scheme and host only.
func CheckTask(cfg *config.Config, t *asynq.Task) error {
	if err := CheckEnabled(cfg, tasks.DefaultQueue(t.Type())); err != nil {
		return err
	}
	if err := CheckSize(cfg, t); err != nil {
		return err
	}
	var target string
	switch t.Type() {
	case tasks.TypeWebhookDeliver:
		p, err := tasks.DecodeWebhookDeliver(t.Payload())
		if err != nil {
			return err
		}
		target = p.URL
	case tasks.TypeHTTPCall:
		p, err := tasks.DecodeHTTPCall(t.Payload())
		if err != nil {
			return err
		}
		target = p.URL
	default:
		return nil
	}
	return CheckTarget(cfg, "url", target)
}

// CheckEnabled refuses a send on a channel that cfg (nil: config.Default())
// disables, as the API does (422): no worker with cfg would send it.
func CheckEnabled(cfg *config.Config, channel string) error {
	if cfg == nil {
		cfg = config.Default()
	}
	if cc := cfg.Channels[channel]; cc != nil && !cc.Enabled {
		return fmt.Errorf("channel: %s is disabled in this configuration (channels.%s.enabled)", channel, channel)
	}
	return nil
}

// CheckSize holds t to its channel's max_payload_bytes in cfg (nil:
// config.Default()).
func CheckSize(cfg *config.Config, t *asynq.Task) error {
	if cfg == nil {
		cfg = config.Default()
	}
	ch := tasks.DefaultQueue(t.Type())
	if cc := cfg.Channels[ch]; cc != nil && cc.MaxPayloadBytes > 0 && len(t.Payload()) > cc.MaxPayloadBytes {
		return fmt.Errorf("payload: %d bytes encoded, over channels.%s.max_payload_bytes (%d)", len(t.Payload()), ch, cc.MaxPayloadBytes)
	}
	return nil
}

// CheckTarget holds a webhook or HTTP-call target to cfg's egress policy
// (nil: config.Default()); the error names field and shows the URL's scheme
// and host only.
func CheckTarget(cfg *config.Config, field, target string) error {
	if cfg == nil {
		cfg = config.Default()
	}
	if err := egressOf(cfg).CheckURL(target); err != nil {
		return fmt.Errorf("%s %s: %w", field, redact.URL(target), err)
	}
	return nil
}

// egressOf is cfg's egress policy, for the enqueue-time checks and the
// webhook and HTTP-call clients alike.
func egressOf(cfg *config.Config) channels.Egress {
	return channels.Egress{Allow: cfg.Egress.AllowCIDRs}
}
