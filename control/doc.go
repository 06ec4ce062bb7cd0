// Package control is Sluice's control plane above the limiter: what Sluice
// keeps in Redis beside the limits that package throttle decides, and the
// operator's views of the limiter's keys. It imports throttle; throttle
// never imports it.
//
//   - The key book of this layer (keys.go): every Redis key Sluice writes
//     above the limiter (the producer's idempotency claims, a task's first
//     failure, the delivery store's records and counters) is built there,
//     each builder with its key's shape, an example and its Redis Cluster
//     hash tag. The limiter's own keys and channels are in throttle's
//     keys.go.
//   - Inspect and Stats (admin.go): a limiter key's raw state and a summary
//     of all of them, for `sluice limits show` and `sluice limits stats`.
package control
