// Package campaign reads bulk-send CSV files for `sluice send --channel C
// --csv FILE` and the demo.
//
// A campaign file has a header row with a "to" column (the recipient's phone
// number, in international format) and any other columns, which become
// template parameters:
//
//	to,name,order_id
//	+1 (202) 555-0123,Ava,ORD-100123
//	+61 491 570 006,Noah,ORD-100131
//
// Read loses no line: each line after the header that holds a non-blank row
// ends up either in Result.Rows (normalized to E.164, ready to send) or in
// Result.Rejects with its line number and the reason; empty lines and
// one-line rows whose fields are all blank (",,") are skipped. A stray quote
// costs its own line only: a quoted field may carry a row over line breaks
// (a body with paragraphs) only if the record closes properly into a valid
// row with the header's field count and "to" on one line, stays within 100
// lines and 64 KiB, and takes no line that is a row of its own. The header
// is one line. WriteRejects turns the
// rejects into a CSV that the user can fix and run again. Render fills a
// message template ("Hi {name}, order {order_id} shipped") from a row, and
// IdempotencyKey derives each message's key from its content, so re-running
// a file does not send anything twice:
//
//	res, err := campaign.Read(f, campaign.Options{})
//	if err != nil {
//		return fmt.Errorf("%s: %w", path, err) // e.g. `line 1: missing required column "to" (have: name, code)`
//	}
//	for _, row := range res.Rows {
//		body, err := campaign.Render(tmpl, row)
//		...
//		key := campaign.IdempotencyKey(name, "sms", row, res.Columns)
//		...
//	}
//	err = campaign.WriteRejects(rejectsFile, res.Columns, res.Rejects)
//
// Generate writes realistic sample campaigns with fictional numbers and the
// usual mistakes (invalid numbers, exact duplicates, repeated recipients).
// examples/recipients.csv is Generate(w, 1000, 1); regenerate it with
//
//	go test ./internal/campaign -run TestExampleRecipientsFile -update
package campaign
