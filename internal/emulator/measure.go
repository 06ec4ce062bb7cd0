package emulator

import (
	"slices"
	"time"
)

// MaxInSpan returns, for each Sender of channel in records, the largest
// number of its records whose At lie within one half-open span of the given
// length, over every possible start (a sliding window, not aligned to
// anything). With span one second it checks an "N per second" cap under its
// strictest reading: the cap holds iff every value is at most N.
//
// Records need not be in time order. A span of zero or less holds nothing,
// so every sender then maps to 0.
func MaxInSpan(records []Record, channel string, span time.Duration) map[string]int {
	bySender := map[string][]time.Time{}
	for _, r := range records {
		if r.Channel == channel {
			bySender[r.Sender] = append(bySender[r.Sender], r.At)
		}
	}
	out := make(map[string]int, len(bySender))
	for sender, at := range bySender {
		out[sender] = maxInSpan(at, span)
	}
	return out
}

// maxInSpan sorts at and returns the most times that fit in a half-open span
// of length span: times fit iff the last minus the first is under span.
func maxInSpan(at []time.Time, span time.Duration) int {
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	best, i := 0, 0
	for j := range at {
		for i <= j && at[j].Sub(at[i]) >= span {
			i++
		}
		best = max(best, j-i+1)
	}
	return best
}

// MinPairGap returns the smallest time between two consecutive WhatsApp
// records (in time order) with the same Sender and Recipient, the spacing the
// pair limit (one per PairInterval) constrains; ok is false if no pair
// repeats. Records of other channels are ignored, and records need not be in
// time order.
func MinPairGap(records []Record) (gap time.Duration, ok bool) {
	type pair struct{ sender, recipient string }
	byPair := map[pair][]time.Time{}
	for _, r := range records {
		if r.Channel == ChannelWhatsApp {
			p := pair{r.Sender, r.Recipient}
			byPair[p] = append(byPair[p], r.At)
		}
	}
	for _, at := range byPair {
		slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
		for i := 1; i < len(at); i++ {
			if d := at[i].Sub(at[i-1]); !ok || d < gap {
				gap, ok = d, true
			}
		}
	}
	return gap, ok
}
