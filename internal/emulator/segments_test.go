package emulator

import (
	"strings"
	"testing"
)

func TestSMSSegments(t *testing.T) {
	t.Parallel()
	r := strings.Repeat
	for body, want := range map[string]int{
		"":                              1,
		"Your code is 123456":           1,
		r("a", 160):                     1,
		r("a", 161):                     2,
		r("a", 306):                     2,
		r("a", 307):                     3,
		r("a", 159) + "€":               2, // € takes two septets
		r("a", 158) + "{":               1,
		r("a", 152) + "~" + r("a", 152): 3, // the escape pair is not split
		r("a", 151) + "~" + r("a", 153): 2,
		"a\tb":                          1, // UCS-2: tab is not GSM-7
		r("a", 70) + "\t":               2,
		r("ж", 70):                      1,
		r("ж", 71):                      2,
		r("ж", 134):                     2,
		r("ж", 135):                     3,
		r("😀", 35):                      1, // a surrogate pair each
		r("😀", 36):                      2,
		r("ж", 66) + "😀" + r("ж", 66):   3, // the pair is not split
		r("ж", 65) + "😀" + r("ж", 67):   2,
		"ÇéèØøÅåΔΦΓΛΩΠΨΣΘΞÆæßÉ¤¡ÄÖÑÜ§¿äöñüà": 1,
		"ç": 1,
	} {
		if got := smsSegments(body); got != want {
			t.Errorf("smsSegments(%.30q…, %d characters) = %d, want %d", body, len([]rune(body)), got, want)
		}
	}
}
