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
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/tasks"
)

// These tests hold Read to its promise that no line is lost: every
// non-blank line after the header is in exactly one row or reject, a line
// that is a row of its own is never inside another row's or reject's span,
// and a stray quote costs only its own line.

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
// the header is the first non-empty line and on that line alone; no line is
// in two rows or rejects; nothing spans more than maxRecordLines; rows look
// valid; a reject of one line's text holds that line, named by its own
// number; a reject spans lines only if it duplicates a valid row that does;
// every line after the header that is not blank (only spaces, quotes and
// commas) is in a row or a reject; and every line that is a row on its own
// (see rowOfItsOwn) is the first line of a row or reject, never inside
// another's span.
func checkLines(data []byte, comma rune, res *Result) error {
	lines := physicalLines(data)
	header := 1 // the header's line number
	for header <= len(lines) && strings.TrimSuffix(lines[header-1], "\r") == "" {
		header++
	}
	if header > len(lines) {
		return fmt.Errorf("no header line, but Read found columns %q", res.Columns)
	}
	if rec, ok := readLine(lines[header-1], comma); !ok || len(rec) != len(res.Columns) {
		return fmt.Errorf("header line %d %q read alone gives %q (ok %v), but Read found columns %q", header, clip(lines[header-1]), rec, ok, res.Columns)
	}
	owner := make([]string, len(lines)+1) // what covers each line, by number
	start := make([]bool, len(lines)+1)   // whether a row or reject starts there
	cover := func(what string, line int, raw []string) error {
		n := span(raw)
		switch {
		case n > maxRecordLines:
			return fmt.Errorf("%s at line %d spans %d lines, more than %d", what, line, n, maxRecordLines)
		case line <= header || line+n-1 > len(lines):
			return fmt.Errorf("%s at line %d spanning %d lines is outside the data lines %d..%d", what, line, n, header+1, len(lines))
		}
		for l := line; l < line+n; l++ {
			if owner[l] != "" {
				return fmt.Errorf("line %d is in %s and in %s at line %d", l, owner[l], what, line)
			}
			owner[l] = fmt.Sprintf("%s at line %d", what, line)
		}
		start[line] = true
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
		if n := span(r.Raw); n > 1 && !strings.HasPrefix(r.Reason, "duplicate of line ") {
			return fmt.Errorf("reject at line %d (%s) spans %d lines: only a valid row, or its duplicate, may", r.Line, r.Reason, n)
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
	blank := strings.NewReplacer(`"`, "", string(comma), "")
	toIdx := slices.Index(res.Columns, "to")
	for l := header + 1; l <= len(lines); l++ {
		switch {
		case owner[l] == "" && strings.TrimSpace(blank.Replace(lines[l-1])) != "":
			return fmt.Errorf("line %d %q is in no row and no reject", l, clip(lines[l-1]))
		case !start[l] && rowOfItsOwn(lines[l-1], comma, len(res.Columns), toIdx):
			return fmt.Errorf("line %d %q is a row of its own, but is inside %s", l, clip(lines[l-1]), owner[l])
		}
	}
	return nil
}

// readLine reads line, one physical line, as a CSV record on its own, as
// encoding/csv would if it were the whole file.
func readLine(line string, comma rune) ([]string, bool) {
	cr := csv.NewReader(strings.NewReader(line + "\n"))
	cr.Comma = comma
	cr.FieldsPerRecord = -1
	rec, err := cr.Read()
	return rec, err == nil
}

// checkedPhones caches which "to" values rowOfItsOwn found valid: checking
// a number is slow, under the race detector most of all.
var checkedPhones sync.Map // string → bool

// rowOfItsOwn reports whether line, read alone, is a row that Read would
// send or reject as a duplicate: it has ncols fields and a valid phone
// number in field toIdx.
func rowOfItsOwn(line string, comma rune, ncols, toIdx int) bool {
	rec, ok := readLine(line, comma)
	if !ok || toIdx < 0 || len(rec) != ncols {
		return false
	}
	to := strings.TrimSpace(rec[toIdx])
	if to == "" {
		return false
	}
	if v, ok := checkedPhones.Load(to); ok {
		return v.(bool)
	}
	_, err := tasks.NormalizePhone(to)
	checkedPhones.Store(to, err == nil)
	return err == nil
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
	require.NoError(t, checkLines(data, ',', res))
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
	require.NoError(t, checkLines(data, ',', res))
}

// messyCampaign returns a campaign of n records under the header
// "to,name,note", a quarter of them broken in the ways exports and hand
// edits break them (stray and bare quotes, quoted line breaks that do and do
// not make a row, NUL bytes, invalid UTF-8, bad numbers, duplicates), among
// blank lines, with LF and CRLF endings mixed, and the outcome Read must give
// each line. A quote in it is either balanced within its case's lines or
// followed by a letter, a digit or "+", so a stray quote never closes into a
// well-formed record past its case and the outcomes do not depend on what
// follows.
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
		case k < 73:
			l := emit(row)
			ok(l, to)
			singles = append(singles, single{row, l})
		case k < 74: // a stray quote in the last column closes two lines on: it would swallow a row
			to2, name2 := nums[(i+1)%len(nums)], name+"b"
			row2 := to2 + "," + name2 + ",fine"
			l := emit(to + "," + name + `,"` + note + "\n" + row2 + "\n" + nums[(i+2)%len(nums)] + "," + name + `c,5"`)
			bad(l, "quoted field starting at line %d ends on line %d, swallowing line %d, a row of its own", l, l+2, l+1)
			ok(l+1, to2)
			singles = append(singles, single{row2, l + 1})
			bad(l+2, `bare " in non-quoted-field`)
		case k < 75: // a record that closes on the next line, but with an empty "to"
			l := emit(`,"Hi` + "\n" + to + "," + name + `,x",`)
			bad(l, "quoted field starting at line %d ends on line %d, making an invalid row (to: empty)", l, l+1)
			bad(l+1, `bare " in non-quoted-field`)
		case k < 80: // an SMS body with paragraphs, quotes and commas: one row
			ok(emit(to+","+name+`,"Dear customer,`+"\n"+"we ship Mon, Wed, Fri."+"\n"+`your ""order"" `+strconv.Itoa(i)+"\n\n"+`has shipped."`), to)
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
		case k < 90: // a well-formed record over two lines, but not a valid row: its first line is rejected
			l := emit(to + "," + name + `,"line one` + "\n" + "line\x00two\"")
			bad(l, "quoted field starting at line %d ends on line %d, making an invalid row (note: contains a NUL byte)", l, l+1)
			bad(l+1, `bare " in non-quoted-field`)
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
			require.NoError(t, checkLines(data, ',', res))
			nLines := len(physicalLines(data))
			t.Logf("%d lines: %d rows, %d rejects", nLines, len(res.Rows), len(res.Rejects))
		})
	}
}

// TestReadQuoteSwallowingRows: a quote that closes lines later, with the
// header's field count, is still a stray if a line it would take is a row
// of its own (right field count, valid "to"): its first line is rejected and
// the row is read under its own number.
func TestReadQuoteSwallowingRows(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		opts Options
		want []outcome
	}{
		{
			name: "the reviewer's file",
			in: "to,name,note\n" +
				"+12025550123,Ann,\"hello\n" +
				"+12025550124,Bob,fine\n" +
				"+12025550125,Cy,5\"\n",
			want: []outcome{
				{Line: 2, Reason: "quoted field starting at line 2 ends on line 4, swallowing line 3, a row of its own"},
				{Line: 3, To: "+12025550124"},
				{Line: 4, Reason: `bare " in non-quoted-field`},
			},
		},
		{
			name: "the row is deeper in, with CRLF and an unnormalized number",
			in: "to,name,note\r\n" +
				"+12025550123,Ann,\"hello\r\n" +
				"more text\r\n" +
				"\r\n" +
				"+1 (202) 555-0124,Bob,fine\r\n" +
				"bye\"\r\n" +
				"+12025550125,Cy,x\r\n",
			want: []outcome{
				{Line: 2, Reason: "quoted field starting at line 2 ends on line 6, swallowing line 5, a row of its own"},
				{Line: 3, Reason: "has 1 field, want 3"},
				{Line: 5, To: "+12025550124"},
				{Line: 6, Reason: `bare " in non-quoted-field`},
				{Line: 7, To: "+12025550125"},
			},
		},
		{
			name: "the swallowed row is a duplicate",
			in: "to,name,note\n" +
				"+12025550124,Bob,fine\n" +
				"+12025550123,Ann,\"hi\n" +
				"+12025550124,Bob,fine\n" +
				"bye\"\n",
			want: []outcome{
				{Line: 2, To: "+12025550124"},
				{Line: 3, Reason: "quoted field starting at line 3 ends on line 5, swallowing line 4, a row of its own"},
				{Line: 4, Reason: "duplicate of line 2"},
				{Line: 5, Reason: `bare " in non-quoted-field`},
			},
		},
		{
			name: "another comma",
			in:   "to;name;note\n+12025550123;Ann;\"hello\n+12025550124;Bob;fine\n+12025550125;Cy;5\"\n",
			opts: Options{Comma: ';'},
			want: []outcome{
				{Line: 2, Reason: "quoted field starting at line 2 ends on line 4, swallowing line 3, a row of its own"},
				{Line: 3, To: "+12025550124"},
				{Line: 4, Reason: `bare " in non-quoted-field`},
			},
		},
		{
			name: "lines that are not rows of their own stay in the body",
			in: "to,name,note\n" +
				"+12025550123,Ann,\"Dear Ann,\n" + // 2-6: one row
				"we ship Mon, Wed, Fri.\n" + // 3 fields, but "to" is not a number
				"call +12025550124, or\n" + // 2 fields
				"+12025550125\n" + // a number, but 1 field
				"bye, \"\"Ann\"\"\"\n" +
				"+12025550126,Bob,x\n",
			want: []outcome{
				{Line: 2, To: "+12025550123"},
				{Line: 7, To: "+12025550126"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, err := Read(strings.NewReader(tc.in), tc.opts)
			require.NoError(t, err)
			requireOutcomes(t, tc.want, res)
			comma := tc.opts.Comma
			if comma == 0 {
				comma = ','
			}
			require.NoError(t, checkLines([]byte(tc.in), comma, res))
		})
	}
}

// TestReadInvalidMultiLineRecord: a quote that closes lines later into a
// record that is not a valid row (an empty or invalid "to", a NUL byte, all
// blank) is taken for a stray too: its first line is rejected alone and the
// next line is read on its own, so no line is hidden in the reject.
func TestReadInvalidMultiLineRecord(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want []outcome
	}{
		{
			name: "the reviewer's file",
			in:   "to,name,note\n,\"\n+12025550124,Bob,x\",\n",
			want: []outcome{
				{Line: 2, Reason: "quoted field starting at line 2 ends on line 3, making an invalid row (to: empty)"},
				{Line: 3, Reason: `bare " in non-quoted-field`},
			},
		},
		{
			name: "an invalid number",
			in:   "to,name,note\n+1555,Ann,\"hello\nworld\"\n+12025550124,Bob,x\n",
			want: []outcome{
				{Line: 2, Reason: `quoted field starting at line 2 ends on line 3, making an invalid row (to: "+1555" is not a valid E.164 phone number)`},
				{Line: 3, Reason: `bare " in non-quoted-field`},
				{Line: 4, To: "+12025550124"},
			},
		},
		{
			name: "a NUL byte",
			in:   "to,name,note\n+12025550123,Ann,\"two\nli\x00nes\"\n+12025550124,Bob,x\n",
			want: []outcome{
				{Line: 2, Reason: "quoted field starting at line 2 ends on line 3, making an invalid row (note: contains a NUL byte)"},
				{Line: 3, Reason: `bare " in non-quoted-field`},
				{Line: 4, To: "+12025550124"},
			},
		},
		{
			name: "all blank",
			in:   "to,name,note\n,,\"\n\"\n+12025550124,Bob,x\n",
			want: []outcome{
				{Line: 2, Reason: "quoted field starting at line 2 ends on line 3, making an invalid row (to: empty)"},
				{Line: 3, Reason: "unterminated quoted field starting at line 3"},
				{Line: 4, To: "+12025550124"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, err := Read(strings.NewReader(tc.in), Options{})
			require.NoError(t, err)
			requireOutcomes(t, tc.want, res)
			require.NoError(t, checkLines([]byte(tc.in), ',', res))
		})
	}
}

// The reviewer's files, as Read used to read them: checkLines must see the
// rows hidden inside another row's or reject's span.
func TestCheckLinesFindsHiddenRows(t *testing.T) {
	t.Parallel()
	columns := []string{"to", "name", "note"}
	swallowed := "to,name,note\n+12025550123,Ann,\"hello\n+12025550124,Bob,fine\n+12025550125,Cy,5\"\n"
	res := &Result{Columns: columns, Rows: []Row{{
		Line:   2,
		To:     "+12025550123",
		Params: map[string]string{"to": "+12025550123", "name": "Ann", "note": "hello\n+12025550124,Bob,fine\n+12025550125,Cy,5"},
		Raw:    []string{"+12025550123", "Ann", "hello\n+12025550124,Bob,fine\n+12025550125,Cy,5"},
	}}}
	require.EqualError(t, checkLines([]byte(swallowed), ',', res),
		`line 3 "+12025550124,Bob,fine" is a row of its own, but is inside row at line 2`)

	rejected := "to,name,note\n,\"\n+12025550124,Bob,x\",\n"
	res = &Result{Columns: columns, Rejects: []Reject{{Line: 2, Raw: []string{"", "\n+12025550124,Bob,x", ""}, Reason: "to: empty"}}}
	require.EqualError(t, checkLines([]byte(rejected), ',', res),
		"reject at line 2 (to: empty) spans 2 lines: only a valid row, or its duplicate, may")

	header := "to,\"name\n+12025550123,Ann\"\n+12025550124,Bob\n"
	res = &Result{Columns: []string{"to", "name\n+12025550123,Ann"}, Rows: []Row{{Line: 3, To: "+12025550124", Params: map[string]string{"to": "+12025550124"}, Raw: []string{"+12025550124", "Bob"}}}}
	require.ErrorContains(t, checkLines([]byte(header), ',', res), `header line 1 "to,\"name" read alone`)
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
		require.NoError(t, checkLines([]byte(in), ',', res))
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

	// One CSV record per reject, all of the header's width, each with its
	// original line and its fields, or its text in the reason when it had
	// another field count.
	cr := csv.NewReader(bytes.NewReader(buf.Bytes()))
	recs, err := cr.ReadAll()
	require.NoError(t, err, "a rejects file is a table: every record has the header's width")
	require.Len(t, recs, 1+len(res.Rejects))
	for i, r := range res.Rejects {
		want := append([]string{strconv.Itoa(r.Line), r.Reason}, r.Raw...)
		if len(r.Raw) != len(res.Columns) {
			want = append([]string{strconv.Itoa(r.Line), r.Reason + "; the line was: " + rawLine(r.Raw)}, make([]string, len(res.Columns))...)
		}
		if diff := cmp.Diff(want, recs[i+1]); diff != "" {
			t.Fatalf("rejects file record %d (-want +got):\n%s", i+1, diff)
		}
	}

	// Read back: one row or reject per record, and none of them swallows
	// another.
	back, err := Read(bytes.NewReader(buf.Bytes()), Options{})
	require.NoError(t, err)
	require.NoError(t, checkLines(buf.Bytes(), ',', back))
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
		"+12025550123,Ann,\"hello\n+12025550124,Bob,fine\n+12025550125,Cy,5\"\n",
		",\"\n+12025550124,Bob,x\",\n",
		",,\"\n\"\n",
		// A duplicate whose body line is a row of its own in the rejects file.
		"+12025550123,A,\"a\n1,r,+12025550124,x,y\nb\"\n+12025550123,A,\"a\n1,r,+12025550124,x,y\nb\"\n",
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
			if err := checkLines(b, comma, res); err != nil {
				t.Fatal(err)
			}
		}

		// Under a header known to be line 1.
		in := append([]byte(strings.Join([]string{"to", "name", "note"}, string(comma))+"\n"), b...)
		res, err := Read(bytes.NewReader(in), Options{Comma: comma})
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if err := checkLines(in, comma, res); err != nil {
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
		if err := checkLines(buf.Bytes(), ',', back); err != nil {
			t.Fatalf("rejects file: %v\n%s", err, buf.Bytes())
		}
		if slices.ContainsFunc(back.Rejects, func(r Reject) bool { return strings.HasSuffix(r.Reason, ", a row of its own") }) {
			return // a line in a duplicate's body is a row of its own in the rejects file (see WriteRejects)
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
