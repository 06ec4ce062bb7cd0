package throttle

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

var cleanupScript = redis.NewScript(joinLua("cleanup.lua"))

// KeyState is the raw state of one limiter key, for `sluice limits show`.
type KeyState struct {
	Key  string        // full Redis key
	Type string        // "string" (GCRA), "hash" (FixedWindow), "zset" (Concurrency)
	TTL  time.Duration // -1 no TTL; -2 the key does not exist
	// Algorithm is inferred from Type.
	Algorithm Algorithm
	// TAT is GCRA's theoretical arrival time.
	TAT time.Time
	// Window and Used are FixedWindow's current window start and units used in it.
	Window time.Time
	Used   int64
	// Leases are Concurrency's held leases and their expiry times.
	Leases map[string]time.Time
}

// Inspect reads a key's state without changing it. key is without prefix
// ("whatsapp:pair:…"). A missing key has TTL -2 and no fields.
func (l *Limiter) Inspect(ctx context.Context, key string) (KeyState, error) {
	full := l.Key(key)
	st := KeyState{Key: full}
	pipe := l.rdb.Pipeline()
	typ := pipe.Type(ctx, full)
	ttl := pipe.PTTL(ctx, full)
	if _, err := pipe.Exec(ctx); err != nil {
		return st, fmt.Errorf("throttle: inspect %s: %w", full, err)
	}
	st.Type, st.TTL = typ.Val(), ttl.Val()
	if st.TTL > 0 {
		st.TTL = st.TTL.Round(time.Millisecond)
	}
	switch st.Type {
	case "string":
		st.Algorithm = GCRA
		v, err := l.rdb.Get(ctx, full).Int64()
		if err != nil {
			return st, fmt.Errorf("throttle: inspect %s: %w", full, err)
		}
		st.TAT = time.UnixMicro(v)
	case "hash":
		st.Algorithm = FixedWindow
		v, err := l.rdb.HMGet(ctx, full, "w", "c").Result()
		if err != nil {
			return st, fmt.Errorf("throttle: inspect %s: %w", full, err)
		}
		if s, ok := v[0].(string); ok {
			w, _ := strconv.ParseInt(s, 10, 64)
			st.Window = time.UnixMicro(w)
		}
		if s, ok := v[1].(string); ok {
			st.Used, _ = strconv.ParseInt(s, 10, 64)
		}
	case "zset":
		st.Algorithm = Concurrency
		zs, err := l.rdb.ZRangeWithScores(ctx, full, 0, -1).Result()
		if err != nil {
			return st, fmt.Errorf("throttle: inspect %s: %w", full, err)
		}
		st.Leases = make(map[string]time.Time, len(zs))
		for _, z := range zs {
			st.Leases[fmt.Sprint(z.Member)] = time.UnixMicro(int64(z.Score))
		}
	}
	return st, nil
}

// List returns limiter keys (without prefix) that start with prefix, one
// SCAN page at a time: pass cursor 0 first, then the returned cursor until it
// is 0. count is a hint of keys per page. It never uses KEYS. On a Redis
// Cluster client it scans every master and ignores cursor paging.
func (l *Limiter) List(ctx context.Context, prefix string, cursor uint64, count int64) (keys []string, next uint64, err error) {
	match := l.match(prefix)
	if cc, ok := l.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			it := c.Scan(ctx, 0, match, count).Iterator()
			for it.Next(ctx) {
				keys = append(keys, l.strip(it.Val()))
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
		keys = append(keys, l.strip(k))
	}
	return keys, next, nil
}

// Each calls fn for every limiter key starting with prefix (without prefix).
func (l *Limiter) Each(ctx context.Context, prefix string, fn func(key string) error) error {
	var cursor uint64
	for {
		keys, next, err := l.List(ctx, prefix, cursor, 500)
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
func (l *Limiter) Reset(ctx context.Context, keys ...string) (int64, error) {
	var n int64
	for _, k := range keys {
		// One key per call: keys of different scopes live in different
		// cluster slots.
		c, err := l.rdb.Unlink(ctx, l.Key(k)).Result()
		if err != nil {
			return n, fmt.Errorf("throttle: reset %s: %w", k, err)
		}
		n += c
	}
	return n, nil
}

// ResetPrefix deletes every limiter key starting with prefix.
func (l *Limiter) ResetPrefix(ctx context.Context, prefix string) (int64, error) {
	var keys []string
	if err := l.Each(ctx, prefix, func(k string) error { keys = append(keys, k); return nil }); err != nil {
		return 0, err
	}
	return l.Reset(ctx, keys...)
}

// CleanupStats says what one Cleanup pass did.
type CleanupStats struct {
	Scanned         int // keys looked at
	ReclaimedLeases int // expired concurrency leases removed (their workers died)
	RemovedKeys     int // keys deleted because they had no TTL
}

// Cleanup walks every limiter key once: it reclaims expired concurrency
// leases and deletes limiter state left without a TTL. Safe to run while
// workers run, from any number of processes.
func (l *Limiter) Cleanup(ctx context.Context) (CleanupStats, error) {
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
	return st, err
}

// match is the SCAN pattern for keys under prefix, with glob characters escaped.
func (l *Limiter) match(prefix string) string {
	var full string
	if prefix == "" {
		full = l.prefix + ":"
	} else {
		full = l.Key(prefix)
	}
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)
	return r.Replace(full) + "*"
}

// strip turns a full key back into "scope:rest".
func (l *Limiter) strip(full string) string {
	s := strings.TrimPrefix(full, l.prefix+":")
	if strings.HasPrefix(s, "{") {
		if end := strings.IndexByte(s, '}'); end > 0 {
			return s[1:end] + s[end+1:]
		}
	}
	return s
}
