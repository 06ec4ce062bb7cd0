package campaign

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

// These tests hold Read to its promise that no line is lost: every
// non-blank line after the header is in exactly one row or reject, and a
// stray quote costs only its own line.

// physicalLines splits data, less a leading BOM, at '\n': line n of the file
// is physicalLines(data)[n-1], without its '\n'.
func physicalLines(data []byte) []string {
	data = bytes.TrimPrefix(data, bom)
	if len(data) == 0 {
		return nil
	}
	return strings.Split(string(bytes.TrimSuffix(data, []byte("\n"))), "\n")
}

// span is the number of lines a row or reject with these fields covers: a
// field's quoted line breaks read as "\n", one per extra line.
func span(raw []string) int {
	n := 1
	for _, f := range raw {
		n += strings.Count(f, "\n")
	}
	return n
}

// lineReason matches the reasons for which Read rejects one line alone, as
// text, and captures the line number the reason names, if any.
var lineReason = regexp.MustCompile(`^(?:unterminated quoted field starting at line (\d+)|quoted field starting at line (\d+) ends on line \d+, .*|bare " in non-quoted-field|extraneous or missing " in quoted-field)$`)

// checkLines checks res, read from data with comma, against data's lines:
// no line is in two rows or rejects, nothing spans more than maxRecordLines,
// rows look valid, and a reject of one line's text holds that line, named by
// its own number. If the header ends at line headerEnd (not -1: unknown), it
// also checks that every line after it that is not blank (only spaces,
// quotes and commas) is in a row or a reject.
func checkLines(data []byte, comma rune, headerEnd int, res *Result) error {
	lines := physicalLines(data)
	owner := make([]string, len(lines)+1) // what covers each line, by number
	cover := func(what string, line int, raw []string) error {
		n := span(raw)
		switch {
		case n > maxRecordLines:
			return fmt.Errorf("%s at line %d spans %d lines, more than %d", what, line, n, maxRecordLines)
		case line < 2 || line <= headerEnd || line+n-1 > len(lines):
			return fmt.Errorf("%s at line %d spanning %d lines is outside the data lines %d..%d", what, line, n, max(2, headerEnd+1), len(lines))
		}
		for l := line; l < line+n; l++ {
			if owner[l] != "" {
				return fmt.Errorf("line %d is in %s and in %s at line %d", l, owner[l], what, line)
			}
			owner[l] = fmt.Sprintf("%s at line %d", what, line)
		}
		return nil
	}
	for _, r := range res.Rows {
		if err := cover("row", r.Line, r.Raw); err != nil {
			return err
		}
		if r.To == "" || r.To[0] != '+' || r.Params["to"] != r.To {
			return fmt.Errorf("row at line %d: To %q, Params[to] %q", r.Line, r.To, r.Params["to"])
		}
	}
	for _, r := range res.Rejects {
		if err := cover("reject", r.Line, r.Raw); err != nil {
			return err
		}
		if r.Reason == "" {
			return fmt.Errorf("reject at line %d has no reason", r.Line)
		}
		m := lineReason.FindStringSubmatch(r.Reason)
		if m == nil {
			continue
		}
		if text := strings.TrimSuffix(lines[r.Line-1], "\r"); len(r.Raw) != 1 || r.Raw[0] != text {
			return fmt.Errorf("reject at line %d (%s): Raw %q, want the line %q", r.Line, r.Reason, r.Raw, text)
		}
		if named := m[1] + m[2]; named != "" && named != strconv.Itoa(r.Line) {
			return fmt.Errorf("reject at line %d: reason %q names another line", r.Line, r.Reason)
		}
	}
	if headerEnd < 0 {
		return nil
	}
	blank := strings.NewReplacer(`"`, "", string(comma), "")
	for l := headerEnd + 1; l <= len(lines); l++ {
		if owner[l] == "" && strings.TrimSpace(blank.Replace(lines[l-1])) != "" {
			return fmt.Errorf("line %d %q is in no row and no reject", l, clip(lines[l-1]))
		}
	}
	return nil
}

// testNumbers are the recipients of the generated files below. Rows differ
// by name, so 250 numbers do: checking a number is most of Read's time,
// ten times more so under the race detector.
var testNumbers = fictionalNumbers()[:250]

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// requireOutcomes fails with a diff, cut short, if res is not want.
func requireOutcomes(t *testing.T, want []outcome, res *Result) {
	t.Helper()
	got := outcomes(t, res)
	if slices.Equal(want, got) {
		return
	}
	if diff := cmp.Diff(want, got); diff != "" {
		if len(diff) > 4000 {
			diff = diff[:4000] + "\n…"
		}
		t.Fatalf("rows and rejects (-want +got):\n%s", diff)
	}
}

// strayCampaign returns a campaign "to,name,order_id" of n valid, distinct
// rows, data row i on line i+1, with a `"` in front of the rows in stray.
func strayCampaign(n int, stray ...int) []byte {
	nums := testNumbers
	var b bytes.Buffer
	b.WriteString("to,name,order_id\n")
	for i := 1; i <= n; i++ {
		if slices.Contains(stray, i) {
			b.WriteByte('"')
		}
		fmt.Fprintf(&b, "%s,Customer %d,ORD-%d\n", nums[(i-1)%len(nums)], i, 100000+i)
	}
	return b.Bytes()
}

// strayOutcomes is what Read must make of strayCampaign(n, stray...).
func strayOutcomes(n int, stray ...int) []outcome {
	nums := testNumbers
	want := make([]outcome, 0, n)
	for i := 1; i <= n; i++ {
		if slices.Contains(stray, i) {
			want = append(want, outcome{Line: i + 1, Reason: fmt.Sprintf("unterminated quoted field starting at line %d", i+1)})
		} else {
			want = append(want, outcome{Line: i + 1, To: nums[(i-1)%len(nums)]})
		}
	}
	return want
}

// The issue's file: 20,000 rows, a `"` at the start of data row 99. It used
// to read as 99 rows, the last of them holding the other 19,902.
func TestReadOneStrayQuoteCostsOneLine(t *testing.T) {
	t.Parallel()
	data := strayCampaign(20000, 99)
	res, err := Read(bytes.NewReader(data), Options{})
	require.NoError(t, err)
	require.Len(t, res.Rows, 19999)
	want := []Reject{{
		Line:   100,
		Raw:    []string{physicalLines(data)[99]},
		Reason: "unterminated quoted field starting at line 100",
	}}
	if diff := cmp.Diff(want, res.Rejects); diff != "" {
		t.Errorf("rejects (-want +got):\n%s", diff)
	}
	requireOutcomes(t, strayOutcomes(20000, 99), res)
	require.NoError(t, checkLines(data, ',', 1, res))
}

// The other file: 50,000 rows with 625 stray quotes, of which only
// 25,040 rows used to be seen. Each quote now costs its line and no more,
// however near the next one is.
func TestReadManyStrayQuotes(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(625, 50000))
	stray := []int{1, 2, 3, 50000} // the first rows, adjacent rows, the last row
	for len(stray) < 625 {
		if i := 1 + r.IntN(50000); !slices.Contains(stray, i) {
			stray = append(stray, i)
		}
	}
	data := strayCampaign(50000, stray...)
	res, err := Read(bytes.NewReader(data), Options{})
	require.NoError(t, err)
	require.Len(t, res.Rows, 50000-625)
	require.Len(t, res.Rejects, 625)
	requireOutcomes(t, strayOutcomes(50000, stray...), res)
	require.NoError(t, checkLines(data, ',', 1, res))
}

// messyCampaign returns a campaign of n records under the header
// "to,name,note", a quarter of them broken in the ways exports and hand
// edits break them (stray and bare quotes, quoted line breaks that do and do
// not make a row, NUL bytes, invalid UTF-8, bad numbers, duplicates), among
// blank lines, with LF and CRLF endings mixed, and the outcome Read must give
// each line. A quote in it is either balanced or followed by a letter, a
// digit or "+", so a stray quote never closes into a well-formed record and
// the outcomes do not depend on what follows.
func messyCampaign(n int, seed uint64) ([]byte, []outcome) {
	r := rand.New(rand.NewPCG(seed, 0xca5e))
	nums := testNumbers
	var b bytes.Buffer
	line := 1
	// emit writes text, whose line breaks are "\n", with LF or CRLF line
	// endings and returns the line it starts on.
	emit := func(text string) int {
		first := line
		for part := range strings.SplitSeq(text, "\n") {
			b.WriteString(part)
			if r.IntN(3) == 0 {
				b.WriteString("\r\n")
			} else {
				b.WriteString("\n")
			}
			line++
		}
		return first
	}
	emit("to,name,note")
	var want []outcome
	ok := func(l int, to string) { want = append(want, outcome{Line: l, To: to}) }
	bad := func(l int, format string, args ...any) {
		want = append(want, outcome{Line: l, Reason: fmt.Sprintf(format, args...)})
	}
	type single struct {
		text string
		line int
	}
	var singles []single // valid one-line rows, to duplicate
	for i := range n {
		if r.IntN(25) == 0 {
			emit([]string{"", "", " ", ",,", " , ,\t"}[r.IntN(5)]) // blank: skipped
		}
		to, name, note := nums[i%len(nums)], "Customer "+strconv.Itoa(i), "order "+strconv.Itoa(i)
		row := to + "," + name + "," + note
		switch k := r.IntN(100); {
		case k < 75:
			l := emit(row)
			ok(l, to)
			singles = append(singles, single{row, l})
		case k < 80: // an SMS body with paragraphs and quotes: one row
			ok(emit(to+","+name+`,"Dear customer,`+"\n"+`your ""order"" `+strconv.Itoa(i)+"\n\n"+`has shipped."`), to)
		case k < 83:
			l := emit(`"` + row)
			bad(l, "unterminated quoted field starting at line %d", l)
		case k < 85:
			l := emit(to + `,"` + name + "," + note)
			bad(l, "unterminated quoted field starting at line %d", l)
		case k < 86:
			bad(emit(to+`,Customer "`+strconv.Itoa(i)+`",`+note), `bare " in non-quoted-field`)
		case k < 87:
			bad(emit(to+`,"`+name+`"x,`+note), `extraneous or missing " in quoted-field`)
		case k < 88:
			bad(emit(to+","+name+"\x00,"+note), "name: contains a NUL byte")
		case k < 89:
			bad(emit(to+",Jos\xe9 "+strconv.Itoa(i)+","+note), "name: not valid UTF-8")
		case k < 90: // a well-formed row over two lines, rejected whole
			bad(emit(to+","+name+`,"line one`+"\n"+"line\x00two\""), "note: contains a NUL byte")
		case k < 92:
			bad(emit("+1555,"+name+","+note), `to: "+1555" is not a valid E.164 phone number`)
		case k < 94:
			bad(emit(to+","+name), "has 2 fields, want 3")
		case k < 95: // closes on the next line, a field short: two lines rejected
			l := emit(to + `,"` + name + "\n" + `more"`)
			bad(l, "quoted field starting at line %d ends on line %d, giving 2 fields, want 3", l, l+1)
			bad(l+1, `bare " in non-quoted-field`)
		case k < 96: // "to" over two lines: two lines rejected
			l := emit(`"` + to + "\n" + `",` + name + "," + note)
			bad(l, `quoted field starting at line %d ends on line %d, putting a line break in "to"`, l, l+1)
			bad(l+1, "unterminated quoted field starting at line %d", l+1)
		case k < 98 && len(singles) > 0:
			s := singles[r.IntN(len(singles))]
			bad(emit(s.text), "duplicate of line %d", s.line)
		default:
			l := emit(row)
			ok(l, to)
			singles = append(singles, single{row, l})
		}
	}
	data := b.Bytes()
	if seed%2 == 1 { // no line ending at the end
		data = bytes.TrimSuffix(bytes.TrimSuffix(data, []byte("\n")), []byte("\r"))
	}
	return data, want
}

func TestReadMessyFilesLoseNoLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n    int
		seed uint64
	}{{100000, 1}, {3000, 2}, {3000, 3}, {3000, 4}, {50, 5}, {1, 6}} {
		t.Run(fmt.Sprintf("%d rows seed %d", tc.n, tc.seed), func(t *testing.T) {
			t.Parallel()
			data, want := messyCampaign(tc.n, tc.seed)
			res, err := Read(bytes.NewReader(data), Options{})
			require.NoError(t, err)
			require.Equal(t, []string{"to", "name", "note"}, res.Columns)
			requireOutcomes(t, want, res)
			require.NoError(t, checkLines(data, ',', 1, res))
			nLines := len(physicalLines(data))
			t.Logf("%d lines: %d rows, %d rejects", nLines, len(res.Rows), len(res.Rejects))
		})
	}
}

// TestReadRecordBounds: a quoted field may carry a row over at most
// maxRecordLines lines and maxRecordBytes bytes; past that, its first line
// is rejected and the lines after it are read on their own.
func TestReadRecordBounds(t *testing.T) {
	t.Parallel()
	const head = "to,name,note\n"
	const to = "+12025550123"
	// note returns a row whose note is lines lines of the given filler.
	note := func(lines int, filler string) string {
		parts := make([]string, lines)
		for i := range parts {
			parts[i] = filler + strconv.Itoa(i+1)
		}
		return to + `,Ava,"` + strings.Join(parts, "\n") + "\"\n"
	}
	after := "+12025550124,Noah,next\n"

	t.Run("lines", func(t *testing.T) {
		t.Parallel()
		res, err := Read(strings.NewReader(head+note(maxRecordLines, "p")+after), Options{})
		require.NoError(t, err)
		requireOutcomes(t, []outcome{{Line: 2, To: to}, {Line: 2 + maxRecordLines, To: "+12025550124"}}, res)

		in := head + note(maxRecordLines+1, "p") + after
		res, err = Read(strings.NewReader(in), Options{})
		require.NoError(t, err)
		want := []outcome{{Line: 2, Reason: "unterminated quoted field starting at line 2"}}
		for l := 3; l < 2+maxRecordLines; l++ {
			want = append(want, outcome{Line: l, Reason: "has 1 field, want 3"})
		}
		want = append(want,
			outcome{Line: 2 + maxRecordLines, Reason: `bare " in non-quoted-field`},
			outcome{Line: 3 + maxRecordLines, To: "+12025550124"})
		requireOutcomes(t, want, res)
		require.NoError(t, checkLines([]byte(in), ',', 1, res))
	})

	t.Run("bytes", func(t *testing.T) {
		t.Parallel()
		// Two lines of exactly maxRecordBytes, then one byte more.
		first := to + `,Ava,"`
		fill := strings.Repeat("a", maxRecordBytes-len(first)-len("\n")-len("b\"\n"))
		fits := first + fill + "\nb\"\n"
		require.Len(t, fits, maxRecordBytes)
		res, err := Read(strings.NewReader(head+fits+after), Options{})
		require.NoError(t, err)
		requireOutcomes(t, []outcome{{Line: 2, To: to}, {Line: 4, To: "+12025550124"}}, res)

		res, err = Read(strings.NewReader(head+first+fill+"a\nb\"\n"+after), Options{})
		require.NoError(t, err)
		requireOutcomes(t, []outcome{
			{Line: 2, Reason: "unterminated quoted field starting at line 2"},
			{Line: 3, Reason: `bare " in non-quoted-field`},
			{Line: 4, To: "+12025550124"},
		}, res)

		// A line longer than the bound is fine when no quote carries it over.
		long := to + ",Ava," + strings.Repeat("x", 2*maxRecordBytes) + "\n"
		res, err = Read(strings.NewReader(head+long+after), Options{})
		require.NoError(t, err)
		requireOutcomes(t, []outcome{{Line: 2, To: to}, {Line: 3, To: "+12025550124"}}, res)
	})
}

// TestWriteRejectsRoundTripLines: the rejects file of a messy campaign holds
// one record per reject, and reading it back gives one row or reject per
// record, at the line the rejects file has it on: a rejected line's text is
// quoted, so its stray quote swallows nothing the second time.
func TestWriteRejectsRoundTripLines(t *testing.T) {
	t.Parallel()
	data, _ := messyCampaign(3000, 7)
	res, err := Read(bytes.NewReader(data), Options{})
	require.NoError(t, err)
	require.NotEmpty(t, res.Rejects)

	var buf bytes.Buffer
	require.NoError(t, WriteRejects(&buf, res.Columns, res.Rejects))

	// One CSV record per reject, each with its original line and raw text.
	cr := csv.NewReader(bytes.NewReader(buf.Bytes()))
	cr.FieldsPerRecord = -1
	recs, err := cr.ReadAll()
	require.NoError(t, err)
	require.Len(t, recs, 1+len(res.Rejects))
	for i, r := range res.Rejects {
		want := append([]string{strconv.Itoa(r.Line), r.Reason}, r.Raw...)
		if diff := cmp.Diff(want, recs[i+1]); diff != "" {
			t.Fatalf("rejects file record %d (-want +got):\n%s", i+1, diff)
		}
	}

	// Read back: one row or reject per record, and none of them swallows
	// another.
	back, err := Read(bytes.NewReader(buf.Bytes()), Options{})
	require.NoError(t, err)
	require.NoError(t, checkLines(buf.Bytes(), ',', 1, back))
	got := outcomes(t, back)
	require.Len(t, got, len(res.Rejects))
	lines := map[int]string{} // line in the rejects file → the line column
	for _, r := range back.Rows {
		lines[r.Line] = r.Raw[0]
	}
	for _, r := range back.Rejects {
		lines[r.Line] = r.Raw[0]
	}
	for i, o := range got {
		require.Equal(t, strconv.Itoa(res.Rejects[i].Line), lines[o.Line], "record %d of the rejects file", i+1)
	}
}

func TestEndsInQuotedField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		line  string
		comma rune
		open  bool
	}{
		{"", ',', false},
		{"a,b", ',', false},
		{`"`, ',', true},
		{`""`, ',', false},
		{`"""`, ',', true},
		{`"a`, ',', true},
		{`"a"`, ',', false},
		{`"a""`, ',', true},
		{`"a"""`, ',', false},
		{`"a,b`, ',', true},
		{`"a",`, ',', false},
		{`"a","b`, ',', true},
		{`a,"b`, ',', true},
		{`a,"b",c`, ',', false},
		{`a,"`, ',', true},
		{`a,`, ',', false},
		{`a,"b"x`, ',', false},         // text after the closing quote
		{`a"b,"c`, ',', false},         // a bare quote comes first
		{`"a"x,"b`, ',', false},        // so does text after a closing quote
		{`a;"b,c`, ';', true},          // another comma
		{`a,"b;c`, ';', false},         // a bare quote, with ';'
		{"a\u00a7\"b", '\u00a7', true}, // a multi-byte comma
	}
	for _, tc := range tests {
		require.Equal(t, tc.open, endsInQuotedField([]byte(tc.line), tc.comma), "%q", tc.line)
		require.NoError(t, checkEndsInQuotedField(tc.line, tc.comma), "%q", tc.line)
	}
}

// checkEndsInQuotedField checks endsInQuotedField(line) against
// encoding/csv: if it says a quoted field is open, a closing quote makes the
// line a record; if not, csv reads the line as a record of its own or fails
// on it, whatever comes next.
func checkEndsInQuotedField(line string, comma rune) error {
	if strings.ContainsAny(line, "\r\n") || line == "" {
		return nil
	}
	read := func(s string) (int64, error) {
		cr := csv.NewReader(strings.NewReader(s))
		cr.Comma = comma
		cr.FieldsPerRecord = -1
		_, err := cr.Read()
		return cr.InputOffset(), err
	}
	if endsInQuotedField([]byte(line), comma) {
		if _, err := read(line + "\"\n"); err != nil {
			return fmt.Errorf("open, but a closing quote does not make a record: %v", err)
		}
		return nil
	}
	off, err := read(line + "\n\"x\ny\"\n")
	if pe, ok := errors.AsType[*csv.ParseError](err); ok {
		if pe.Line != 1 {
			return fmt.Errorf("not open, but csv fails on line %d: %v", pe.Line, err)
		}
		return nil
	}
	if err != nil || off != int64(len(line)+1) {
		return fmt.Errorf("not open, but csv reads %d bytes (%v), want the line's %d", off, err, len(line)+1)
	}
	return nil
}

// FuzzRead checks that Read never panics, never puts a line in two places,
// and, under a known header, accounts for every non-blank line; and that
// reading the rejects file back gives one row or reject per reject.
func FuzzRead(f *testing.F) {
	for _, s := range []string{
		"to,name\n+12025550123,Ava\n",
		"\ufeffto,name\r\n+1555,Ava\r\n\r\n+12025550123,\"a\nb\"\n+12025550123,\"a\nb\"\n",
		"to\n\"unclosed\n+12025550123\n",
		"name,to\nx\n,,,\n\"a\"b,c\n",
		"to,line,reason\n+12025550123,2,dup\n",
		"",
		"+12025550123,Ava,hi\n\"+12025550124,Noah,hi\n+12025550125,Mia,hi\n",
		"+12025550123,\"Ava,hi\n+12025550124,Noah,\"hi\"\n",
		"\"+12025550123\n\",Ava,hi\n",
		"+12025550123,\"Ava\nB\"\n+12025550124,Noah,hi\r\n",
		"+12025550123,A\x00va,hi\n+12025550124,\xffNoah,\"x\ny\"\n",
		"+12025550123,Ava,\"a\r\n\r\nb\"\r\n,,\r\n \"\r\n",
	} {
		f.Add([]byte(s), uint8(0))
	}
	f.Add([]byte("+12025550123;\"Ava;x\n+12025550124;Noah;\"y\"\n"), uint8(1))
	f.Add([]byte("+12025550123\t\"Ava\nx\"\tz\n"), uint8(2))
	f.Fuzz(func(t *testing.T, b []byte, sep uint8) {
		comma := []rune{',', ';', '\t'}[sep%3]
		if i := bytes.IndexByte(b, '\n'); i > 0 {
			if err := checkEndsInQuotedField(string(bytes.TrimSuffix(b[:i], []byte("\r"))), comma); err != nil {
				t.Fatal(err)
			}
		}
		// Any input, its own header.
		if res, err := Read(bytes.NewReader(b), Options{Comma: comma}); err == nil {
			if err := checkLines(b, comma, -1, res); err != nil {
				t.Fatal(err)
			}
		}

		// Under a header known to be line 1.
		in := append([]byte(strings.Join([]string{"to", "name", "note"}, string(comma))+"\n"), b...)
		res, err := Read(bytes.NewReader(in), Options{Comma: comma})
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if err := checkLines(in, comma, 1, res); err != nil {
			t.Fatal(err)
		}

		var buf bytes.Buffer
		if err := WriteRejects(&buf, res.Columns, res.Rejects); err != nil {
			t.Fatalf("WriteRejects: %v", err)
		}
		if len(in) > maxRecordBytes/8 {
			return // a reject's reason quotes its "to", which could take it past the bound
		}
		back, err := Read(bytes.NewReader(buf.Bytes()), Options{})
		if err != nil {
			t.Fatalf("Read(rejects): %v\n%s", err, buf.Bytes())
		}
		if err := checkLines(buf.Bytes(), ',', 1, back); err != nil {
			t.Fatalf("rejects file: %v\n%s", err, buf.Bytes())
		}
		if got, want := len(back.Rows)+len(back.Rejects), len(res.Rejects); got != want {
			t.Fatalf("rejects file: %d rows + %d rejects, want %d\n%s", len(back.Rows), len(back.Rejects), want, buf.Bytes())
		}
		// In file order, each record's line column names its reject.
		type record struct {
			line   int
			column string
		}
		var recs []record
		for _, r := range back.Rows {
			recs = append(recs, record{r.Line, r.Raw[0]})
		}
		for _, r := range back.Rejects {
			recs = append(recs, record{r.Line, r.Raw[0]})
		}
		slices.SortFunc(recs, func(a, b record) int { return a.line - b.line })
		for i, r := range recs {
			if want := strconv.Itoa(res.Rejects[i].Line); r.column != want {
				t.Fatalf("rejects file line %d: line column %q, want %s\n%s", r.line, r.column, want, buf.Bytes())
			}
		}
	})
}
