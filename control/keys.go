package control

import "strconv"

// The key book above the limiter: every Redis key Sluice writes outside
// package throttle is built here, each by a one-line function. prefix is
// the limiter's (redis.key_prefix, "sluice"; throttle.Redis.Prefix), so
// one prefix separates two deployments on one database.
//
// Redis Cluster: a key's hash tag is the part in braces, and keys that one
// script touches share one. Keys no script shares have none and spread
// over the slots. A key of this layer has a tag or a first segment that
// starts with '_' ({_delivery}, _idem, _failed), which no limiter scope
// can, so the limiter's key listings (throttle.Redis.List), `sluice limits`
// and the cleanup job leave it out.

// ClaimKey is the Redis key of an idempotency key's claim, a string
// holding "<task type>|<token>": "<prefix>:_idem:<id>"
// ("sluice:_idem:order-7"). No hash tag: a producer claims each ID with a
// script of its own, so claims spread over Redis Cluster's slots.
func ClaimKey(prefix, id string) string { return prefix + ":_idem:" + id }

// ClaimBackfillKey marks that the claims of the tasks an earlier release
// enqueued without one were written (producer.Backfill), a string set
// with NX for the claims' retention, so that of many serve processes
// starting together one walks the queues: "<prefix>:_idem_backfill:v1"
// ("sluice:_idem_backfill:v1"). No hash tag: it is read and written alone.
func ClaimBackfillKey(prefix string) string { return prefix + ":_idem_backfill:v1" }

// FirstFailureKey is the Redis key of a task's first failed attempt, a
// string of Unix ms on the worker's clock: "<prefix>:_failed:<queue>:<task
// id>" ("sluice:_failed:sms:01JD3…"). No hash tag: it is read and written
// alone. (Earlier builds wrote "<prefix>:failed:…", which `sluice limits`
// listed as a limiter key of scope "failed"; such a key expires on its own,
// and a task failing across the upgrade counts its age from its next
// failure.)
func FirstFailureKey(prefix, queue, taskID string) string {
	return prefix + ":_failed:" + queue + ":" + taskID
}

// BatchRunKey marks that a batch task (tasks.TypeBatch) has started once:
// "<prefix>:_batch_run:<queue>:<batch task id>", a string, set NX by the
// worker at the batch's start. A batch that finds it set runs again (asynq
// put it back at a shutdown, with its retry count at 0), and checks each
// send for a send already made or a task of its own; a completed batch
// deletes it. No hash tag: it is read and written
// alone.
func BatchRunKey(prefix, queue, batchID string) string {
	return prefix + ":_batch_run:" + queue + ":" + batchID
}

// DeliveryRecordKey is a task's delivery record, a hash:
// "<prefix>:{_delivery}:task:<task id>" ("sluice:{_delivery}:task:01JD3…").
// Hash tag {_delivery}, shared by every key of the delivery store, so that
// one script records a send, its index entry and its campaign's counters.
func DeliveryRecordKey(prefix, taskID string) string {
	return prefix + ":{_delivery}:task:" + taskID
}

// DeliveryIndexKey maps a provider's message id on a channel to its task,
// a hash (task, group; a status reported before the send was recorded):
// "<prefix>:{_delivery}:msg:<channel>:<id>" ("sluice:{_delivery}:msg:sms:SM1").
// Hash tag {_delivery}.
func DeliveryIndexKey(prefix, channel, id string) string {
	return prefix + ":{_delivery}:msg:" + channel + ":" + id
}

// DeliveryCountersKey is a campaign's progress counters, a hash (enqueued,
// sent, failed, delivered, read, undelivered): "<prefix>:{_delivery}:
// campaign:<group>" with group a CampaignGroup
// ("sluice:{_delivery}:campaign:4:acme:spring-sale"). Hash tag {_delivery}.
func DeliveryCountersKey(prefix, group string) string {
	return prefix + ":{_delivery}:campaign:" + group
}

// CampaignGroup names a tenant's campaign in DeliveryCountersKey:
// "<len(tenant)>:<tenant>:<campaign>" ("4:acme:spring-sale"; "0::" for
// none). The length keeps "a:b"+"c" apart from "a"+"b:c", and each tenant
// counts its own campaigns, so one tenant's sends never move another's
// progress.
func CampaignGroup(tenant, campaign string) string {
	return strconv.Itoa(len(tenant)) + ":" + tenant + ":" + campaign
}

// AsynqDelayedKeys are asynq's sorted sets of a queue's scheduled and
// retrying tasks, task ID by Unix second: "asynq:{<queue>}:scheduled" and
// "asynq:{<queue>}:retry" (asynq's layout since v0.18; hash tag {<queue>},
// asynq's own). They are asynq's keys, not Sluice's: the worker writes them
// in one place only, to move a paused scope's planned tasks past the pause
// with ZADD XX INCR (asynq has no call that reschedules a task), and reads
// nothing else of asynq's; worker's deferplan tests check the layout
// against a real asynq.
func AsynqDelayedKeys(queue string) (scheduled, retry string) {
	return "asynq:{" + queue + "}:scheduled", "asynq:{" + queue + "}:retry"
}
