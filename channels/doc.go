// Package channels talks to the providers Sluice throttles traffic for: one
// client per provider, each sending one task payload (package tasks) per call
// and classifying the outcome for the worker.
//
//   - WhatsApp.Send: WhatsApp Business Cloud API, POST /{version}/{phone number ID}/messages.
//   - Twilio.Send: Twilio Programmable Messaging, POST /2010-04-01/Accounts/{sid}/Messages.json.
//   - Webhook.Deliver: customer webhooks signed per Standard Webhooks 1.0 (Sign, Verify).
//   - HTTPCaller.Call: any other outbound HTTP request.
//
// A success returns a Response (provider message ID and HTTP status). Every
// other outcome is an *Error whose Class tells the worker what to do:
// Throttled (requeue after RetryAfter without burning a retry, slowing the
// limiter named by Scope), Transient (retry with backoff) or Permanent
// (archive). The one exception is a cancelled context: then the error wraps
// context.Canceled, so a shutdown is not recorded as a failure.
//
// Classification follows the tables in docs/providers.md (Meta's and Twilio's error
// code documentation, RFC 9110 and Standard Webhooks for plain HTTP); each
// client's method documents its table. Request shapes follow the providers'
// official OpenAPI specs (Meta's whatsapp-business-messaging-api_v23.0.yaml,
// Twilio's twilio_api_v2010.json); the package's tests validate the requests
// against them when SLUICE_SPECS names their directory.
//
// Clients are plain structs whose zero fields mean documented defaults. Each
// takes an injected *http.Client; nil means NewHTTPClient (15 s timeout,
// redirects not followed). Clocks are injectable through Now fields. At most
// MaxBodyBytes (64 KiB) of any response is read. Tokens, auth tokens, signing
// secrets, credential headers and URL queries never appear in errors.
package channels
