package throttle

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

var cleanupScript = redis.NewScript(joinLua("cleanup.lua"))

// KeyState is the raw state of one limiter key, for `sluice limits show`.
type KeyState struct {
	Key  string        // full Redis key
	Type string        // Redis type: "string", "hash", "zset"; "none" when missing
	TTL  time.Duration // -1 no TTL; -2 the key does not exist
	// Bytes is the key's MEMORY USAGE.
	Bytes int64
	// Value is a string key's value: a GCRA TAT or a MinInterval last
	// operation, in us since the epoch.
	Value string
	// Fields are a hash's fields: FixedWindow {w, c, bw, b},
	// SlidingWindowCounter {w, c, p}, or GCRA TATs by limit name.
	Fields map[string]string
	// Members are a sorted set's members with their scores as times:
	// SlidingWindowLog entries, Concurrency leases (expiry), Distinct members
	// (last admitted). At most 100, oldest first.
	Members []Member
	// Count is the sorted set's size.
	Count int64
}

// Member is one sorted-set member of a limiter key.
type Member struct {
	Member string
	At     time.Time
}

// Inspect reads a key's state without changing it. key is without prefix
// ("whatsapp:pair:…"). A missing key has Type "none" and TTL -2.
func (l *Redis) Inspect(ctx context.Context, key string) (KeyState, error) {
	full := l.Key(key)
	st := KeyState{Key: full}
	pipe := l.rdb.Pipeline()
	typ := pipe.Type(ctx, full)
	ttl := pipe.PTTL(ctx, full)
	mem := pipe.MemoryUsage(ctx, full)
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return st, fmt.Errorf("throttle: inspect %s: %w", full, err)
	}
	st.Type, st.TTL, st.Bytes = typ.Val(), ttl.Val(), mem.Val()
	if st.TTL > 0 {
		st.TTL = st.TTL.Round(time.Millisecond)
	}
	var err error
	switch st.Type {
	case "string":
		st.Value, err = l.rdb.Get(ctx, full).Result()
	case "hash":
		st.Fields, err = l.rdb.HGetAll(ctx, full).Result()
	case "zset":
		var zs []redis.Z
		if st.Count, err = l.rdb.ZCard(ctx, full).Result(); err == nil {
			zs, err = l.rdb.ZRangeWithScores(ctx, full, 0, 99).Result()
		}
		for _, z := range zs {
			st.Members = append(st.Members, Member{Member: fmt.Sprint(z.Member), At: time.UnixMicro(int64(z.Score))})
		}
	}
	if err != nil && err != redis.Nil {
		return st, fmt.Errorf("throttle: inspect %s: %w", full, err)
	}
	return st, nil
}

// List returns limiter keys (without prefix) that start with prefix, one
// SCAN page at a time: pass cursor 0 first, then the returned cursor until it
// is 0. count is a hint of keys per page. It never uses KEYS. On a Redis
// Cluster client it scans every master and ignores cursor paging.
func (l *Redis) List(ctx context.Context, prefix string, cursor uint64, count int64) (keys []string, next uint64, err error) {
	return l.list(ctx, prefix, cursor, count, false)
}

// ListPlanned is List, but a GCRA limit with planned sends is listed even
// while its state key does not exist (no firm slot taken yet, or its TTL
// ran out before the backlog's sends are due): its backlog names it. A key
// may then come twice in a page or across pages; dashboards dedupe.
func (l *Redis) ListPlanned(ctx context.Context, prefix string, cursor uint64, count int64) (keys []string, next uint64, err error) {
	return l.list(ctx, prefix, cursor, count, true)
}

func (l *Redis) list(ctx context.Context, prefix string, cursor uint64, count int64, planned bool) (keys []string, next uint64, err error) {
	match := l.scanMatch(prefix)
	keep := func(full string) {
		s := l.strip(full)
		if state, ok := stateOfBacklog(s); planned && ok {
			s = state
		}
		if !reserved(s) {
			keys = append(keys, s)
		}
	}
	if cc, ok := l.rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			it := c.Scan(ctx, 0, match, count).Iterator()
			for it.Next(ctx) {
				mu.Lock()
				keep(it.Val())
				mu.Unlock()
			}
			return it.Err()
		})
		return keys, 0, err
	}
	raw, next, err := l.rdb.Scan(ctx, cursor, match, count).Result()
	if err != nil {
		return nil, 0, fmt.Errorf("throttle: scan %s: %w", match, err)
	}
	for _, k := range raw {
		keep(k)
	}
	return keys, next, nil
}

// Each calls fn for every limiter key starting with prefix (without prefix).
func (l *Redis) Each(ctx context.Context, prefix string, fn func(key string) error) error {
	var cursor uint64
	for {
		keys, next, err := l.List(ctx, prefix, cursor, l.scanBatch)
		if err != nil {
			return err
		}
		for _, k := range keys {
			if err := fn(k); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// Reset deletes the state of the given keys (without prefix): their limits
// start over at full capacity. It returns how many existed.
func (l *Redis) Reset(ctx context.Context, keys ...string) (int64, error) {
	var n int64
	for _, k := range keys {
		// One key per call: keys of different scopes live in different
		// cluster slots.
		// The key's plan and backlog (Reserve) go with it.
		full := l.Key(k)
		c, err := l.rdb.Unlink(ctx, full).Result()
		if err == nil {
			err = l.rdb.Unlink(ctx, planKey(full), backlogKey(full)).Err()
		}
		if err != nil {
			return n, fmt.Errorf("throttle: reset %s: %w", k, err)
		}
		// Its adaptive state too: the limits are back at their configured
		// rates (a key whose state expired may still be adapted).
		adapted, err := l.ResetAdaptation(ctx, k)
		if err != nil {
			return n, err
		}
		if c == 0 && adapted {
			c = 1
		}
		n += c
	}
	return n, nil
}

// ResetPrefix deletes every limiter key starting with prefix, and the
// adaptive state of every key starting with it.
func (l *Redis) ResetPrefix(ctx context.Context, prefix string) (int64, error) {
	var keys []string
	seen := map[string]bool{}
	if err := l.Each(ctx, prefix, func(k string) error { keys = append(keys, k); seen[k] = true; return nil }); err != nil {
		return 0, err
	}
	adapted, err := l.rdb.HKeys(ctx, l.AdaptKey()).Result()
	if err != nil {
		return 0, fmt.Errorf("throttle: reset %s*: %w", prefix, err)
	}
	for _, k := range adapted {
		if k != adaptVersionField && strings.HasPrefix(k, prefix) && !seen[k] {
			keys = append(keys, k)
		}
	}
	return l.Reset(ctx, keys...)
}

// CleanupStats says what one Cleanup pass did.
type CleanupStats struct {
	Scanned         int // keys looked at
	ReclaimedLeases int // expired concurrency leases removed (their workers died)
	RemovedKeys     int // keys deleted because they had no TTL
	// ExpiredAdaptations counts keys whose adaptive state was forgotten:
	// no throttle and no change for their ceiling's lifetime.
	ExpiredAdaptations int
}

// Cleanup walks every limiter key once: it reclaims expired concurrency
// leases and deletes limiter state left without a TTL. It then forgets the
// adaptive state of keys that saw no throttle and no change for their
// ceiling's lifetime. Safe to run while
// workers run, from any number of processes.
func (l *Redis) Cleanup(ctx context.Context) (CleanupStats, error) {
	var st CleanupStats
	err := l.Each(ctx, "", func(k string) error {
		st.Scanned++
		r, err := cleanupScript.Run(ctx, l.rdb, []string{l.Key(k)}).Int64Slice()
		if err != nil {
			return fmt.Errorf("throttle: cleanup %s: %w", k, err)
		}
		if len(r) != 2 {
			return fmt.Errorf("%w: cleanup %s: %v", ErrMalformedReply, k, r)
		}
		st.ReclaimedLeases += int(r[0])
		st.RemovedKeys += int(r[1])
		return nil
	})
	if err != nil {
		return st, err
	}
	st.ExpiredAdaptations, err = l.pruneAdaptations(ctx)
	return st, err
}

// reserved reports whether a key belongs to Sluice itself (events stream,
// overrides), not to a limit: its scope starts with '_'.
// reserved reports keys that are not limiter state: "_"-scoped keys and
// the plan and backlog keys beside a GCRA limit's state (Reserve).
func reserved(key string) bool {
	return strings.HasPrefix(key, "_") || isBookKey(key) || isProbeKey(key)
}

// Stats summarizes the limiter's keys, for `sluice limits stats`.
type Stats struct {
	Keys   int64            // limiter keys under the prefix
	ByType map[string]int64 // keys by Redis type
	Bytes  int64            // sum of MEMORY USAGE
	// Top are the keys with the largest share of their limit in use, most
	// used first (only keys limitFor knows).
	Top []KeyUse
}

// BytesPerKey is the mean MEMORY USAGE of a key.
func (s Stats) BytesPerKey() float64 {
	if s.Keys == 0 {
		return 0
	}
	return float64(s.Bytes) / float64(s.Keys)
}

// KeyUse is one key's use of its limit.
type KeyUse struct {
	Key   string
	Name  string // the limit's name
	Used  int64  // capacity - remaining
	Limit int64  // capacity
	Share float64
	Bytes int64
}

// Stats scans every limiter key under prefix once (SCAN, pipelined TYPE and
// MEMORY USAGE per page). limitFor, when not nil, says which limit governs a
// key; those keys' use is read with Status (one round trip each) and the top
// most used are returned.
func (l *Redis) Stats(ctx context.Context, prefix string, top int, limitFor func(key string) (Limit, bool)) (Stats, error) {
	st := Stats{ByType: map[string]int64{}}
	var uses []KeyUse
	var cursor uint64
	var skipped int
	var skipKey string
	var skipErr error
	defer func() {
		if skipped > 0 {
			l.logger().WarnContext(ctx, "throttle: stats left out keys whose use could not be read",
				"skipped", skipped, "key", skipKey, "err", skipErr)
		}
	}()
	for {
		keys, next, err := l.List(ctx, prefix, cursor, l.scanBatch)
		if err != nil {
			return st, err
		}
		pipe := l.rdb.Pipeline()
		types := make([]*redis.StatusCmd, len(keys))
		mems := make([]*redis.IntCmd, len(keys))
		for i, k := range keys {
			types[i] = pipe.Type(ctx, l.Key(k))
			mems[i] = pipe.MemoryUsage(ctx, l.Key(k))
		}
		if len(keys) > 0 {
			if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
				return st, fmt.Errorf("throttle: stats: %w", err)
			}
		}
		for i, k := range keys {
			typ := types[i].Val()
			if typ == "none" { // expired since SCAN saw it
				continue
			}
			st.Keys++
			st.ByType[typ]++
			st.Bytes += mems[i].Val()
			if limitFor == nil {
				continue
			}
			lim, ok := limitFor(k)
			if !ok || lim.Algorithm == Distinct {
				continue
			}
			d, err := l.Status(ctx, Request{Key: k, Limit: lim})
			if err != nil {
				// A limit Status refuses, or a failed round trip:
				// reported once, after the scan.
				if skipped++; skipped == 1 {
					skipKey, skipErr = k, err
				}
				continue
			}
			ld := d.Limits[0]
			u := KeyUse{Key: k, Name: lim.Name, Used: ld.Limit - ld.Remaining, Limit: ld.Limit, Bytes: mems[i].Val()}
			u.Share = float64(u.Used) / float64(max(u.Limit, 1))
			uses = append(uses, u)
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	sort.SliceStable(uses, func(i, j int) bool {
		if uses[i].Share != uses[j].Share {
			return uses[i].Share > uses[j].Share
		}
		return uses[i].Used > uses[j].Used
	})
	if top >= 0 && len(uses) > top {
		uses = uses[:top]
	}
	st.Top = uses
	return st, nil
}
