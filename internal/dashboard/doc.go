// Package dashboard serves Sluice's operator dashboards over HTTP: the
// limits page (NewLimits: live limiter keys with their remaining units,
// effective rates, backlogs and firm reservations; paused scopes with the
// provider's reason; the latest limits.* and provider.* events), and
// asynqmon's queue dashboard mounted on Sluice's Redis connection
// (NewQueues).
//
// The handlers do no authentication: `sluice serve` wraps them with the
// API keys (Bearer, or HTTP Basic with the key as password). They never
// show credentials: limiter keys, pause reasons and events hold none.
package dashboard
