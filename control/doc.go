// Package control is Sluice's control plane above the limiter: what Sluice
// keeps in Redis beside the limits that package throttle decides. It
// imports throttle; throttle never imports it.
//
// Today it holds the key book of that layer (keys.go): every Redis key
// Sluice writes above the limiter (the producer's idempotency claims, a
// task's first failure, the delivery store's records and counters) is
// built there, each builder with its key's shape and its Redis Cluster
// hash tag. The limiter's own keys and channels are in throttle's keys.go.
package control
