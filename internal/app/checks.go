package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

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
// egress.allow_cidrs admits them), a host name by the addresses it resolves
// to (CheckTarget). URLs in errors show scheme and host only.
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
// (nil: config.Default()) with channels.Egress.CheckTarget: the literal
// host, and a host name by every address it resolves to, so a name for
// 127.0.0.1 is refused at enqueue as the worker's dialer would refuse it.
// A name that does not resolve (no such host) or whose lookup fails (a
// timeout, SERVFAIL: the target cannot be checked) is an error too. The
// lookup gets channels.DefaultLookupTimeout; a name's verdict (accepted,
// refused for its address, no such host) is kept for targetTTL, so a batch to one
// host looks it up once. The error names field and shows the URL's scheme
// and host only.
func CheckTarget(cfg *config.Config, field, target string) error {
	if cfg == nil {
		cfg = config.Default()
	}
	if err := checkTarget(egressOf(cfg), target); err != nil {
		return fmt.Errorf("%s %s: %w", field, redact.URL(target), err)
	}
	return nil
}

// Resolver looks up target names for the enqueue-time check (CheckTarget)
// and the webhook and HTTP-call clients NewWorker builds; nil is
// net.DefaultResolver. Tests stand in a fake DNS (internal/dnstest) before
// they start.
var Resolver *net.Resolver

// egressOf is cfg's egress policy, for the enqueue-time checks and the
// webhook and HTTP-call clients alike.
func egressOf(cfg *config.Config) channels.Egress {
	return channels.Egress{Allow: cfg.Egress.AllowCIDRs, Resolver: Resolver}
}

// targetTTL is how long a name's verdict is kept; the dialer checks the
// address again at each send whatever the verdict.
const targetTTL = 30 * time.Second

// maxTargets bounds the verdicts kept; when full they are all dropped.
const maxTargets = 1024

var targets struct {
	sync.Mutex
	m map[string]targetVerdict
}

type targetVerdict struct {
	err   error // nil, an *channels.EgressError or channels.ErrNoSuchHost
	until time.Time
}

// checkTarget is e.CheckTarget(target), its verdicts on names kept for
// targetTTL; lookup failures other than no such host are not kept.
func checkTarget(e channels.Egress, target string) error {
	if err := e.CheckURL(target); err != nil {
		return err
	}
	u, _ := url.Parse(target) // CheckURL parsed it
	key := fmt.Sprintf("%p %v %s", e.Resolver, e.Allow, strings.ToLower(u.Hostname()))
	now := time.Now()
	targets.Lock()
	v, ok := targets.m[key]
	targets.Unlock()
	if ok && now.Before(v.until) {
		return v.err
	}
	err := e.CheckTarget(context.Background(), target)
	var ee *channels.EgressError
	if err == nil || errors.As(err, &ee) || errors.Is(err, channels.ErrNoSuchHost) {
		targets.Lock()
		if targets.m == nil || len(targets.m) >= maxTargets {
			targets.m = map[string]targetVerdict{}
		}
		targets.m[key] = targetVerdict{err, now.Add(targetTTL)}
		targets.Unlock()
	}
	return err
}
