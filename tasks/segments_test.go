package tasks

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCountSegments(t *testing.T) {
	t.Parallel()
	r := strings.Repeat
	tests := []struct {
		name string
		body string
		want Segments
	}{
		{"empty", "", Segments{GSM7, 0, 1}},
		{"ascii", "Your code is 123456", Segments{GSM7, 19, 1}},
		{"gsm basic latin-1 and greek", "Ça coûte", Segments{UCS2, 8, 1}}, // û is not GSM-7
		{"gsm basic accents", "éèùìòÇØøÅåÆæßÉÄÖÑÜäöñüà¿¡§£¥¤ΔΦΓΛΩΠΨΣΘΞ@$_", Segments{GSM7, 42, 1}},
		{"crlf", "a\r\nb", Segments{GSM7, 4, 1}},
		{"tab is not gsm", "a\tb", Segments{UCS2, 3, 1}},
		{"backtick is not gsm", "`x`", Segments{UCS2, 3, 1}},
		{"extension chars count 2", "€[]{}~^|\\", Segments{GSM7, 18, 1}},
		{"form feed is extension", "\f", Segments{GSM7, 2, 1}},
		{"gsm 160", r("a", 160), Segments{GSM7, 160, 1}},
		{"gsm 161", r("a", 161), Segments{GSM7, 161, 2}},
		{"gsm 306", r("a", 306), Segments{GSM7, 306, 2}},
		{"gsm 307", r("a", 307), Segments{GSM7, 307, 3}},
		{"gsm 1600", r("a", 1600), Segments{GSM7, 1600, 11}},
		{"gsm 300 (issue: 2 segments)", r("x", 300), Segments{GSM7, 300, 2}},
		{"gsm 159 plus euro", r("a", 159) + "€", Segments{GSM7, 161, 2}},
		{"gsm 158 plus euro fits one", r("a", 158) + "€", Segments{GSM7, 160, 1}},
		{"gsm 80 euros", r("€", 80), Segments{GSM7, 160, 1}},
		{"gsm 81 euros", r("€", 81), Segments{GSM7, 162, 2}},
		// 152 septets, then an escape pair does not fit the 153rd septet: it
		// opens segment 2 (152 | 2+151 = 153 | 1).
		{"escape not split", r("a", 152) + "[" + r("a", 152), Segments{GSM7, 306, 3}},
		{"escape at boundary fits", r("a", 151) + "[" + r("a", 153), Segments{GSM7, 306, 2}},
		{"ucs2 70", r("ж", 70), Segments{UCS2, 70, 1}},
		{"ucs2 71", r("ж", 71), Segments{UCS2, 71, 2}},
		{"ucs2 134", r("ж", 134), Segments{UCS2, 134, 2}},
		{"ucs2 135", r("ж", 135), Segments{UCS2, 135, 3}},
		{"one emoji makes ucs2", r("a", 69) + "😀", Segments{UCS2, 71, 2}},
		{"emoji take 2 units", r("😀", 35), Segments{UCS2, 70, 1}},
		{"36 emoji", r("😀", 36), Segments{UCS2, 72, 2}},
		// 66 units then a surrogate pair: the pair opens segment 2.
		{"surrogate pair not split", r("ж", 66) + "😀" + r("ж", 66), Segments{UCS2, 134, 3}},
		{"surrogate pair at boundary fits", r("ж", 65) + "😀" + r("ж", 67), Segments{UCS2, 134, 2}},
		{"cjk", "您好，世界", Segments{UCS2, 5, 1}},
		{"arabic", r("مرحبا", 14), Segments{UCS2, 70, 1}},
		{"invalid utf-8 is ucs2", "a\xffb", Segments{UCS2, 3, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, CountSegments(tt.body)); diff != "" {
				t.Errorf("CountSegments (-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzCountSegments(f *testing.F) {
	for _, s := range []string{"", "hi", "€", "😀", strings.Repeat("a", 161), "a\xffb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := CountSegments(s)
		single, concat := GSM7Single, GSM7Concat
		if got.Encoding == UCS2 {
			single, concat = UCS2Single, UCS2Concat
		}
		switch {
		case got.Count < 1:
			t.Fatalf("%q: %d segments", s, got.Count)
		case got.Units <= single && got.Count != 1:
			t.Fatalf("%q: %d units in %d segments", s, got.Units, got.Count)
		case got.Units > single && (got.Count < (got.Units+concat-1)/concat || got.Count > got.Units/(concat-1)+1):
			// Never fewer than ceil(units/concat); a character never split
			// wastes at most one unit a segment.
			t.Fatalf("%q: %d units in %d segments", s, got.Units, got.Count)
		}
	})
}

// BenchmarkCountSegments: what SMSSend.Fields adds to each enqueue and
// each dequeue of an SMS.
func BenchmarkCountSegments(b *testing.B) {
	for _, bc := range []struct{ name, body string }{
		{"gsm7-40", "Hi Ann, order A-1 has shipped. Track it."},
		{"gsm7-1600", strings.Repeat("a", 1600)},
		{"ucs2-1600", strings.Repeat("ж", 1599) + "😀"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				CountSegments(bc.body)
			}
		})
	}
}
