// Package emulator runs local HTTP emulators of the WhatsApp Cloud API, the
// Twilio Messages API and customers' webhook receivers. They enforce the
// providers' published limits, answer with the providers' response and error
// bodies, and record every accepted message, so that tests and `sluice demo`
// can count deliveries, duplicates and limit violations. `sluice emulate`
// runs them standalone through Run.
//
// Provider facts below cite /work/shared/PROVIDERS.md (PROVIDERS.md:N is its
// line N) and the official OpenAPI specs beside it.
//
// # Endpoints
//
// WhatsApp (WhatsAppURL): POST /{version}/{phone-number-id}/messages, version
// matching ^v[0-9]+\.[0-9]+$, Authorization: Bearer <token>, JSON body with
// messaging_product "whatsapp", to (8 to 15 digits, "+" optional) and type
// "text" (text.body) or "template" (template.name, template.language.code),
// or a media type, image, video, audio, document or sticker, with its object
// (exactly one of id, digits, and link, absolute http(s); caption only on
// image, video and document, at most 1,024 characters; filename only on
// document); interactive (button: 1 to 3 reply buttons, titles at most 20
// characters and unique; list: a button label, 1 to 10 sections, titled
// when several, at most 10 rows in all; cta_url: display_text and an
// http(s) url; a body of at most 1,024 characters), location (latitude and
// longitude in range), contacts (1 to 5, each with name.formatted_name) or
// reaction (message_id and emoji); context.message_id when context is
// given.
// Success: 200 {"messaging_product":"whatsapp","contacts":[{"input","wa_id"}],
// "messages":[{"id":"wamid...."}]}. Errors use the Graph envelope
// {"error":{"message","type","code","error_data":{"messaging_product",
// "details"},"fbtrace_id"}} (PROVIDERS.md:17): 401 code 104 (no token) or 190
// (wrong token); 400 code 2500 (bad version), 100 subcode 33 (non-numeric
// phone-number-id), 100 (invalid body); 400 130429 and 131056 (limits).
// Other message types (a product list, a flow, ...) are rejected with code
// 100.
//
// Twilio (TwilioURL): POST /2010-04-01/Accounts/{AccountSid}/Messages.json,
// HTTP Basic AccountSid:AuthToken, form fields To, From or
// MessagingServiceSid, Body (or MediaUrl or ContentSid). Success: 201 with the
// Message resource of the spec (sid "SM"+32 hex, status "queued", or
// "accepted" when sent through a Messaging Service without From; num_segments
// is always "1"; dates RFC 2822). Errors use {"code","message","more_info",
// "status"} (PROVIDERS.md:54): 401 20003; 400 21604 (no To), 21211 (To not
// "+" and 8 to 15 digits), 21603 (no From nor MessagingServiceSid), 21212
// (bad From), 21705 (bad MessagingServiceSid), 21602 (no Body, MediaUrl or
// ContentSid), 21617 (Body over 1600 characters), 21623 (more than 10
// MediaUrl, or more than one to a whatsapp: sender), 21620 (a MediaUrl not
// http(s)), 21654 (ContentVariables without ContentSid), 21655 (ContentSid
// not HX + 32 hex digits), 21656 (ContentVariables not a JSON object of
// non-empty strings of at most 1,600 characters), 21624 (ValidityPeriod not
// an integer from 1 to 36,000); 429 20429 (limits). An MMS and a Content
// Template count as one unit of the sender's MPS (Twilio, "MMS Account Rate
// Limits": 1 MMS a second per US/CA long code), a body's SMS segments
// otherwise.
//
// Webhook receivers (WebhookURLs, one listener and so one host:port each):
// POST /hooks, signed with Standard Webhooks 1.0 (PROVIDERS.md:81):
// webhook-id, webhook-timestamp (Unix seconds, within 5 minutes of Clock
// either way) and webhook-signature, a space-separated list of
// "v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>" of which one must
// match; key is the base64-decoded part of the secret after "whsec_". Bad or
// missing signature: 401. Body not JSON: 400. Over the rate: 429 with
// Retry-After, the seconds until enough requests leave the fullest 1-second
// span that would hold it, rounded up, at least 1 (so 1 unless requests were
// decided out of order or Clock was set back; with CalendarSeconds, until
// the next whole second, so always 1). Success: 204.
//
// # Limits and their sources
//
// The providers publish their caps as "N per second" without saying how they
// count them (PROVIDERS.md:21-22, 55-56). By default the emulators enforce
// the strictest window reading, so that a sender they accept is accepted
// whatever window the provider counts in: at most N in any 1-second span,
// wherever it starts (see "Rate checks and tolerance"). A provider that
// demanded an even 1/N s spacing, with no burst at all, would be stricter
// still; that reading is not modelled.
//
//   - WhatsApp throughput, 80 messages per second per phone-number-id in any
//     1-second span, over it 130429 (PROVIDERS.md:21-22). The 1,000 mps
//     upgrade is not modelled.
//   - WhatsApp pair rate, one message per 6 s from one phone-number-id to one
//     recipient, exactly: a message is refused, 131056, unless it comes at
//     least 6 s after the pair's previous accepted one (PROVIDERS.md:24-25).
//     The bursts that third parties report Meta tolerating are not modelled:
//     the emulator is stricter than Meta here.
//   - Twilio concurrency, 100 requests in flight per account, Latency
//     included, over it HTTP 429 code 20429 (PROVIDERS.md:59-60; 100 is a
//     third-party figure).
//   - Twilio per-sender throughput, 1 message per second per From (a US long
//     code), or per MessagingServiceSid when there is no From
//     (PROVIDERS.md:55), in any 1-second span. Real Twilio queues over-MPS
//     messages for hours instead of refusing them (PROVIDERS.md:57-58); the
//     emulator refuses them with the concurrency error 20429 so that a sender
//     that outpaces a number is seen. It counts messages, not segments.
//   - Webhook receivers, 10 requests per second each in any 1-second span,
//     over it 429 with Retry-After (PROVIDERS.md:79-80, 84). 10 is the
//     emulator's own figure: receivers publish none.
//
// Options.CalendarSeconds (`sluice emulate --calendar-seconds`) counts the
// three per-second caps per calendar second instead, a looser reading that
// some senders meter by.
//
// Every limit is checked in this order: authentication (401), request shape
// (400), magic recipients, then limits, then the request is accepted and
// recorded. A refused request is neither recorded nor charged to any limit.
// Providers do not deduplicate, and neither does the emulator: a request
// whose idempotency key was already accepted in its channel is accepted again
// but counted in ChannelStats.Duplicates and marked Record.Duplicate. Keys
// come from the Idempotency-Key header, else biz_opaque_callback_data
// (WhatsApp) or I-Twilio-Idempotency-Token (Twilio); for webhooks the key is
// webhook-id.
//
// # Rate checks and tolerance
//
// The providers do not publish how they measure their rates; the emulator
// uses two models, neither of them the providers' algorithm, and by default
// takes the strictest reading of each.
//
// The "N per second" caps (WhatsAppMPS, TwilioMPS, WebhookRPS) are by
// default a sliding window on arrival time per key. A request's arrival is
// read on Options.Clock when its handler starts, before authentication,
// parsing and the emulator's lock, so that neither the emulator's own work
// nor other requests move it. A request arriving at t is accepted iff
// every half-open 1-second span (y-1s, y] that holds t would hold at most N
// accepted requests with the same key, counting it: with arrivals decided
// in order, iff fewer than N were accepted with arrival times in (t-1s, t].
// Refused requests are not counted. So any 1-second span, wherever it
// starts, holds at most N accepted requests: N spread 1/N s apart from t0
// are accepted, the (N+1)th anywhere before t0+1s is refused, and one at
// t0+1s is accepted because the first has left the span. A burst that
// straddles a whole second (N at s.999, then one at s+1.001) is refused.
// Requests are decided in the order they take the lock, which on a busy host
// is not always their arrival's: a request decided after one that arrived
// later is checked against the spans that hold both (and against those only:
// counting every later acceptance too refused requests that no 1-second
// span was full for). The limiter keeps the acceptance times of the last 2s
// per key; a request decided more than 1s behind the latest (a fake clock
// set back) whose spans reach a time let go is refused, so the bound holds
// in any order.
//
// With Options.CalendarSeconds the caps are calendar-second counts per key
// instead: a request is accepted iff fewer than N requests with the same key
// were accepted in its Unix second (UTC-aligned, [s, s+1) on Options.Clock),
// and the count starts over at each whole second. A burst that straddles a
// boundary (N at s.999, N more at s+1) is then accepted in full, 2N within a
// few milliseconds, which a provider measuring over a sliding window would
// refuse in part. Conversely, a request that its sender counted in one
// second but that the emulator's clock places in the next (clock skew, or a
// request in flight across the boundary) counts in the next one and can be
// refused there.
//
// In both modes the count is exact and Tolerance does not apply: the (N+1)th
// request is refused whether the N came at one instant or spread out. A
// sender that meters fixed windows aligned to whole seconds always passes the
// calendar mode, but the default one only while no window's requests and the
// next window's come less than a second apart in excess of N: N at the top
// of each second pass (each burst has left the span when the next comes,
// exactly 1 s later), N spread through one second then N at the top of the
// next do not. MaxInSpan and Server.MaxInAnySecond measure records the same
// way as the default mode; MinPairGap measures the pair spacing.
//
// Interval limits (the WhatsApp pair limit, one per PairInterval) are a GCRA
// (generic cell rate algorithm) per key with burst 1: with T the interval and
// TAT the theoretical arrival time of the next request, a request at t is
// accepted iff
//
//	t >= TAT - Tolerance - (burst-1)*T
//
// and an accepted request sets TAT = max(TAT, t) + T. By default Tolerance is
// 0 and the check is exact: a request is accepted iff it comes at least T
// after the previous accepted one with the same key, so requests exactly T
// apart are accepted and any closer are refused. A caller may opt into an
// allowance for network jitter with a positive Tolerance: a request may then
// arrive up to Tolerance before its slot, and early arrivals do not add up. A
// negative Tolerance means none, as 0 does.
//
// Time comes from Options.Clock (rate checks, Record.At, webhook timestamp
// checks, Twilio date_created); Latency is real time.
//
// # Magic recipients
//
// A recipient whose digits end in:
//
//   - "0000" (SuffixUndeliverable): WhatsApp HTTP 400 code 131026 "Message
//     undeliverable" (permanent, PROVIDERS.md:43); Twilio HTTP 400 code 21610,
//     unsubscribed recipient (permanent, PROVIDERS.md:73).
//   - "0500" (SuffixServerError): WhatsApp HTTP 500 code 131000 "Something
//     went wrong" with is_transient true (transient, PROVIDERS.md:41); Twilio
//     HTTP 500 code 20500 (transient, PROVIDERS.md:75).
//
// They are answered after authentication and shape checks but before limits,
// are not recorded, and do not use up any limit. They count as Rejected
// (4xx) and Failed (5xx).
//
// A Twilio recipient ending in "0022" (SuffixCarrierThrottle) is accepted
// and recorded like any other; its status callback then reports it
// undelivered with ErrorCode 30022, carrier throughput exceeded.
//
// # Status callbacks
//
// A Twilio message created with a StatusCallback (an absolute http(s) URL;
// else HTTP 400 code 21609) gets its status posted there once accepted, as
// Twilio does: form fields MessageSid, SmsSid, MessageStatus, SmsStatus,
// AccountSid, From, To, MessagingServiceSid (when given), ApiVersion and, on
// failure, ErrorCode, signed with X-Twilio-Signature (HMAC-SHA1 of the URL and
// the sorted parameters, keyed with the auth token). Statuses: "sent", then
// "delivered" (or "undelivered" 30022, above). Posts run in the background,
// may arrive before the create request's answer is read, follow no
// redirects, and are dropped when they fail; Close cancels them.
//
// With Options.WhatsAppWebhookURL set, an accepted WhatsApp message's
// statuses are posted there as Meta's webhooks post them: a JSON body with
// object "whatsapp_business_account" and one entry whose change has field
// "messages" and value {messaging_product, metadata {display_phone_number,
// phone_number_id}, statuses [{id (the wamid), status, timestamp (Unix
// seconds), recipient_id}]}, signed with X-Hub-Signature-256 ("sha256=" and
// the hex HMAC-SHA256 of the raw body, keyed with WhatsAppAppSecret). One
// post per status: "sent", then "delivered"; best effort, as above.
//
// # Introspection
//
// The WhatsApp listener also serves, for a test process reading a standalone
// `sluice emulate`:
//
//   - GET /_emulator/records: JSON array of Record in acceptance order, keys
//     channel, at (RFC 3339 with nanoseconds), sender, recipient,
//     idempotency_key, duplicate, provider_id.
//   - GET /_emulator/stats: JSON object keyed "whatsapp", "sms", "webhook",
//     each with accepted, unique, duplicates, throttled, rejected, failed,
//     throttled_by_code (e.g. {"130429": 3}) and max_in_any_second (the most
//     accepted requests of one sender in any 1-second span, as
//     Server.MaxInAnySecond).
//   - POST /_emulator/reset: 204; clears records, counters, seen keys and
//     limiter state, as Server.Reset does.
//   - POST /_emulator/faults {"channel": "whatsapp"|"sms", "sender",
//     "code", "count", "retry_after"}: 204; the sender's next count
//     requests (0: 1, negative: until cleared) fail with the provider's
//     error code, or with a bare 429 (code 429: no error code, text/plain
//     body), with a Retry-After header of retry_after seconds when over 0,
//     as Server.FaultWith does. DELETE /_emulator/faults: 204; clears them.
//
// They are not authenticated: the listeners bind 127.0.0.1 by default.
package emulator
