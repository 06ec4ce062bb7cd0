package campaign

import (
	"encoding/csv"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
)

// usAreaCodes are real US area codes. Each contributes the 100 numbers
// NPA-555-0100 … NPA-555-0199, which the NANP reserves for fiction.
var usAreaCodes = []int{
	201, 202, 203, 205, 206, 212, 213, 214, 215, 216,
	217, 224, 225, 239, 248, 267, 281, 301, 303, 305,
	310, 312, 313, 314, 317, 323, 347, 404, 408, 410,
	412, 414, 415, 469, 502, 503, 504, 512, 602, 612,
	615, 617, 619, 646, 702, 704, 713, 718, 720, 773,
	786, 801, 808, 813, 816, 818, 901, 916, 919, 971,
}

// names are the recipients' first names.
var names = []string{
	"Ava", "Noah", "Mia", "Liam", "Olivia", "Lucas", "Chloé", "Jack",
	"Isla", "Leo", "Zoë", "Mateo", "Aiko", "Omar", "Priya", "José",
	"Siobhán", "Wei", "Amara", "Ethan", "Sofia", "Kwame", "Hannah", "Ravi",
}

// badTo are the invalid recipients Generate mixes in, in turn.
var badTo = []string{"+1555", "not-a-number", "", "+1 202 555"}

// fictionalNumbers returns every number Generate draws from, in E.164: the
// US 555-01XX numbers of usAreaCodes, then the Australian mobile numbers
// +61 491 570 006 … 159 that ACMA reserves for fiction.
func fictionalNumbers() []string {
	nums := make([]string, 0, len(usAreaCodes)*100+154)
	for _, npa := range usAreaCodes {
		for i := range 100 {
			nums = append(nums, fmt.Sprintf("+1%d55501%02d", npa, i))
		}
	}
	for i := 6; i <= 159; i++ {
		nums = append(nums, fmt.Sprintf("+61491570%03d", i))
	}
	return nums
}

// row kinds in a generated file.
const (
	kindUnique = iota // first message to a recipient
	kindRepeat        // second message to an earlier recipient, new order_id
	kindBad           // invalid "to"
	kindDup           // exact copy of an earlier row
)

// rng draws from a PCG source with its own reductions, so that a seed gives
// the same file on every Go version.
type rng struct{ src *rand.PCG }

func (r rng) intn(n int) int { return int(r.src.Uint64() % uint64(n)) }

func (r rng) shuffle(s []int) {
	for i := len(s) - 1; i > 0; i-- {
		j := r.intn(i + 1)
		s[i], s[j] = s[j], s[i]
	}
}

// Generate writes a sample campaign of order updates as CSV with the header
// "to,name,order_id" and n data rows (not counting the header), the same for
// the same n and seed. Numbers are fictional but valid (see
// fictionalNumbers), written in assorted international formats
// ("+12025550123", "+1 (202) 555-0123", "+61 491 570 006"); order IDs look
// like "ORD-100123".
//
// Like a real export, the file is not clean. Of the n rows:
//   - n*3/100 repeat an earlier recipient with a different order_id (valid:
//     a second message). Each comes at least n/10 rows (rounded up) after
//     the recipient's first row and within the first 40% of the file, so
//     that at 80 messages/s its wait for WhatsApp's ~6 s pair limit ends
//     before the rest of the campaign is through (n >= ~1,000).
//   - n/100 have an invalid "to", in turn "+1555", "not-a-number", empty
//     and "+1 202 555", spread through the file.
//   - 2, if n >= 100, are exact copies of an earlier row.
//   - the rest are distinct recipients.
//
// So Read of the output yields n - n/100 - 2 rows and n/100 + 2 rejects
// (for n >= 100). Generate fails if n is negative or needs more distinct
// recipients than the 6154 fictional numbers.
func Generate(w io.Writer, n int, seed int64) error {
	if n < 0 {
		return fmt.Errorf("n: %d rows, want >= 0", n)
	}
	nBad, nRepeat, nDup := n/100, n*3/100, 0
	if n >= 100 {
		nDup = 2
	}
	pool := fictionalNumbers()
	if unique := n - nBad - nRepeat - nDup; unique > len(pool) {
		return fmt.Errorf("n: %d rows need %d distinct recipients, have %d fictional numbers", n, unique, len(pool))
	}
	r := rng{rand.NewPCG(uint64(seed), 0x5eed)}
	order := make([]int, len(pool))
	for i := range order {
		order[i] = i
	}
	r.shuffle(order)

	gap := (n + 9) / 10     // minimum distance from a recipient's first row to its repeat
	tail := n * 40 / 100    // repeats go before this position
	kinds := make([]int, n) // all kindUnique
	for i := range nBad {   // one bad row in each of nBad equal segments
		seg := n / nBad
		kinds[i*seg+r.intn(seg)] = kindBad
	}
	place := func(kind, count, from, to int) {
		var free []int
		for p := from; p < to; p++ {
			if kinds[p] == kindUnique {
				free = append(free, p)
			}
		}
		r.shuffle(free)
		for _, p := range free[:min(count, len(free))] {
			kinds[p] = kind
		}
	}
	// Repeats start at 2*gap so that every one has earlier recipients to repeat.
	place(kindRepeat, nRepeat, min(2*gap, tail), tail)
	place(kindDup, nDup, n/2, n)

	type record struct{ e164, to, name, orderID string }
	records := make([]record, n)
	var firsts []int       // positions of kindUnique rows, ascending
	used := map[int]bool{} // first rows already repeated or copied
	nextNum, nextOrder, nextBad := 0, 100100, 0
	newOrderID := func() string {
		nextOrder += 1 + r.intn(9)
		return "ORD-" + strconv.Itoa(nextOrder)
	}
	// pick returns an unused first row at a position <= maxPos, or -1.
	pick := func(maxPos int) int {
		k, _ := slices.BinarySearch(firsts, maxPos+1)
		if k == 0 {
			return -1
		}
		start := r.intn(k)
		for j := range k {
			if p := firsts[(start+j)%k]; !used[p] {
				used[p] = true
				return p
			}
		}
		return -1
	}
	for pos, kind := range kinds {
		switch kind {
		case kindBad:
			records[pos] = record{"", badTo[nextBad%len(badTo)], names[r.intn(len(names))], newOrderID()}
			nextBad++
			continue
		case kindRepeat:
			if p := pick(pos - gap); p >= 0 {
				first := records[p]
				records[pos] = record{first.e164, r.format(first.e164), first.name, newOrderID()}
				continue
			}
		case kindDup:
			if p := pick(pos - 1); p >= 0 {
				records[pos] = records[p]
				continue
			}
		}
		// kindUnique, or a repeat or copy with nothing left to repeat.
		if nextNum == len(pool) {
			return fmt.Errorf("n: %d rows need more than %d distinct recipients", n, len(pool))
		}
		e164 := pool[order[nextNum]]
		records[pos] = record{e164, r.format(e164), names[r.intn(len(names))], newOrderID()}
		nextNum++
		firsts = append(firsts, pos)
	}

	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"to", "name", "order_id"}); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	for _, rec := range records {
		if err := cw.Write([]string{rec.to, rec.name, rec.orderID}); err != nil {
			return fmt.Errorf("generate: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	return nil
}

// format writes an E.164 number in one of the ways people type
// international numbers.
func (r rng) format(e164 string) string {
	if len(e164) == 12 && e164[:2] == "+1" { // +1 NPA NXX XXXX
		npa, nxx, line := e164[2:5], e164[5:8], e164[8:]
		switch r.intn(4) {
		case 0:
			return "+1 " + npa + "-" + nxx + "-" + line
		case 1:
			return "+1 (" + npa + ") " + nxx + "-" + line
		case 2:
			return "+1 " + npa + " " + nxx + " " + line
		}
	}
	if len(e164) == 12 && e164[:3] == "+61" && r.intn(2) == 0 { // +61 4XX XXX XXX
		return "+61 " + e164[3:6] + " " + e164[6:9] + " " + e164[9:]
	}
	return e164
}
