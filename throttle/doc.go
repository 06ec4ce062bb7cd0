// Package throttle decides, over Redis, whether work may proceed under a set
// of rate and concurrency limits, across any number of processes.
//
// # Algorithms
//
//   - GCRA: the token bucket as the generic cell rate algorithm. Rate units
//     per period, up to Burst at once; Burst 1 spaces units evenly (a leaky
//     bucket as a meter). State: one string (the theoretical arrival time).
//   - FixedWindow: Rate.Limit units per window, windows aligned to multiples
//     of the period since the Unix epoch (1s, 30s, 1m, 5m, 1h, 1d; a 1d
//     window starts at 00:00 UTC). Up to twice the limit can pass within one
//     period that spans a boundary; every aligned window holds at most the
//     limit. State: a small hash.
//   - Concurrency: at most Max leases held; Release frees one, and a lease
//     whose holder died expires after Limit.Lease and is reclaimed.
//
// # One call, many limits
//
// Consume takes the cost from every limit of the call only if all of them
// have room, in one Redis round trip (one Lua script: prelude.lua, one file
// per algorithm, consume.lua, embedded and joined). A blocked call takes
// nothing and reports, per limit, allowed, remaining, reset and RetryAfter,
// and overall the limit that blocked. Being over a limit is a Decision, not
// an error; errors mean Redis failed.
//
// # Keys
//
// A key is "{scope}:{resource}:{identifier}", e.g. "whatsapp:pair:+12025550123".
// In Redis it is stored under the prefix with the scope as the hash tag,
// "sluice:{whatsapp}:pair:+12025550123", so all keys of a call (which must
// share a scope) live in one Redis Cluster slot. Every key has a TTL,
// refreshed on write, and disappears once its state equals "unused".
//
// # Time
//
// Redis TIME is the single clock shared by all workers; a test may inject
// Options.Clock instead. Times are kept in microseconds.
package throttle
