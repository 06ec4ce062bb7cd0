// Package api is Sluice's HTTP enqueue API, served by `sluice serve` under
// /v1, and the API-key authentication it shares with the dashboards.
//
// # Authentication
//
// ParseKeys reads SLUICE_API_KEYS (config.APIKeysEnv): comma-separated
// "key" or "key:tenant". Keys.Require guards a handler: "Authorization:
// Bearer <key>", and with RequireOptions.Basic also HTTP Basic with the key
// as password (for browsers on the dashboards). Keys are compared as
// SHA-256 digests in constant time; a request's Principal carries a
// non-secret ID ("key-1a2b3c4d") for limits and logs, never the key.
//
// # Endpoints
//
// New returns the handler of every /v1 path; the OpenAPI 3.1 document
// (OpenAPI, served at /v1/openapi.json) describes them and docs/api.md
// explains them. The handlers decode requests and map outcomes to
// responses; the sends go through producer.Client.Send, as `sluice
// enqueue` and `sluice send` do (validate, namespace, check, claim, plan,
// enqueue, count); a batch's valid items go through one Send call.
//
// # Tenants
//
// A key bound to a tenant sends for that tenant only: the payload's tenant
// is set to it, and another tenant in the body is a field error. Tenants
// are kept apart in two ways:
//
//   - Idempotency keys are namespaced: the task ID of a send with a tenant
//     is producer.TenantNamespace(tenant) + key
//     ("t-9f86d081884c7d65:order-1"), whoever sends it (the API, `sluice
//     enqueue --tenant`, `sluice send`), so two tenants using the same key
//     get two tasks, and a repeat is recognised only within the tenant. A
//     send with a tenant and no key gets the namespace and a random ID.
//     Clients may not send keys that already look namespaced. Sends
//     without a tenant keep their key as the task ID.
//   - Task lookups check the payload: GET /v1/tasks/{id} with a key bound
//     to a tenant answers 404 for a task whose payload has another tenant
//     (or none), exactly as for a task that does not exist. Random task
//     IDs (no key) are 128-bit, and not guessable either.
//
// A key without a tenant may send for any tenant (or none) and read every
// task.
//
// # Limits
//
// Each key is limited by throttle/httplimit to http.api_rate with
// http.api_burst (GCRA) under its Principal.ID; a batch is one request.
// Bodies are limited to http.max_body_bytes (413) and must be
// application/json (415). Every error is an RFC 9457 problem
// (application/problem+json) whose "errors" name each offending field by
// JSON Pointer.
package api
