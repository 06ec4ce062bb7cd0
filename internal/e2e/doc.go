// Package e2e holds Sluice's end-to-end tests: the real `sluice` binary,
// built once per test run, started as several worker processes against a
// private redis-server (internal/redistest) and the provider emulators
// (internal/emulator), fed through asynq, and judged by what the emulators
// recorded.
//
// `make test` runs every test here small, on whatever host runs it, busy
// or not, so it asserts only what holds however late the host schedules a
// send (claims_test.go):
//
//   - no provider cap is exceeded in any 1-second span, and WhatsApp pairs
//     are at least 6s apart (what the strict emulators accepted);
//   - every message is delivered exactly once and none is lost: no
//     duplicate, rejection or failure, every task completed;
//   - ordering: a high-priority send or one to another number is delivered
//     ahead of the backlog it was enqueued behind; tenants' shares;
//   - Sluice's work per send: dequeues (in a run that drew no throttle);
//   - provider throttles at most a tripwire's worth: a send that leaves
//     late on a busy host can land closer than the cap to the next one and
//     draw a strict provider's throttle, which Sluice survives (nothing
//     lost, nothing twice); a channel that is not paced draws one on most
//     sends.
//
// Timing is asserted by `make e2e-full` (SLUICE_E2E_SCALE=full), on an idle
// host, and logged by the small run with whether it held: zero provider
// throttles, rates as a fraction of the cap, latencies of probes and of
// the first send after a fault, limiter calls per send (a late wake-up
// takes a new slot). Waits for completion bound a hang (hangBound): they
// measure nothing.
//
// The stress scenarios (stress_test.go, `make e2e-stress`) never run in
// `make test`: they are skipped unless SLUICE_E2E_STRESS=1, report their
// figures (one log line, and JSON with SLUICE_E2E_STRESS_OUT) and assert
// only the invariants above.
//
// The many-numbers measurement (scale_test.go, `make bench-scale`) never
// runs in `make test` either: it is skipped unless SLUICE_BENCH_SCALE=1, and
// compares Sluice's Redis work and delivered rate with plain asynq's for
// the same sends. The backlog memory measurement (backlog_mem_test.go,
// `make bench-backlog`), skipped unless SLUICE_BENCH_BACKLOG=1, compares
// the Redis memory a waiting send holds with plain asynq's.
//
// The package has no non-test code. Its tests are skipped with -short.
package e2e
