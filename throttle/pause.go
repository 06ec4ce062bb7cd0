package throttle

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Pauses: a provider's throttle names a scope (a WhatsApp number, a pair, a
// Twilio account), and the caller pauses it with Pause. Every send whose
// requests include PauseRequest(key) is then blocked, in every process,
// until the pause ends: Reserve and Consume decide the pause in the same
// script as the send's limits, so a pause set by one worker stops the next
// send of every other at once. Reserve and Plan plan a paused bulk send
// from the first whole second at or after the pause's end (its GCRA limits'
// plan, Reservation.Planned), so a scope's waiting sends come back once
// each, at their limits' pace; Consume, and Reserve for a high-priority
// send, tell it to come back when the pause ends (Decision.RetryAfter).
//
// Runs: a scope throttled again soon after a pause ended is paused longer
// (PauseOptions.Growth), but only while nothing gets through: a run is the
// pauses set with no accepted send between them on the scope. A worker
// whose send on a scope is accepted after the scope's pause ended calls
// EndPauseRun once for that pause (it learns of pauses from WatchPauses,
// so the common path makes no extra Redis call), and the scope's next pause
// starts again at PauseOptions.Wait. Recording every accepted send in
// Redis instead would cost a write per send.

// PauseName is the Limit.Name of PauseRequest's limit.
const PauseName = "paused"

// PauseRequest is the request that blocks a send while key is paused.
func PauseRequest(key string) Request {
	return Request{Key: key, Limit: Limit{Name: PauseName, Algorithm: Pause}}
}

// PauseOptions says how long Pause pauses.
type PauseOptions struct {
	// Wait is the first pause's length (> 0).
	Wait time.Duration
	// Growth multiplies the wait of each pause in a row (a pause set within
	// Memory after the previous one ended, with no accepted send on the
	// scope since: EndPauseRun): 4 gives 6s, 24s, 96s... for a pair that
	// keeps being throttled. Zero or 1 means a fixed wait.
	Growth float64
	// Max caps a grown wait (never a Wait longer than it); zero means
	// Wait × 4^5.
	Max time.Duration
	// Memory is how long after a pause ends another counts as in a row;
	// zero means DefaultPauseMemory.
	Memory time.Duration
	// Code and Reason are the provider's error code and message, for
	// `sluice channels status` and `limits show` (at most 256 bytes kept).
	Code   int
	Reason string
	// Operator marks an operator's pause (`sluice channels pause`): while
	// it lasts, a provider's pause of the same key extends it but keeps its
	// code, reason and this flag, so no credential probe ends it.
	Operator bool
}

// Paused is a scope's pause.
type Paused struct {
	Key    string    // the limiter key (unprefixed)
	Until  time.Time // when it ends (Redis clock)
	Since  time.Time // when it was last set or extended
	InARow int       // pauses in a row (no accepted send between), this one included
	Code   int
	Reason string
	// Operator reports an operator's pause (PauseOptions.Operator).
	Operator bool
	// New reports, from Pause, that the scope was not paused before.
	New bool
}

var (
	pauseSetScript    = redis.NewScript(joinLua("prelude.lua", "pause_set.lua"))
	pauseEndScript    = redis.NewScript(joinLua("prelude.lua", "pause_end.lua"))
	pauseRunEndScript = redis.NewScript(joinLua("prelude.lua", "pause_run_end.lua"))
)

// DefaultPauseMemory is PauseOptions.Memory's default: a pause set within
// 10 minutes of the end of the previous one, with no accepted send between
// (EndPauseRun), is in a row with it.
const DefaultPauseMemory = 10 * time.Minute

// maxPauseReason bounds the reason kept with a pause.
const maxPauseReason = 256

// Pause pauses key (a PauseRequest's key) for o.Wait, grown by o.Growth
// for each pause in a row, and returns the pause. A key already paused
// stays paused at least until its end: answers to sends that were already
// in flight extend a pause, they do not count as a new one. Errors:
// ErrBadRequest for a bad key or options, else Redis'.
func (l *Redis) Pause(ctx context.Context, key string, o PauseOptions) (Paused, error) {
	if err := checkPauseKey(key); err != nil {
		return Paused{}, err
	}
	if o.Wait <= 0 {
		return Paused{}, fmt.Errorf("%w: pause %q: wait %v, want > 0", ErrBadRequest, key, o.Wait)
	}
	growth := o.Growth
	if growth < 1 || growth != growth {
		growth = 1
	}
	most := o.Max
	if most <= 0 {
		most = o.Wait * 1024
	}
	memory := o.Memory
	if memory <= 0 {
		memory = DefaultPauseMemory
	}
	reason := o.Reason
	if len(reason) > maxPauseReason {
		reason = strings.ToValidUTF8(reason[:maxPauseReason], "")
	}
	var now int64
	if l.clock != nil {
		now = l.clock().UnixMicro()
	}
	raw, err := pauseSetScript.Run(ctx, l.rdb, []string{l.Key(key)}, now, o.Wait.Microseconds(),
		strconv.FormatFloat(growth, 'g', -1, 64), max(most, o.Wait).Microseconds(), memory.Microseconds(), o.Code, reason, opFlag(o.Operator)).Int64Slice()
	if err != nil {
		return Paused{}, fmt.Errorf("throttle: pause %q: %w", key, err)
	}
	if len(raw) != 4 {
		return Paused{}, fmt.Errorf("%w: %d values from pause", ErrMalformedReply, len(raw))
	}
	p := Paused{Key: key, Since: time.UnixMicro(raw[0]), Until: time.UnixMicro(raw[1]), InARow: int(raw[2]),
		Code: o.Code, Reason: reason, Operator: o.Operator, New: raw[3] == 1}
	l.prefetch.dropKey(l.Key(key))
	l.announce(ctx, key, p.Until.Sub(p.Since))
	return p, nil
}

// EndPauseRun ends key's run of pauses: the provider accepted a send on
// the scope after its pause ended, so the scope's next Pause starts again
// at its first wait (Paused.InARow 1) instead of growing. It changes
// nothing while key is paused (a pause set since, by any process, keeps
// its run) and reports whether a run was ended: false also for a key with
// no pause within the memory, or whose run had already ended. Workers call
// it once per pause, from the first accepted send that left after the
// pause ended (worker/pauserun.go). Errors: ErrBadRequest for a bad key,
// else Redis'.
func (l *Redis) EndPauseRun(ctx context.Context, key string) (bool, error) {
	if err := checkPauseKey(key); err != nil {
		return false, err
	}
	var now int64
	if l.clock != nil {
		now = l.clock().UnixMicro()
	}
	n, err := pauseRunEndScript.Run(ctx, l.rdb, []string{l.Key(key)}, now).Int64()
	if err != nil {
		return false, fmt.Errorf("throttle: end pause run %q: %w", key, err)
	}
	return n == 1, nil
}

// announce tells WatchPauses in every process that key is paused for
// left (0: no longer). Best effort: the scripts decide pauses anyway.
func (l *Redis) announce(ctx context.Context, key string, left time.Duration) {
	msg := key + " " + strconv.FormatInt(left.Microseconds(), 10)
	pipe := l.rdb.Pipeline()
	pipe.Publish(ctx, l.PausesChannel(), msg)
	pipe.Publish(ctx, legacyPausesChannel(l.prefix), msg) // the earlier release's workers, while a fleet is upgraded
	if _, err := pipe.Exec(context.WithoutCancel(ctx)); err != nil {
		l.warn.eventWrite.warn(ctx, l.logger(), "throttle: pause announcement dropped", "key", key, "err", err)
	}
}

// WatchPauses calls fn for every pause set or extended (left > 0) or ended
// (left 0) by any process, from its subscription on until ctx ends; left
// is counted from the announcement. Workers use it to stop sends they hold
// for a slot taken before the pause (a firm reservation), without a round
// trip. It returns ctx's error, or the subscription's.
func (l *Redis) WatchPauses(ctx context.Context, fn func(key string, left time.Duration)) error {
	return l.watch(ctx, l.PausesChannel(), "pauses", func(payload string) {
		key, v, found := strings.Cut(payload, " ")
		us, err := strconv.ParseInt(v, 10, 64)
		if !found || err != nil || us < 0 {
			return
		}
		if us > 0 {
			l.prefetch.dropKey(l.Key(key))
		}
		fn(key, time.Duration(us)*time.Microsecond)
	})
}

// watch subscribes to channel and calls fn with each message's payload
// until ctx ends; what names it in the error. It returns ctx's error, the
// subscription's, or nil when the subscription's channel closed.
func (l *Redis) watch(ctx context.Context, channel, what string, fn func(payload string)) error {
	sub := l.rdb.Subscribe(ctx, channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		return fmt.Errorf("throttle: watch %s: %w", what, err)
	}
	ch := sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m, ok := <-ch:
			if !ok {
				return nil
			}
			fn(m.Payload)
		}
	}
}

// Resume ends key's pause now, and its probe record (SetProbe); it
// reports whether key was paused. The pause is remembered for
// DefaultPauseMemory, so that a pause of the same scope soon after, with
// no accepted send between (EndPauseRun), counts in a row.
func (l *Redis) Resume(ctx context.Context, key string) (bool, error) {
	if err := checkPauseKey(key); err != nil {
		return false, err
	}
	var now int64
	if l.clock != nil {
		now = l.clock().UnixMicro()
	}
	k := l.Key(key)
	u, err := pauseEndScript.Run(ctx, l.rdb, []string{k, probeKey(k), probeLockKey(k)}, now, DefaultPauseMemory.Microseconds()).Int64()
	if err != nil {
		return false, fmt.Errorf("throttle: resume %q: %w", key, err)
	}
	l.announce(ctx, key, 0)
	return u > 0 && time.UnixMicro(u).After(l.now(ctx)), nil
}

// PauseOf returns key's pause, or nil when key is not paused now.
func (l *Redis) PauseOf(ctx context.Context, key string) (*Paused, error) {
	if err := checkPauseKey(key); err != nil {
		return nil, err
	}
	p, err := l.pauseOf(ctx, key)
	if err != nil || p == nil || !p.Until.After(l.now(ctx)) {
		return nil, err
	}
	return p, nil
}

// pauseOf reads key's pause hash; nil when there is none.
func (l *Redis) pauseOf(ctx context.Context, key string) (*Paused, error) {
	v, err := l.rdb.HGetAll(ctx, l.Key(key)).Result()
	if err != nil {
		return nil, fmt.Errorf("throttle: pause %q: %w", key, err)
	}
	return parsePause(key, v), nil
}

// parsePause is key's pause from its hash's fields v (HGETALL); nil when
// v has no end (no pause hash).
func parsePause(key string, v map[string]string) *Paused {
	u, ok := v["u"]
	if !ok {
		return nil
	}
	p := &Paused{Key: key, Reason: v["reason"]}
	us, _ := strconv.ParseInt(u, 10, 64)
	at, _ := strconv.ParseInt(v["at"], 10, 64)
	p.Until, p.Since = time.UnixMicro(us), time.UnixMicro(at)
	p.InARow, _ = strconv.Atoi(v["n"])
	p.Code, _ = strconv.Atoi(v["code"])
	p.Operator = v["op"] == "1"
	return p
}

// Pauses returns the scopes paused now whose keys start with prefix
// (unprefixed, such as "whatsapp:"), sorted by key. keyPrefix "" lists all.
func (l *Redis) Pauses(ctx context.Context, keyPrefix string) ([]Paused, error) {
	var out []Paused
	now := l.now(ctx)
	err := l.Each(ctx, keyPrefix, func(key string) error {
		if !IsPauseKey(key) {
			return nil
		}
		p, err := l.pauseOf(ctx, key)
		if err == nil && p != nil && p.Until.After(now) {
			out = append(out, *p)
		}
		return err
	})
	slices.SortFunc(out, func(a, b Paused) int { return strings.Compare(a.Key, b.Key) })
	return out, err
}

// pausesOfBatch is how many pause keys PausesOf reads in one pipeline.
const pausesOfBatch = 1024

// PausesOf returns the pauses on now among keys (PauseKeys, unprefixed; a
// key named twice counts once), sorted by key, as Pauses lists them: for a
// caller that knows which scopes it needs (the pauses that can hold a
// campaign's limiter keys), without walking the keyspace. It asks, one
// EXISTS a channel, whether any of a channel's keys is there, then reads
// each key of such a channel with one HGETALL, pipelined pausesOfBatch
// keys a round trip; a command names one channel's keys, which share its
// hash tag, so the channels may lie in any hash slots. A key with no
// pause, or whose pause ended, is left out. Errors: ErrBadRequest for a key that is not a pause key
// (IsPauseKey), else Redis'.
func (l *Redis) PausesOf(ctx context.Context, keys []string) ([]Paused, error) {
	for _, k := range keys {
		if err := checkPauseKey(k); err != nil {
			return nil, err
		}
		if !IsPauseKey(k) {
			return nil, fmt.Errorf("%w: %q is not a pause key (<channel>:%s[:…])", ErrBadRequest, k, PauseName)
		}
	}
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	if len(keys) == 0 {
		return nil, nil
	}
	now := l.now(ctx)
	var out []Paused
	for batch := range slices.Chunk(keys, pausesOfBatch) {
		maybe, err := l.channelsWithKeys(ctx, batch)
		if err != nil {
			return nil, fmt.Errorf("throttle: pauses of %d keys: %w", len(keys), err)
		}
		if len(maybe) == 0 {
			continue
		}
		pipe := l.rdb.Pipeline()
		cmds := make([]*redis.MapStringStringCmd, len(maybe))
		for i, k := range maybe {
			cmds[i] = pipe.HGetAll(ctx, l.Key(k))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("throttle: pauses of %d keys: %w", len(keys), err)
		}
		for i, c := range cmds {
			if p := parsePause(maybe[i], c.Val()); p != nil && p.Until.After(now) {
				out = append(out, *p)
			}
		}
	}
	return out, nil
}

// channelsWithKeys returns the keys of sorted (pause keys, sorted) whose
// scope (channel) has at least one of them in Redis, in their order: one
// EXISTS a scope, its keys sharing its hash tag (one Cluster slot).
// Pauses are rare and a campaign names a pause key a pair, so most calls
// read one command a scope instead of one a key. A scope's keys are
// contiguous in sorted.
func (l *Redis) channelsWithKeys(ctx context.Context, sorted []string) ([]string, error) {
	var groups [][]string
	for i, k := range sorted {
		if i == 0 || scope(k) != scope(sorted[i-1]) {
			groups = append(groups, nil)
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], k)
	}
	pipe := l.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(groups))
	for i, g := range groups {
		full := make([]string, len(g))
		for j, k := range g {
			full[j] = l.Key(k)
		}
		cmds[i] = pipe.Exists(ctx, full...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	var out []string
	for i, g := range groups {
		if cmds[i].Val() > 0 {
			out = append(out, g...)
		}
	}
	return out, nil
}

// checkPauseKey accepts what validate accepts as a request's key.
func checkPauseKey(key string) error {
	if !validKey(key) {
		return fmt.Errorf("%w: pause key %q: %s", ErrBadRequest, key, keyShape)
	}
	return nil
}

// opFlag is pause_set.lua's operator argument.
func opFlag(operator bool) string {
	if operator {
		return "1"
	}
	return "0"
}
