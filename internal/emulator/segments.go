package emulator

import (
	"strings"
	"unicode/utf16"
)

// The emulator counts segments itself, as Twilio does, from the GSM 03.38
// tables (3GPP TS 23.038): it imports no Sluice package, so that a mistake
// in Sluice's own counter shows up as a difference, not as agreement.

// gsmDefault is the GSM 7-bit default alphabet (one septet each).
const gsmDefault = "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?" +
	"¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà"

// gsmExtension is the extension table (escape + code: two septets each).
const gsmExtension = "\f^{}\\[~]|€"

// smsSegments returns the number of segments Twilio bills and paces a body
// as (num_segments): GSM-7 if every character is in the two tables, 160
// septets in one segment, else 153 a segment; otherwise UCS-2, 70 UTF-16
// code units in one segment, else 67 a segment. A character (an escape
// pair, a surrogate pair) is never split across two segments. An empty
// body is one segment.
func smsSegments(body string) int {
	var sizes []int
	gsm := true
	for _, r := range body {
		switch {
		case strings.ContainsRune(gsmDefault, r):
			sizes = append(sizes, 1)
		case strings.ContainsRune(gsmExtension, r):
			sizes = append(sizes, 2)
		default:
			gsm = false
		}
	}
	single, multi := 160, 153
	if !gsm {
		single, multi = 70, 67
		sizes = sizes[:0]
		for _, r := range body {
			sizes = append(sizes, len(utf16.Encode([]rune{r})))
		}
	}
	total := 0
	for _, n := range sizes {
		total += n
	}
	if total <= single {
		return 1
	}
	count, left := 0, 0
	for _, n := range sizes {
		if n > left {
			count++
			left = multi
		}
		left -= n
	}
	return count
}
