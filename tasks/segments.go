package tasks

import "unicode/utf8"

// Encoding is the character set an SMS body is sent in (3GPP TS 23.038).
type Encoding string

const (
	// GSM7 is the GSM 7-bit default alphabet: 160 septets in a single
	// segment, 153 in each segment of a concatenated message (7 septets go
	// to the user data header). A character of the extension table
	// (€ [ ] { } ~ ^ | \ and form feed) takes two septets (escape + code)
	// and is never split across segments.
	GSM7 Encoding = "GSM-7"
	// UCS2 is used as soon as one character is outside GSM-7: 70 UTF-16
	// code units in a single segment, 67 in each segment of a concatenated
	// message. A character outside the Basic Multilingual Plane (most
	// emoji) takes two code units (a surrogate pair) and is never split
	// across segments.
	UCS2 Encoding = "UCS-2"
)

// Segment sizes, in septets (GSM-7) or UTF-16 code units (UCS-2): one
// segment alone, and each segment of a concatenated message (Twilio, "What
// is an SMS segment"; 3GPP TS 23.040 concatenation header).
const (
	GSM7Single = 160
	GSM7Concat = 153
	UCS2Single = 70
	UCS2Concat = 67
)

// Segments is the result of CountSegments.
type Segments struct {
	Encoding Encoding
	// Units is the body's length in septets (GSM7) or UTF-16 code units
	// (UCS2).
	Units int
	// Count is the number of message segments, at least 1: Twilio bills and
	// paces each one (a sender's MPS is in segments; Twilio messaging
	// throughput docs).
	Count int
}

// CountSegments returns how many SMS segments body takes: GSM-7 when every
// character is in the GSM 7-bit default alphabet or its extension table,
// else UCS-2 (a single emoji makes the whole body UCS-2). A body that fits
// one segment (160 septets, 70 code units) is 1; a longer one is split into
// segments of 153 septets or 67 code units, filled in order, with an
// escaped GSM-7 character or a surrogate pair moved whole to the next
// segment when it does not fit. An empty body is 1 segment. Invalid UTF-8
// bytes count as U+FFFD (UCS-2). Twilio's Smart Encoding, which may replace
// some Unicode punctuation with GSM-7 look-alikes, is not modelled: such a
// body is counted as UCS-2, which never undercounts.
func CountSegments(body string) Segments {
	gsm, septets := true, 0
	for _, r := range body {
		n := gsm7Septets(r)
		if n == 0 {
			gsm = false
			break
		}
		septets += n
	}
	if gsm {
		return Segments{GSM7, septets, split(body, septets, GSM7Single, GSM7Concat, gsm7Septets)}
	}
	units := 0
	for _, r := range body {
		units += utf16Units(r)
	}
	return Segments{UCS2, units, split(body, units, UCS2Single, UCS2Concat, utf16Units)}
}

// split counts the segments of body, total units whose characters take
// size(r) units each: one segment of up to single units, else segments of
// up to concat units, no character split across two.
func split(body string, total, single, concat int, size func(rune) int) int {
	if total <= single {
		return 1
	}
	segs, used := 1, 0
	for _, r := range body {
		n := size(r)
		if used+n > concat {
			segs, used = segs+1, 0
		}
		used += n
	}
	return segs
}

// utf16Units is the number of UTF-16 code units of r: 2 outside the BMP.
func utf16Units(r rune) int {
	if r > 0xFFFF && r <= utf8.MaxRune {
		return 2
	}
	return 1
}

// gsm7Septets is the number of septets r takes in GSM-7: 1 for the default
// alphabet, 2 for the extension table, 0 when GSM-7 cannot carry it.
func gsm7Septets(r rune) int {
	if r < 0x80 {
		return int(gsm7ASCII[r])
	}
	switch r {
	case '£', '¥', 'è', 'é', 'ù', 'ì', 'ò', 'Ç', 'Ø', 'ø', 'Å', 'å',
		'Δ', 'Φ', 'Γ', 'Λ', 'Ω', 'Π', 'Ψ', 'Σ', 'Θ', 'Ξ', 'Æ', 'æ', 'ß', 'É',
		'¤', '¡', 'Ä', 'Ö', 'Ñ', 'Ü', '§', '¿', 'ä', 'ö', 'ñ', 'ü', 'à':
		return 1
	case '€':
		return 2
	}
	return 0
}

// gsm7ASCII is gsm7Septets for ASCII: the default alphabet holds LF, CR
// and every printable character but ` (at other codes than ASCII's for
// @ $ _, still one septet each); the extension table holds form feed and
// ^ { } \ [ ~ ] |. Tab and the other control characters are not GSM-7.
var gsm7ASCII = func() (t [128]byte) {
	for c := ' '; c <= '~'; c++ {
		t[c] = 1
	}
	t['`'] = 0
	for _, c := range "^{}\\[~]|\f" {
		t[c] = 2
	}
	t['\n'], t['\r'] = 1, 1
	return t
}()
