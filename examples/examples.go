// Package examples holds the bundled sample campaign used by `sluice demo`.
//
// recipients.csv is 1,000 order-update rows (to, name, order_id) made by
// internal/campaign.Generate(n=1000, seed=1): realistic E.164 numbers from
// fictional ranges (US 555-01XX, Australian 0491 570 xxx), about 3% repeated
// recipients with a different order, about 1% bad rows and two exact
// duplicate rows, so a run shows validation and the pair rate limit at work.
package examples

import _ "embed"

// Recipients is recipients.csv.
//
//go:embed recipients.csv
var Recipients []byte
