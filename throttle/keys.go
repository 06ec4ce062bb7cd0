package throttle

import (
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The key book: every Redis key and pub/sub channel the limiter writes is
// built here, and nowhere else in the package (the keys above the limiter,
// Sluice's own, are in package control's keys.go). All start with the
// prefix (Options.Prefix, "sluice") and ':'.
//
// Redis Cluster: a key's hash tag is the part in braces. A limiter key's
// tag is its scope, its first segment ({whatsapp}), so that one script
// sees every key of a scope; the keys beside a limit's state (its plan,
// backlog and probe keys) add a suffix after the tag and share its slot.
// The limiter's own records take a tag of their own that starts with '_'
// ({_events}, {_overrides}): no scope can be named so (validKey), so they
// never mix with a limit's keys and List leaves them out.

// Suffixes of the keys beside a limiter key's state, on its hash tag.
const (
	// planSuffix: a GCRA limit's plan tail (Reserve).
	planSuffix = "|plan"
	// backlogSuffix: a GCRA limit's planned sends, a sorted set (Reserve).
	backlogSuffix = "|backlog"
	// pushesSuffix: a GCRA limit's ledger of its recent pushes after late
	// sends, a sorted set (PushAfterLate).
	pushesSuffix = "|pushes"
	// probeSuffix: a pause's probe record, a hash: fields (JSON), code, n
	// (probes so far) (SetProbe).
	probeSuffix = "|probe"
	// probeLockSuffix: a string held while one process's turn to probe
	// lasts (ClaimProbe).
	probeLockSuffix = "|probe-lock"
)

// redisKey is the Redis key of a limiter key: "whatsapp:pair:+1202…" →
// "sluice:{whatsapp}:pair:+1202…", "whatsapp" → "sluice:{whatsapp}". Hash
// tag: the scope, {whatsapp}.
func redisKey(prefix, key string) string {
	s, rest, _ := strings.Cut(key, ":")
	if rest == "" {
		return prefix + ":{" + s + "}"
	}
	return prefix + ":{" + s + "}:" + rest
}

// Key returns the Redis key for a limiter key: "whatsapp:pair:+1202…" →
// "sluice:{whatsapp}:pair:+1202…". The braces are the Redis Cluster hash tag.
func (l *Redis) Key(key string) string { return redisKey(l.prefix, key) }

// planKey is a GCRA limit's plan tail beside its state key full (a Key):
// "sluice:{whatsapp}:number:1065|plan". Hash tag: full's, {whatsapp}.
func planKey(full string) string { return full + planSuffix }

// backlogKey is a GCRA limit's backlog of planned sends beside full:
// "sluice:{whatsapp}:number:1065|backlog". Hash tag: full's, {whatsapp}.
func backlogKey(full string) string { return full + backlogSuffix }

// probeKey is a pause's probe record beside its pause key full:
// "sluice:{whatsapp}:paused:sender:1065|probe". Hash tag: full's.
func probeKey(full string) string { return full + probeSuffix }

// probeLockKey is the lock of a pause's probe turn:
// "sluice:{whatsapp}:paused:sender:1065|probe-lock". Hash tag: full's.
func probeLockKey(full string) string { return full + probeLockSuffix }

// pushLedgerKey is a GCRA limit's ledger of pushes beside full:
// "sluice:{whatsapp}:number:1065|pushes". Hash tag: full's.
func pushLedgerKey(full string) string { return full + pushesSuffix }

// stateOfBacklog is the key whose backlog k is (a backlogKey): k without
// "|backlog"; ok is false for any other key.
func stateOfBacklog(k string) (state string, ok bool) { return strings.CutSuffix(k, backlogSuffix) }

// isBookKey reports whether a key is a plan, backlog or push ledger key.
func isBookKey(k string) bool {
	return strings.HasSuffix(k, planSuffix) || strings.HasSuffix(k, backlogSuffix) || strings.HasSuffix(k, pushesSuffix)
}

// isProbeKey reports whether a key is a probe record or its lock.
func isProbeKey(k string) bool {
	return strings.HasSuffix(k, probeSuffix) || strings.HasSuffix(k, probeLockSuffix)
}

// IsPauseKey reports whether an (unprefixed) key is a pause: its second
// segment is "paused", as PauseKey makes them.
func IsPauseKey(key string) bool {
	_, rest, _ := strings.Cut(key, ":")
	return rest == PauseName || strings.HasPrefix(rest, PauseName+":")
}

// PauseKey is the limiter key of a scope's pause, a hash:
// "<channel>:paused:<scope>[:<id>]" ("whatsapp:paused:sender:106540352242922",
// in Redis "sluice:{whatsapp}:paused:sender:106540352242922"); id "" for a
// scope that covers the whole channel. Hash tag: the channel, {whatsapp},
// so a send's script sees its scope's pause beside its limits.
func PauseKey(channel, scope, id string) string {
	k := channel + ":" + PauseName + ":" + scope
	if id != "" {
		k += ":" + id
	}
	return k
}

// StreamKey is the Redis key of the events stream: "sluice:{_events}".
// Hash tag {_events}.
func (l *Redis) StreamKey() string { return l.prefix + ":{_events}" }

// eventMarkKey is the marker that an event was written for mark ("<type>:
// <key>:<window end, Unix ms>") within its window, beside the stream so
// that events.lua sees both: "sluice:{_events}:seen:limits.exceeded:
// whatsapp:number:1065:1764230400000". Hash tag {_events}.
func (l *Redis) eventMarkKey(mark string) string { return l.StreamKey() + ":seen:" + mark }

// OverridesKey is the Redis hash of runtime overrides, "sluice:{_overrides}":
// field = limiter key or a pattern ending in '*', value = the Override as
// JSON. Hash tag {_overrides}.
func (l *Redis) OverridesKey() string { return l.prefix + ":{_overrides}" }

// AdaptKey is the Redis hash of adaptive state, "sluice:{_adaptive}":
// field = limiter key, value = "<version> <JSON of the key's limits by
// name>". Hash tag {_adaptive}.
func (l *Redis) AdaptKey() string { return l.prefix + ":{_adaptive}" }

// MarginsKey is the hash the pacing margins are published in,
// "sluice:{_margins}": field "<channel>|<process>", value the Margin as
// JSON. Hash tag {_margins}.
func (l *Redis) MarginsKey() string { return l.prefix + ":{_margins}" }

// PausesChannel is the pub/sub channel on which Pause and Resume announce
// a pause: "KEY REMAINING_US" (0: ended); WatchPauses reads it. It names
// the prefix and the database, "sluice:{_pauses}:db0": pub/sub is shared
// by every database of a server (and by every node of a Cluster), so two
// deployments on one server, on two databases or under two prefixes,
// never hear each other's pauses. The hash tag {_pauses} only keeps the
// name's shape; a Cluster broadcasts a PUBLISH to every node.
func (l *Redis) PausesChannel() string { return pausesChannel(l.prefix, l.db) }

// PushesChannel is the pub/sub channel on which PushAfterLate announces
// that a limit's slots moved on: "BY_US AT_US SLOT_US KEY"; WatchPushes
// reads it. Named per prefix and database, as PausesChannel.
func (l *Redis) PushesChannel() string { return l.prefix + ":{_pushes}:db" + strconv.Itoa(l.db) }

func pausesChannel(prefix string, db int) string {
	return prefix + ":{_pauses}:db" + strconv.Itoa(db)
}

// legacyPausesChannel is the name the release before issue 21 announced
// and watched pauses on, "sluice:{_pauses}", shared by every database.
// announce publishes there too, for one release, so that workers of that
// release still stop the sends they hold while a fleet is upgraded; nothing
// subscribes to it.
func legacyPausesChannel(prefix string) string { return prefix + ":{_pauses}" }

// databaseOf is the database number rdb selects: its Options().DB for a
// single-node or Sentinel client, 0 for a Cluster (which has only db 0)
// and for any other client.
func databaseOf(rdb redis.UniversalClient) int {
	if c, ok := rdb.(*redis.Client); ok {
		return c.Options().DB
	}
	return 0
}

// scanMatch is the SCAN pattern for the limiter keys under prefix
// (unprefixed, "whatsapp:pair:"; "" for all): "sluice:{whatsapp}:pair:*",
// "sluice:*", glob characters of the key escaped. A prefix within the
// scope ("whatsapp", "whats") matches every scope it begins, spread ones
// ("whatsapp/1065") too: "sluice:{whatsapp*"; the caller keeps the keys
// that start with prefix.
func (l *Redis) scanMatch(prefix string) string {
	var full string
	switch {
	case prefix == "":
		full = l.prefix + ":"
	case !strings.Contains(prefix, ":"):
		full = l.prefix + ":{" + prefix
	default:
		full = l.Key(prefix)
	}
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)
	return r.Replace(full) + "*"
}

// backlogMatch is the SCAN pattern of every backlog key: "sluice:*|backlog".
func (l *Redis) backlogMatch() string { return l.prefix + ":*" + backlogSuffix }

// strip turns a full key back into the limiter key, "scope:rest":
// "sluice:{whatsapp}:pair:+1202…" → "whatsapp:pair:+1202…".
func (l *Redis) strip(full string) string {
	s := strings.TrimPrefix(full, l.prefix+":")
	if strings.HasPrefix(s, "{") {
		if end := strings.IndexByte(s, '}'); end > 0 {
			return s[1:end] + s[end+1:]
		}
	}
	return s
}
