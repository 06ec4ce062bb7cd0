// Package producer is Sluice's enqueue side, the counterpart of asynq's
// Client and River's Client: one path that every caller takes (the HTTP
// API, `sluice send`, `sluice enqueue`, the demo through the API), so
// that no caller re-implements a check.
//
// Client.Send takes sends built by the tasks package (Item) and, in order:
//
//  1. validate: the payload decodes under the tasks package's rules;
//  2. namespace: a send with a tenant gets the tenant's namespace before
//     its idempotency key (TenantNamespace: "t-9f86d081884c7d65:order-1"),
//     within tasks.MaxIdempotencyKey; a caller's key may not pose as one;
//  3. check: the channel is enabled, the payload fits the channel's
//     max_payload_bytes, a webhook's or HTTP call's target passes the
//     egress policy (CheckTarget);
//  4. claim: the ID's claim (ClaimKey) is the one record of a key's use
//     across channels: asynq keeps task IDs unique only within a queue,
//     and its own records are private. A key another type's task claims
//     is refused (tasks.ErrKeyInUse); the claim is kept for the task's
//     life (Options.ClaimRetention);
//  5. plan: bulk sends take their place on their channel's limits
//     (throttle.Redis.Plan, with the workers' pacing: worker.Pacing), so
//     a worker dequeues each once, at its slot;
//  6. enqueue: asynq, in the channel's queue, scheduled for the planned
//     second; the same ID again is tasks.ErrDuplicate and is not sent
//     twice;
//  7. count: each tenant's campaign's new tasks (Options.Count), so that
//     `sluice send --wait` knows the campaign's size.
//
// Check runs steps 1 to 3 without Redis (a dry run, or a look before
// Redis is reached); Enqueue runs steps 4 to 6 on tasks already built.
// tasks.Enqueue… is the plain asynq path, without any of this but the
// validation.
//
// Keys: ClaimKey is "<prefix>:_idem:<id>", with the limiter's prefix
// (redis.key_prefix), no hash tag (claims spread over Redis Cluster's
// slots; each script touches one).
package producer
