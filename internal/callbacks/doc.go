// Package callbacks serves the providers' delivery callbacks under
// /callbacks/ (docs/callbacks.md):
//
//   - POST /callbacks/twilio: Twilio's message status callbacks
//     (StatusCallback), signed with X-Twilio-Signature;
//   - GET /callbacks/whatsapp: the Meta webhook's verification request
//     (hub.mode, hub.verify_token, hub.challenge);
//   - POST /callbacks/whatsapp: the Meta webhook's posts, signed with
//     X-Hub-Signature-256, whose entry[].changes[].value.statuses[] are
//     the messages' statuses.
//
// Each status moves the task's delivery record (delivery.Store.Update),
// counts sluice_delivery_status_total{channel,status}, and a failure
// raises a delivery.failed event on the limiter's stream. A throttle code
// in a status (Twilio 30022 and 30023, WhatsApp 130429 and 131056: the
// channels package's tables) is fed back as a provider throttle
// (Options.Feedback, worker.Worker.Feedback), so it pauses and slows its
// scope as the same answer to a send would.
//
// A request whose signature is missing or wrong gets 403 and records
// nothing; bodies are bounded and every field is checked. Secrets and
// signatures are never logged or echoed.
package callbacks
