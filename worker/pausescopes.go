package worker

import (
	"fmt"
	"maps"
	"slices"

	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/throttle"
)

// pauseScopes compiles a channel's pause scopes: Channel.PauseScopes and
// ScopeChannel (`sluice channels pause`), sorted by scope, each key a
// throttle.PauseKey template checked against fields (nil: any field) and
// spread by ch.SpreadBy (a number's pauses beside its limits). The
// worker and the producer (through Pacing) both build a send's pause requests from them
// (pauseRequests), so that a send is planned against the pauses it is
// reserved against.
func pauseScopes(ch Channel, fields []string) ([]pauseScope, error) {
	scopes := maps.Clone(ch.PauseScopes)
	if scopes == nil {
		scopes = map[string]string{}
	}
	scopes[ScopeChannel] = "" // `sluice channels pause`
	var out []pauseScope
	for _, s := range slices.Sorted(maps.Keys(scopes)) {
		t, err := rules.ParseKey(ch.Name, throttle.PauseKey(ch.Name, s, scopes[s]), fields)
		if err != nil {
			return nil, fmt.Errorf("channel %s: pause scope %q: %w", ch.Name, s, err)
		}
		out = append(out, pauseScope{s, t.SpreadBy(ch.SpreadBy)})
	}
	return out, nil
}

// pauseRequests appends to reqs the pause request of each scope of ps that
// a send with fields names (a scope whose fields are empty pauses nothing).
func pauseRequests(reqs []throttle.Request, ps []pauseScope, fields map[string]string) []throttle.Request {
	for _, p := range ps {
		if k, ok := p.key.Render(fields); ok {
			reqs = append(reqs, throttle.PauseRequest(k))
		}
	}
	return reqs
}
