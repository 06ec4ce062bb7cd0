package delivery

import "github.com/sluice-dev/sluice/control"

// Redis keys of the store, all under one hash tag ({_delivery}) so that a
// script's keys share a slot in Redis Cluster. Their shapes are in the key
// book above the limiter, package control's keys.go; prefix is the
// limiter's (redis.key_prefix, "sluice").

// RecordKey is a task's delivery record (hash): control.DeliveryRecordKey.
func RecordKey(prefix, taskID string) string { return control.DeliveryRecordKey(prefix, taskID) }

// IndexKey maps a provider's message id on channel to its task (hash:
// task, group), and holds a status reported before the send was recorded:
// control.DeliveryIndexKey.
func IndexKey(prefix, channel, id string) string {
	return control.DeliveryIndexKey(prefix, channel, id)
}

// CountersKey is a campaign's progress counters (hash: enqueued, sent,
// failed, delivered, read, undelivered); group is Group(tenant, campaign):
// control.DeliveryCountersKey.
func CountersKey(prefix, group string) string { return control.DeliveryCountersKey(prefix, group) }

// Group names a tenant's campaign in CountersKey (control.CampaignGroup):
// each tenant counts its own campaigns, so one tenant's sends never move
// another's progress.
func Group(tenant, campaign string) string { return control.CampaignGroup(tenant, campaign) }
