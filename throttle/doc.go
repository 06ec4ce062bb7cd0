// Package throttle decides whether work may proceed under a set of rate and
// concurrency limits. The Limiter interface has two backends with the same
// decisions: Redis (NewRedis), one state for any number of processes, and
// Local (NewLocal), in-process with bounded memory. Every Redis key and
// channel it writes is built in keys.go; Sluice's own records above the
// limiter, and the CLI's views of its keys, are in package control.
//
// # Algorithms
//
//   - GCRA: the token bucket as the generic cell rate algorithm. Rate units
//     per period, up to Burst at once; Burst 1 spaces units evenly (a leaky
//     bucket as a meter). Same decisions as go-redis/redis_rate. State: one
//     string (the theoretical arrival time); GCRA limits of one call that
//     share a key pack into one hash.
//   - FixedWindow: Rate.Limit units per window, windows aligned to multiples
//     of the period since the Unix epoch (a 1d window starts at 00:00 UTC).
//     Up to twice the limit can pass within one period that spans a
//     boundary; every aligned window holds at most the limit.
//   - SlidingWindowLog: exact; one sorted-set entry per admitted unit.
//   - SlidingWindowCounter: the previous window weighted by overlap plus the
//     current one; denied calls are not counted.
//   - MinInterval (cooldown): no two operations closer than Interval.
//   - Concurrency: at most Max leases held; Release frees one, and a lease
//     whose holder died expires after Limit.Lease and is reclaimed.
//   - Distinct: at most Rate.Limit distinct members per rolling window; a
//     member already counted passes free (WhatsApp messaging tiers).
//
// Windowed algorithms take windows of 1s, 30s, 1m, 5m, 1h or 1d; GCRA any
// period of 1ms or more.
//
// # Operations
//
// Consume(cost) takes from every limit of a call only if all of them have
// room; Check peeks; Status reports the state; Reset, ResetPrefix and List
// (cursor paging, SCAN on Redis) manage keys. Every decision carries
// allowed, remaining, reset and RetryAfter; its JSON form is
// {"allowed":false,"remaining":0,"reset":1704307200000,"retryAfter":23000}
// (reset in Unix ms, retryAfter in ms). Being over a limit is a Decision,
// not an error.
//
// On Redis, one Lua script (prelude.lua, one file per algorithm,
// consume.lua, embedded and joined) decides all limits of one scope in one
// EVALSHA. Calls spanning scopes are taken scope by scope in sorted order
// and refunded if a later scope blocks; see Redis. Runtime overrides
// (SetOverride) change limits for every process within a second; limit
// events go to a capped Redis Stream (Events). Errors the Redis limiter
// absorbs rather than fail a decision (an event it could not write,
// overrides it could not read) go to Options.Logger at WARN.
//
// # Keys
//
// A key is "{scope}:{resource}:{identifier}", e.g. "whatsapp:pair:+12025550123".
// In Redis it is stored under the prefix with the scope as the hash tag,
// "sluice:{whatsapp}:pair:+12025550123", so all keys of a scope live in one
// Redis Cluster slot. Every key has a TTL, refreshed on write, and
// disappears once its state equals "unused". Scopes starting with '_' are
// Sluice's own (events, overrides).
//
// # Time
//
// Redis TIME is the single clock shared by all workers; a test may inject
// Options.Clock instead. Times are kept in microseconds.
package throttle
