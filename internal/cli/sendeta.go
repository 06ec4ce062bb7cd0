package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/limitview"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

// expectedEnd is when a campaign's last send is expected.
type expectedEnd struct {
	// At is the estimate: the latest planned slot of its sends, or later
	// where a pause holds their keys or their pace was lowered
	// (limitview.Drain). Zero when Unknown is set.
	At time.Time
	// Planned is the latest planned slot (worker.Enqueued.ETA).
	Planned time.Time
	// Why says what moved At past Planned ("held by …, then 5 sends at
	// 1/s"), or why
	// no time can be said (Unknown); "" when nothing did.
	Why     string
	Unknown bool
}

// estimateWorkers is how many keys estimateEnd reads at once.
const estimateWorkers = 8

// estimateEnd corrects the campaign's planned end (planned, the latest of
// its sends' slots) for what the plan did not see: the pauses that hold the
// GCRA keys its sends were planned on (keys) and the adaptive limits that
// pace them slower than planned. It reads the pauses that can hold keys
// (keyPauses) and the adaptive limits once, then each key that one of them
// concerns (limitview.ReadKey; the others drain as planned). The error is
// Redis's.
func estimateEnd(ctx context.Context, lim *throttle.Redis, cfg *config.Config, channel string, keys []string, planned time.Time) (expectedEnd, error) {
	end := expectedEnd{At: planned, Planned: planned}
	if len(keys) == 0 {
		return end, nil
	}
	pauses, err := keyPauses(ctx, lim, cfg, channel, keys)
	if err != nil {
		return end, err
	}
	ads, err := lim.Adaptations(ctx)
	if err != nil {
		return end, err
	}
	byKey := limitview.ByKey(ads)
	var read []string
	for _, k := range keys {
		if len(byKey[k]) > 0 || len(limitview.HoldersOf(k, pauses)) > 0 {
			read = append(read, k)
		}
	}
	if len(read) == 0 {
		return end, nil
	}
	overrides, err := lim.Overrides(ctx)
	if err != nil {
		return end, err
	}
	if pauses == nil {
		pauses = []throttle.Paused{} // read: none
	}
	o := limitview.KeyOptions{Overrides: overrides, Adaptations: byKey, Pauses: pauses}
	drains := make([]limitview.Drain, len(read))
	errs := make([]error, len(read))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(estimateWorkers, len(read)) {
		wg.Go(func() {
			for i := range next {
				k, err := limitview.ReadKey(ctx, lim, cfg, read[i], o)
				drains[i], errs[i] = k.Drain, err
			}
		})
	}
	for i := range read {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return end, err
	}
	// The latest estimate decides; one that cannot be said wins.
	slices.SortFunc(drains, func(a, b limitview.Drain) int { return b.At.Compare(a.At) })
	for _, d := range drains {
		if d.Unknown != "" {
			return expectedEnd{Planned: planned, Why: d.Unknown, Unknown: true}, nil
		}
	}
	if d := drains[0]; d.At.After(end.At) {
		end.At, end.Why = d.At, d.Why()
	}
	return end, nil
}

// keyPauses returns the pauses on now of channel that can hold keys (the
// channel's limiter keys), sorted by key: of those Pauses lists for the
// channel, at least every one that holds one of keys (limitview.Holds).
// It reads them by name (throttle.Redis.PausesOf: an HGETALL per pause
// key, pipelined), not by walking the keyspace, which would cost every
// send a walk as long as the keyspace, however small the campaign: the
// keys of the channel's pause scopes (worker.BundledPauseScopes, and
// worker.ScopeChannel for `sluice channels pause`) that hold one of keys
// (limitview.HolderKeys), and the account's pause where the account has
// an id (SMS: the Twilio account SID, which no limiter key names), read
// from the environment as serve reads it (credentialFields). Where that
// id is unknown here, the account's pause can only be found among all the
// channel's: then it lists them all (Pauses), as before.
func keyPauses(ctx context.Context, lim *throttle.Redis, cfg *config.Config, channel string, keys []string) ([]throttle.Paused, error) {
	scopes := maps.Clone(worker.BundledPauseScopes(channel))
	if scopes == nil {
		scopes = map[string]string{}
	}
	scopes[worker.ScopeChannel] = "" // `sluice channels pause`, the workers' credential pauses
	var read []string
	if t := scopes[channels.ScopeAccount]; t != "" {
		k, ok := renderPauseKey(channel, channels.ScopeAccount, t, credentialFields(cfg, channel))
		if !ok {
			return channelPauses(ctx, lim, channel)
		}
		read = append(read, k)
	}
	for _, k := range keys {
		read = append(read, limitview.HolderKeys(k, scopes)...)
	}
	return lim.PausesOf(ctx, read)
}

// renderPauseKey is scope's pause key on channel, its id the template t
// (worker.Channel.PauseScopes) filled from fields, as the workers make it;
// ok is false when a field t names is not among fields.
func renderPauseKey(channel, scope, t string, fields map[string]string) (string, bool) {
	k, err := rules.ParseKey(channel, throttle.PauseKey(channel, scope, t), nil)
	if err != nil {
		return "", false
	}
	return k.Render(fields)
}

// credentialFields are the send fields a channel's workers take from its
// credentials rather than from the task (worker.SMSChannel's account_sid,
// the Twilio account SID), read from this process's environment as `sluice
// serve` reads them (config.Config.Secret); nil where none is set here.
func credentialFields(cfg *config.Config, channel string) map[string]string {
	cc := cfg.Channels[channel]
	if channel != "sms" || cc == nil || cc.AccountSIDEnv == "" {
		return nil
	}
	sid, err := cfg.Secret(cc.AccountSIDEnv)
	if err != nil || channels.CheckAccountSID(sid) != nil {
		return nil // serve would not start with it: no worker pauses under it
	}
	return map[string]string{"account_sid": sid}
}

// String is the end for a person: "at 15:56:21Z (in 7m2s; held by
// sms:paused:channel until 15:56:00Z, then 5 sends at 1/s; planned for
// 15:49:21Z)".
func (e expectedEnd) String() string {
	switch {
	case e.Unknown:
		return fmt.Sprintf("cannot be said: %s (planned for %s)", e.Why, e.Planned.Format(time.RFC3339))
	case e.Why != "":
		return fmt.Sprintf("at %s (%s; %s; planned for %s)", e.At.Format(time.RFC3339), eta(e.At), e.Why, e.Planned.Format(time.RFC3339))
	}
	return fmt.Sprintf("at %s (%s)", e.At.Format(time.RFC3339), eta(e.At))
}

// channelPauses lists the pauses on now of channel's scopes: its own
// ("whatsapp:paused:…") and its spread ones ("whatsapp/1065:paused:…",
// worker.Channel.SpreadBy), sorted by key.
func channelPauses(ctx context.Context, lim *throttle.Redis, channel string) ([]throttle.Paused, error) {
	ps, err := lim.Pauses(ctx, channel)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(ps, func(p throttle.Paused) bool { return rules.ChannelOf(p.Key) != channel }), nil
}
