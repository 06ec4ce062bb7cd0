package control

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/throttle"
)

// Admin views of the limiter's state, for the CLI's `sluice limits show`
// and `sluice limits stats`: they read what a *throttle.Redis keeps,
// through its public surface (Key, List, Status, Client), and change
// nothing.

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
	Members []SortedSetMember
	// Count is the sorted set's size.
	Count int64
}

// SortedSetMember is one sorted-set member of a limiter key.
type SortedSetMember struct {
	Member string
	At     time.Time
}

// Inspect reads the state of l's limiter key without changing it, for
// `sluice limits show`. key is without prefix ("whatsapp:pair:…"). A
// missing key has Type "none" and TTL -2. Errors are Redis'.
func Inspect(ctx context.Context, l *throttle.Redis, key string) (KeyState, error) {
	full := l.Key(key)
	st := KeyState{Key: full}
	pipe := l.Client().Pipeline()
	typ := pipe.Type(ctx, full)
	ttl := pipe.PTTL(ctx, full)
	mem := pipe.MemoryUsage(ctx, full)
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return st, fmt.Errorf("control: inspect %s: %w", full, err)
	}
	st.Type, st.TTL, st.Bytes = typ.Val(), ttl.Val(), mem.Val()
	if st.TTL > 0 {
		st.TTL = st.TTL.Round(time.Millisecond)
	}
	var err error
	switch st.Type {
	case "string":
		st.Value, err = l.Client().Get(ctx, full).Result()
	case "hash":
		st.Fields, err = l.Client().HGetAll(ctx, full).Result()
	case "zset":
		var zs []redis.Z
		if st.Count, err = l.Client().ZCard(ctx, full).Result(); err == nil {
			zs, err = l.Client().ZRangeWithScores(ctx, full, 0, 99).Result()
		}
		for _, z := range zs {
			st.Members = append(st.Members, SortedSetMember{Member: fmt.Sprint(z.Member), At: time.UnixMicro(int64(z.Score))})
		}
	}
	if err != nil && err != redis.Nil {
		return st, fmt.Errorf("control: inspect %s: %w", full, err)
	}
	return st, nil
}

// KeyStats summarizes the limiter's keys, for `sluice limits stats`.
type KeyStats struct {
	Keys   int64            // limiter keys under the prefix
	ByType map[string]int64 // keys by Redis type
	Bytes  int64            // sum of MEMORY USAGE
	// Top are the keys with the largest share of their limit in use, most
	// used first (only keys limitFor knows).
	Top []KeyUse
}

// BytesPerKey is the mean MEMORY USAGE of a key.
func (s KeyStats) BytesPerKey() float64 {
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

// Stats scans every limiter key of l under prefix once (SCAN pages of
// l.ScanBatch() keys, pipelined TYPE and MEMORY USAGE per page). limitFor,
// when not nil, says which limit governs a key; those keys' use is read
// with Status (one round trip each) and the top most used are returned. A
// key whose use cannot be read is left out of Top, and logged once at WARN
// to l.Logger(). Errors are Redis'.
func Stats(ctx context.Context, l *throttle.Redis, prefix string, top int, limitFor func(key string) (throttle.Limit, bool)) (KeyStats, error) {
	st := KeyStats{ByType: map[string]int64{}}
	var uses []KeyUse
	var cursor uint64
	var skipped int
	var skipKey string
	var skipErr error
	defer func() {
		if skipped > 0 {
			l.Logger().WarnContext(ctx, "control: stats left out keys whose use could not be read",
				"skipped", skipped, "key", skipKey, "err", skipErr)
		}
	}()
	for {
		keys, next, err := l.List(ctx, prefix, cursor, l.ScanBatch())
		if err != nil {
			return st, err
		}
		pipe := l.Client().Pipeline()
		types := make([]*redis.StatusCmd, len(keys))
		mems := make([]*redis.IntCmd, len(keys))
		for i, k := range keys {
			types[i] = pipe.Type(ctx, l.Key(k))
			mems[i] = pipe.MemoryUsage(ctx, l.Key(k))
		}
		if len(keys) > 0 {
			if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
				return st, fmt.Errorf("control: stats: %w", err)
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
			if !ok || lim.Algorithm == throttle.Distinct {
				continue
			}
			d, err := l.Status(ctx, throttle.Request{Key: k, Limit: lim})
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
