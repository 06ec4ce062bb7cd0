package delivery

// Redis keys of the store, all under one hash tag so that a script's keys
// share a slot in Redis Cluster. prefix is the limiter's (redis.key_prefix,
// "sluice").

// RecordKey is a task's delivery record (hash).
func RecordKey(prefix, taskID string) string { return prefix + ":{_delivery}:task:" + taskID }

// IndexKey maps a provider's message id on channel to its task (hash:
// task, campaign), and holds a status reported before the send was recorded.
func IndexKey(prefix, channel, id string) string {
	return prefix + ":{_delivery}:msg:" + channel + ":" + id
}

// CountersKey is a campaign's progress counters (hash: sent, failed,
// delivered, read, undelivered).
func CountersKey(prefix, campaign string) string { return prefix + ":{_delivery}:campaign:" + campaign }
