package delivery

import "strconv"

// Redis keys of the store, all under one hash tag so that a script's keys
// share a slot in Redis Cluster. prefix is the limiter's (redis.key_prefix,
// "sluice").

// RecordKey is a task's delivery record (hash).
func RecordKey(prefix, taskID string) string { return prefix + ":{_delivery}:task:" + taskID }

// IndexKey maps a provider's message id on channel to its task (hash:
// task, group), and holds a status reported before the send was recorded.
func IndexKey(prefix, channel, id string) string {
	return prefix + ":{_delivery}:msg:" + channel + ":" + id
}

// CountersKey is a campaign's progress counters (hash: enqueued, sent,
// failed, delivered, read, undelivered); group is Group(tenant, campaign).
func CountersKey(prefix, group string) string { return prefix + ":{_delivery}:campaign:" + group }

// Group names a tenant's campaign in CountersKey: each tenant counts its
// own campaigns, so one tenant's sends never move another's progress.
func Group(tenant, campaign string) string {
	return strconv.Itoa(len(tenant)) + ":" + tenant + ":" + campaign
}
