// Package tasks defines Sluice's task payloads and how they are enqueued on
// asynq and decoded by the worker.
//
// There is one task type per channel, each in its own queue so that one
// channel's backlog never delays another:
//
//	channel   task type        payload         queue
//	whatsapp  whatsapp:send    WhatsAppSend    "whatsapp"
//	sms       sms:send         SMSSend         "sms"
//	webhook   webhook:deliver  WebhookDeliver  "webhook"
//	http      http:call        HTTPCall        "http"
//
// Payloads are JSON with a version field "v" (PayloadVersion). Producers build
// tasks with the New…Task constructors or enqueue directly with the Enqueue…
// helpers; both normalize the payload (E.164 phone numbers, upper-case HTTP
// method) and validate it, so bad input fails at the producer with an error
// naming the field, not later in the worker. The worker parses payloads with
// the Decode… functions, which are strict and wrap ErrMalformed.
//
// # Idempotency
//
// A payload's IdempotencyKey becomes the asynq task ID. asynq refuses a second
// task with an ID that is still present in the queue, and the constructors set
// Retention(24h), so a completed task keeps its ID reserved for a day after it
// ran. Re-enqueuing the same key within that time, e.g. after a producer
// crashed and re-ran a campaign, is rejected as a duplicate (ErrDuplicate)
// instead of being sent again. Limits of this guarantee:
//
//   - it lasts for DefaultRetention after completion; after that the same key
//     is accepted and sent again;
//   - task IDs are unique per queue, so overriding the queue (asynq.Queue)
//     gives the key a different scope, and these helpers accept a key that a
//     task of another channel holds; producer.Client (the CLI and the HTTP
//     API) refuses that with ErrKeyInUse when that task, too, went through
//     a producer.Client (its claim; these helpers take none);
//   - an archived task (retries exhausted) also keeps its ID; to send it again,
//     delete or re-run the archived task or use a new key;
//   - a payload without a key gets a random ID and is never deduplicated.
//
// # Usage
//
//	client := asynq.NewClient(asynq.RedisClientOpt{Addr: "localhost:6379"})
//	defer client.Close()
//
//	_, err := tasks.EnqueueWhatsAppSend(ctx, client, tasks.WhatsAppSend{
//		PhoneNumberID: "106540352242922",
//		To:            "+1 (202) 555-0123", // stored as "+12025550123"
//		Template: &tasks.Template{
//			Name:       "order_update",
//			Language:   "en_US",
//			Parameters: []string{"Ava", "ORD-100123"},
//		},
//		IdempotencyKey: "order-100123-shipped",
//	})
//	switch {
//	case errors.Is(err, tasks.ErrDuplicate):
//		// already queued or sent: nothing to do
//	case err != nil:
//		return err
//	}
//
// In the worker:
//
//	func handleWhatsApp(ctx context.Context, t *asynq.Task) error {
//		p, err := tasks.DecodeWhatsAppSend(t.Payload())
//		if err != nil {
//			return fmt.Errorf("%w: %w", err, asynq.SkipRetry) // retrying cannot fix it
//		}
//		...
//	}
//
// Each payload's Fields method returns the values that rate-limit key
// templates may reference ("{to}", "{host}", …); FieldNames lists them per
// task type so configuration can reject unknown placeholders up front.
package tasks
