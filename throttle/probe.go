package throttle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Probes: a pause that only a working credential can end (a provider
// refused the channel's token: WhatsApp 190, Twilio 20003) carries a probe
// record beside its pause key. Workers take turns, one at a time across all
// processes, to ask the provider whether the credentials work again; the
// turns are spaced by a growing interval (ClaimProbe). The record holds the
// fields the probe needs (the refused send's phone number ID). It is kept
// under the pause's own hash tag, so one script sees both.

// SetProbe records that pauseKey (a PauseKey) ends only when a probe
// succeeds: fields are what the probe needs, code the provider's error
// code, first the wait before the first probe (the lock a new record takes:
// no process probes sooner) and the interval that doubles after each. The
// record lives for ttl (the pause's length; at least a minute); setting it
// again keeps its count of probes and its lock. Errors: ErrBadRequest for
// a bad key or interval, else Redis'.
func (l *Redis) SetProbe(ctx context.Context, pauseKey string, fields map[string]string, code int, first, ttl time.Duration) error {
	if err := checkPauseKey(pauseKey); err != nil {
		return err
	}
	if first < time.Millisecond {
		return fmt.Errorf("%w: probe %q: first interval %v, want at least 1ms", ErrBadRequest, pauseKey, first)
	}
	b, err := json.Marshal(fields)
	if err != nil {
		return fmt.Errorf("throttle: probe %q: %w", pauseKey, err)
	}
	k := l.Key(pauseKey)
	err = probeSetScript.Run(ctx, l.rdb, []string{probeKey(k), probeLockKey(k)},
		b, code, first.Milliseconds(), max(ttl, time.Minute).Milliseconds()).Err()
	if err != nil {
		return fmt.Errorf("throttle: probe %q: %w", pauseKey, err)
	}
	return nil
}

// Probe is a turn to probe a pause's credentials (ClaimProbe).
type Probe struct {
	Fields map[string]string // as given to SetProbe
	Code   int               // the provider's code that set the pause
	N      int               // this probe's number, 1 for the first
	Next   time.Duration     // the interval before the next turn
}

var (
	probeSetScript   = redis.NewScript(joinLua("probe_set.lua"))
	probeClaimScript = redis.NewScript(joinLua("probe_claim.lua"))
)

// ClaimProbe gives this process the next turn to probe pauseKey's
// credentials: ok is false when the pause has no probe record (nothing to
// probe) or the wait before the next turn (SetProbe's first interval,
// doubling with each probe up to most) has not passed. One process at a
// time across all workers gets the turn. Errors: ErrBadRequest,
// ErrMalformedReply, else Redis'.
func (l *Redis) ClaimProbe(ctx context.Context, pauseKey string, most time.Duration) (p Probe, ok bool, err error) {
	if err := checkPauseKey(pauseKey); err != nil {
		return Probe{}, false, err
	}
	if most < time.Millisecond {
		return Probe{}, false, fmt.Errorf("%w: probe %q: most interval %v", ErrBadRequest, pauseKey, most)
	}
	k := l.Key(pauseKey)
	raw, err := probeClaimScript.Run(ctx, l.rdb, []string{probeKey(k), probeLockKey(k)}, most.Milliseconds()).Slice()
	if errors.Is(err, redis.Nil) {
		return Probe{}, false, nil
	}
	if err != nil {
		return Probe{}, false, fmt.Errorf("throttle: probe %q: %w", pauseKey, err)
	}
	if len(raw) == 0 {
		return Probe{}, false, nil
	}
	return parseProbe(pauseKey, raw)
}

// parseProbe reads probe_claim.lua's {n, every ms, fields, code}.
func parseProbe(pauseKey string, raw []any) (Probe, bool, error) {
	bad := func(what string) (Probe, bool, error) {
		return Probe{}, false, fmt.Errorf("%w: probe %q: %s", ErrMalformedReply, pauseKey, what)
	}
	if len(raw) != 4 {
		return bad(fmt.Sprintf("%d values", len(raw)))
	}
	n, ok1 := raw[0].(int64)
	every, ok2 := raw[1].(int64)
	fs, ok3 := raw[2].(string)
	cs, ok4 := raw[3].(string)
	if !ok1 || !ok2 || !ok3 || !ok4 || n < 1 || every < 1 {
		return bad(fmt.Sprintf("%v", raw))
	}
	p := Probe{N: int(n), Next: time.Duration(every) * time.Millisecond}
	if err := json.Unmarshal([]byte(fs), &p.Fields); err != nil {
		return bad("fields: " + err.Error())
	}
	code, err := strconv.Atoi(cs)
	if err != nil {
		return bad("code: " + err.Error())
	}
	p.Code = code
	return p, true, nil
}
