package producer

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/redact"
)

// CheckTarget holds a webhook or HTTP-call target to the egress policy e
// with channels.Egress.CheckTarget: the literal host, and a host name by
// every address it resolves to, so a name for 127.0.0.1 is refused at
// enqueue as the worker's dialer would refuse it. A name that does not
// resolve (no such host) or whose lookup fails (a timeout, SERVFAIL: the
// target cannot be checked) is an error too. The lookup gets
// channels.DefaultLookupTimeout; a name's verdict (accepted, refused for
// its address, no such host) is kept for targetTTL, so a batch to one host
// looks it up once. The error names field and shows the URL's scheme and
// host only ("url https://192.168.1.10: …").
func CheckTarget(e channels.Egress, field, target string) error {
	if err := checkTarget(e, target); err != nil {
		return fmt.Errorf("%s %s: %w", field, redact.URL(target), err)
	}
	return nil
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
