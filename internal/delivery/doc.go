// Package delivery keeps what became of each task after the worker sent
// it: the provider's message id, the statuses the provider reported in
// delivery callbacks (queued, sent, delivered, read, failed, undelivered
// with the error code and title), or why the worker gave the task up, and
// per-campaign counters for progress (`sluice send --wait`).
//
// Store is the Redis store. It implements worker.DeliveryRecorder, which
// the worker calls after each accepted send and each archive;
// internal/callbacks calls Store.Update with each status a provider posts.
// Every key has a TTL (Options.TTL, 7 days by default) refreshed on write;
// a campaign's counters a little longer, refreshed at most once a minute
// by a worker, so that they outlive their records.
// Statuses never go back: a late "sent" after "delivered" is ignored, and
// failed and undelivered are final (the order is State's).
package delivery
