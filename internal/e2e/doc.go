// Package e2e holds Sluice's end-to-end tests: the real `sluice` binary,
// built once per test run, started as several worker processes against a
// private redis-server (internal/redistest) and the provider emulators
// (internal/emulator), fed through asynq, and judged by what the emulators
// recorded.
//
// The package has no non-test code. Its tests are skipped with -short.
package e2e
