package throttle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

var cleanupScript = redis.NewScript(joinLua("cleanup.lua"))

// List returns limiter keys (without prefix) that start with prefix, one
// SCAN page at a time: pass cursor 0 first, then the returned cursor until it
// is 0. count is a hint of keys per page. It never uses KEYS. On a Redis
// Cluster client the pages walk the masters one after another, in the order
// of their addresses (the cursor holds the master's place in its top 8
// bits and its SCAN cursor below; a prefix naming a whole scope,
// "whatsapp:", walks only the master of its hash tag): memory stays one
// page, and an unreachable master, or fewer masters than when the walk
// began, is an error, never a short listing. A failover between two pages
// may repeat or skip keys, as SCAN may while a table grows.
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
		if !reserved(s) && strings.HasPrefix(s, prefix) {
			keys = append(keys, s)
		}
	}
	scanner := redis.Cmdable(l.rdb)
	var master, masters uint64
	if cc, ok := l.rdb.(*redis.ClusterClient); ok {
		var all []*redis.Client
		if strings.Contains(prefix, ":") {
			// a whole scope: its keys share its hash tag, one master holds them
			m, err := cc.MasterForKey(ctx, l.Key(prefix))
			if err != nil {
				return nil, 0, fmt.Errorf("throttle: scan %s: %w", match, err)
			}
			all = []*redis.Client{m}
		} else if all, err = mastersOf(ctx, cc); err != nil {
			return nil, 0, fmt.Errorf("throttle: scan %s: %w", match, err)
		}
		master, masters = cursor>>masterShift, uint64(len(all))
		switch {
		case masters > 1<<(64-masterShift):
			return nil, 0, fmt.Errorf("throttle: scan %s: %d masters, more than a cursor can page over (%d)", match, masters, 1<<(64-masterShift))
		case master >= masters:
			return nil, 0, fmt.Errorf("throttle: scan %s: the cluster has %d masters now, fewer than when the listing began: list again from cursor 0", match, masters)
		}
		scanner, cursor = all[master], cursor&(1<<masterShift-1)
	}
	raw, next, err := scanner.Scan(ctx, cursor, match, count).Result()
	if err != nil {
		return nil, 0, fmt.Errorf("throttle: scan %s: %w", match, err)
	}
	for _, k := range raw {
		keep(k)
	}
	if masters > 0 {
		switch {
		case next >= 1<<masterShift:
			return nil, 0, fmt.Errorf("throttle: scan %s: a master's SCAN cursor %d is too large to page across masters", match, next)
		case next != 0:
			next |= master << masterShift
		case master+1 < masters:
			next = (master + 1) << masterShift
		}
	}
	return keys, next, nil
}

// masterShift places a master's index in a cluster List cursor.
const masterShift = 56

// mastersOf are the cluster's masters' clients, in the order of their
// addresses (an unreachable one fails its page's SCAN).
func mastersOf(ctx context.Context, cc *redis.ClusterClient) ([]*redis.Client, error) {
	var mu sync.Mutex
	var all []*redis.Client
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		all = append(all, c)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(all, func(a, b *redis.Client) int { return strings.Compare(a.Options().Addr, b.Options().Addr) })
	return all, nil
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
		// The key's plan and backlog (Reserve) and its push ledger
		// (PushAfterLate: its pushes moved a firm book now gone) go with it.
		full := l.Key(k)
		c, err := l.rdb.Unlink(ctx, full).Result()
		if err == nil {
			err = l.rdb.Unlink(ctx, planKey(full), backlogKey(full), pushLedgerKey(full)).Err()
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

// reserved reports keys that are not limiter state: those whose scope
// starts with '_' (the events stream, overrides, adaptive state, and
// control's keys, keys.go) and the plan, backlog and probe keys beside a
// limit's state.
func reserved(key string) bool {
	return strings.HasPrefix(key, "_") || isBookKey(key) || isProbeKey(key)
}
