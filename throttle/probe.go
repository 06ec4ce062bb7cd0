package throttle

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
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

const (
	probeSuffix     = "|probe"      // hash: fields (JSON), code, n (probes so far)
	probeLockSuffix = "|probe-lock" // string: held while one process's turn lasts
)

func isProbeKey(k string) bool {
	return strings.HasSuffix(k, probeSuffix) || strings.HasSuffix(k, probeLockSuffix)
}

// SetProbe records that pauseKey (a PauseKey) ends only when a probe
// succeeds: fields are what the probe needs, code the provider's error
// code. The record lives for ttl (the pause's length; at least a minute);
// setting it again keeps the count of probes made. Errors:
// ErrBadRequest for a bad key, else Redis'.
func (l *Redis) SetProbe(ctx context.Context, pauseKey string, fields map[string]string, code int, ttl time.Duration) error {
	if err := checkPauseKey(pauseKey); err != nil {
		return err
	}
	b, err := json.Marshal(fields)
	if err != nil {
		return fmt.Errorf("throttle: probe %q: %w", pauseKey, err)
	}
	k := l.Key(pauseKey) + probeSuffix
	_, err = l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, k, "fields", b, "code", code)
		p.PExpire(ctx, k, max(ttl, time.Minute))
		return nil
	})
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

var claimProbeScript = redis.NewScript(`
-- KEYS[1] the probe record  KEYS[2] its lock
-- ARGV[1] first interval ms  ARGV[2] most ms
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
if redis.call('EXISTS', KEYS[2]) == 1 then return {} end
local n = redis.call('HINCRBY', KEYS[1], 'n', 1)
local every = math.min(tonumber(ARGV[2]), tonumber(ARGV[1]) * 2 ^ (n - 1))
redis.call('SET', KEYS[2], '1', 'PX', math.floor(every))
local v = redis.call('HMGET', KEYS[1], 'fields', 'code')
return {n, math.floor(every), v[1] or '{}', v[2] or '0'}
`)

// ClaimProbe gives this process the next turn to probe pauseKey's
// credentials: ok is false when the pause has no probe record (nothing to
// probe) or another process's turn has not ended. Turns are first apart,
// doubling with each probe up to most (30 s, 1 min, 2 min... 10 min).
func (l *Redis) ClaimProbe(ctx context.Context, pauseKey string, first, most time.Duration) (p Probe, ok bool, err error) {
	if err := checkPauseKey(pauseKey); err != nil {
		return Probe{}, false, err
	}
	if first <= 0 || most < first {
		return Probe{}, false, fmt.Errorf("%w: probe %q: interval %v up to %v", ErrBadRequest, pauseKey, first, most)
	}
	k := l.Key(pauseKey)
	raw, err := claimProbeScript.Run(ctx, l.rdb, []string{k + probeSuffix, k + probeLockSuffix}, first.Milliseconds(), most.Milliseconds()).Slice()
	if err == redis.Nil {
		return Probe{}, false, nil
	}
	if err != nil {
		return Probe{}, false, fmt.Errorf("throttle: probe %q: %w", pauseKey, err)
	}
	if len(raw) == 0 {
		return Probe{}, false, nil
	}
	if len(raw) != 4 {
		return Probe{}, false, fmt.Errorf("%w: %d values from probe", ErrMalformedReply, len(raw))
	}
	n, _ := raw[0].(int64)
	every, _ := raw[1].(int64)
	fs, _ := raw[2].(string)
	cs, _ := raw[3].(string)
	p = Probe{N: int(n), Next: time.Duration(every) * time.Millisecond}
	if err := json.Unmarshal([]byte(fs), &p.Fields); err != nil {
		return Probe{}, false, fmt.Errorf("%w: probe %q fields: %v", ErrMalformedReply, pauseKey, err)
	}
	fmt.Sscan(cs, &p.Code)
	return p, true, nil
}
