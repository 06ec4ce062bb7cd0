package campaign

import (
	"bytes"
	"encoding/csv"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

// outcome is where one input line ended up: a row ("" reason) or a reject.
type outcome struct {
	Line   int
	To     string
	Reason string
}

// outcomes lists rows and rejects in line order, and checks that no line
// appears twice.
func outcomes(t *testing.T, res *Result) []outcome {
	t.Helper()
	var got []outcome
	for _, r := range res.Rows {
		got = append(got, outcome{Line: r.Line, To: r.To})
	}
	for _, r := range res.Rejects {
		got = append(got, outcome{Line: r.Line, Reason: r.Reason})
	}
	slices.SortFunc(got, func(a, b outcome) int { return a.Line - b.Line })
	for i := 1; i < len(got); i++ {
		require.NotEqual(t, got[i-1].Line, got[i].Line, "line %d is both a row and a reject, or twice", got[i].Line)
	}
	return got
}

func TestRead(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		columns []string
		want    []outcome
	}{
		{
			name:    "BOM, CRLF and blank lines",
			in:      "\ufeffTo,name\r\n+12025550123,Ava\r\n\r\n\r\n+1 (202) 555-0124,Noah\r\n,\r\n  , \r\n+61 491 570 006,Mia\r\n",
			columns: []string{"to", "name"},
			want: []outcome{
				{Line: 2, To: "+12025550123"},
				{Line: 5, To: "+12025550124"},
				{Line: 8, To: "+61491570006"},
			},
		},
		{
			name:    "blank lines before the header",
			in:      "\n\n to ,code\n+12025550123,A1\n",
			columns: []string{"to", "code"},
			want:    []outcome{{Line: 4, To: "+12025550123"}},
		},
		{
			name:    "invalid and empty numbers",
			in:      "to,name\n+1555,Ava\nnot-a-number,Noah\n,Mia\n+1 202 555,Leo\n12025550123,Zoë\n+12025550123,Jack\n",
			columns: []string{"to", "name"},
			want: []outcome{
				{Line: 2, Reason: `to: "+1555" is not a valid E.164 phone number`},
				{Line: 3, Reason: `to: "not-a-number" is not a valid E.164 phone number`},
				{Line: 4, Reason: "to: empty"},
				{Line: 5, Reason: `to: "+1 202 555" is not a valid E.164 phone number`},
				{Line: 6, Reason: `to: "12025550123" is not a valid E.164 phone number`},
				{Line: 7, To: "+12025550123"},
			},
		},
		{
			name: "duplicates and repeated recipients",
			in: "to,name,order_id\n" +
				"+12025550123,Ava,ORD-1\n" +
				"+1 202-555-0123,Ava,ORD-1\n" + // same number, other format, same params: duplicate
				"+12025550123,Ava,ORD-2\n" + // same recipient, new order: valid
				"+12025550123, Ava ,ORD-2\n" + // values are trimmed: duplicate
				"+12025550123,Ava,ORD-1\n",
			columns: []string{"to", "name", "order_id"},
			want: []outcome{
				{Line: 2, To: "+12025550123"},
				{Line: 3, Reason: "duplicate of line 2"},
				{Line: 4, To: "+12025550123"},
				{Line: 5, Reason: "duplicate of line 4"},
				{Line: 6, Reason: "duplicate of line 2"},
			},
		},
		{
			name:    "wrong field count",
			in:      "name,to,code\nAva,+12025550123\nNoah,+12025550124,A,extra\nMia,+12025550125,B\n",
			columns: []string{"name", "to", "code"},
			want: []outcome{
				{Line: 2, Reason: "has 2 fields, want 3"},
				{Line: 3, Reason: "has 4 fields, want 3"},
				{Line: 4, To: "+12025550125"},
			},
		},
		{
			name:    "quoted multi-line field and bad quoting",
			in:      "to,note\n+12025550123,\"two\nlines\"\n+12025550124,Bob \"the\" builder\n+12025550125,\"ok\"\n+12025550126,\"oops\"x\n+12025550127,fine\n",
			columns: []string{"to", "note"},
			want: []outcome{
				{Line: 2, To: "+12025550123"},
				{Line: 4, Reason: `bare " in non-quoted-field`},
				{Line: 5, To: "+12025550125"},
				{Line: 6, Reason: `extraneous or missing " in quoted-field`},
				{Line: 7, To: "+12025550127"},
			},
		},
		{
			name: "stray quotes cost their own line",
			in: "to,name\n" +
				"+12025550123,Ava\n" +
				"\"+12025550124,Noah\n" + // 3: the stray quote, never closed
				"+12025550125,Mia\n" +
				"+12025550126,\"Leo\n" + // 5: closes at line 7's quote, followed by "+"
				"+12025550127,Zoë\n" +
				"\"+12025550128,Jack\n" + // 7: never closed
				"+12025550129,Isla\n",
			columns: []string{"to", "name"},
			want: []outcome{
				{Line: 2, To: "+12025550123"},
				{Line: 3, Reason: "unterminated quoted field starting at line 3"},
				{Line: 4, To: "+12025550125"},
				{Line: 5, Reason: "unterminated quoted field starting at line 5"},
				{Line: 6, To: "+12025550127"},
				{Line: 7, Reason: "unterminated quoted field starting at line 7"},
				{Line: 8, To: "+12025550129"},
			},
		},
		{
			name: "quoted line breaks that do not make a row",
			in: "to,name,note\n" +
				"+12025550123,\"Ava\n" + // 2: closes on line 3 with 2 fields
				"B\"\n" + // 3: then read alone: bare quote
				"\"+12025550124\n" + // 4: closes on line 5, "to" over two lines
				"\",Noah,x\n" + // 5: then read alone: never closed
				"+12025550125,Mia,x\n",
			columns: []string{"to", "name", "note"},
			want: []outcome{
				{Line: 2, Reason: "quoted field starting at line 2 ends on line 3, giving 2 fields, want 3"},
				{Line: 3, Reason: `bare " in non-quoted-field`},
				{Line: 4, Reason: `quoted field starting at line 4 ends on line 5, putting a line break in "to"`},
				{Line: 5, Reason: "unterminated quoted field starting at line 5"},
				{Line: 6, To: "+12025550125"},
			},
		},
		{
			name: "multi-line rows and CRLF",
			in: "to,name,note\r\n" +
				"+12025550123,Ava,\"Hi,\r\n\r\nyour \"\"order\"\"\r\nshipped\"\r\n" + // 2-5
				"+12025550123,Ava,\"Hi,\n\nyour \"\"order\"\"\nshipped\"\n" + // 6-9: the same row
				"+12025550124,Noah,x\r\n",
			columns: []string{"to", "name", "note"},
			want: []outcome{
				{Line: 2, To: "+12025550123"},
				{Line: 6, Reason: "duplicate of line 2"},
				{Line: 10, To: "+12025550124"},
			},
		},
		{
			name: "NUL bytes and invalid UTF-8",
			in: "to,name,note\n" +
				"+12025550123,A\x00va,x\n" +
				"+12025550124,Jos\xe9,x\n" +
				"+12025550125,Mia,\"two\nli\x00nes\"\n" + // 4-5: not a row, so the quote is a stray
				"+1202555\xff0126,Leo,x\n" +
				"\x00\n" + // one field
				"+12025550127,Zoë,x\n",
			columns: []string{"to", "name", "note"},
			want: []outcome{
				{Line: 2, Reason: "name: contains a NUL byte"},
				{Line: 3, Reason: "name: not valid UTF-8"},
				{Line: 4, Reason: "quoted field starting at line 4 ends on line 5, making an invalid row (note: contains a NUL byte)"},
				{Line: 5, Reason: `bare " in non-quoted-field`},
				{Line: 6, Reason: "to: not valid UTF-8"},
				{Line: 7, Reason: "has 1 field, want 3"},
				{Line: 8, To: "+12025550127"},
			},
		},
		{
			name:    "header only",
			in:      "to,name\n",
			columns: []string{"to", "name"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, err := Read(strings.NewReader(tc.in), Options{})
			require.NoError(t, err)
			require.Equal(t, tc.columns, res.Columns)
			if diff := cmp.Diff(tc.want, outcomes(t, res)); diff != "" {
				t.Errorf("rows and rejects (-want +got):\n%s", diff)
			}
			require.NoError(t, checkLines([]byte(tc.in), ',', res))
		})
	}
}

func TestReadRowContents(t *testing.T) {
	t.Parallel()
	res, err := Read(strings.NewReader("Name; TO ;code\n Ava ;+1 (202) 555-0123;A1\n"), Options{Comma: ';'})
	require.NoError(t, err)
	want := []Row{{
		Line:   2,
		To:     "+12025550123",
		Params: map[string]string{"Name": "Ava", "to": "+12025550123", "code": "A1"},
		Raw:    []string{" Ava ", "+1 (202) 555-0123", "A1"},
	}}
	if diff := cmp.Diff(want, res.Rows); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	require.Equal(t, []string{"Name", "to", "code"}, res.Columns)
}

func TestReadRejectRaw(t *testing.T) {
	t.Parallel()
	res, err := Read(strings.NewReader("to,name\n+1555,Ava\n+12025550123,\"x\"y\n"), Options{})
	require.NoError(t, err)
	want := []Reject{
		{Line: 2, Raw: []string{"+1555", "Ava"}, Reason: `to: "+1555" is not a valid E.164 phone number`},
		{Line: 3, Raw: []string{`+12025550123,"x"y`}, Reason: `extraneous or missing " in quoted-field`},
	}
	if diff := cmp.Diff(want, res.Rejects); diff != "" {
		t.Errorf("rejects (-want +got):\n%s", diff)
	}
}

func TestReadFatal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		opts     Options
		wantErr  string
	}{
		{"missing to", "name,code\nAva,A1\n", Options{}, `line 1: missing required column "to" (have: name, code)`},
		{"missing to after blank lines", "\r\n\r\nname\r\n", Options{}, `line 3: missing required column "to" (have: name)`},
		{"empty input", "", Options{}, "line 1: missing header row (the input is empty)"},
		{"only a BOM", "\ufeff", Options{}, "line 1: missing header row (the input is empty)"},
		{"duplicate column", "to,name,Name\n", Options{}, `line 1: duplicate column "Name"`},
		{"two to columns", "To,to\n", Options{}, `line 1: duplicate column "to"`},
		{"unnamed column", "to,name,\n", Options{}, "line 1: column 3 has no name"},
		{"bad header quoting", "to,\"na\"me\n", Options{}, `line 1: header: extraneous or missing " in quoted-field`},
		{"stray quote in the header", "\n\"to,name\n+12025550123,Ava\n", Options{}, "line 2: header: unterminated quoted field starting at line 2"},
		{"header over two lines", "to,\"name\n+12025550123,Ann\"\n+12025550124,Bob\n", Options{}, "line 1: header: quoted field starting at line 1 ends on line 2, putting a line break in the name of column 2"},
		{"header over two lines after blank lines", "\r\n\"to\r\n\",name\r\n", Options{}, "line 2: header: quoted field starting at line 2 ends on line 3, putting a line break in the name of column 1"},
		{"CR in a column name", "to,\"na\rme\"\n+12025550123,Ann\n", Options{}, `line 1: column 2: name "na\rme" contains a line break`},
		{"NUL in the header", "t\x00o\x00,\x00n\x00\n", Options{}, `line 1: column 1: name "t\x00o\x00" contains a NUL byte (is the file UTF-16? save it as UTF-8)`},
		{"invalid UTF-8 in the header", "to,Pr\xe9nom\n", Options{}, `line 1: column 2: name "Pr\xe9nom" is not valid UTF-8 (save the file as UTF-8)`},
		{"bad comma", "to\n", Options{Comma: '"'}, `comma: '"' cannot separate CSV fields`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Read(strings.NewReader(tc.in), tc.opts)
			require.EqualError(t, err, tc.wantErr)
		})
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestReadIOError(t *testing.T) {
	t.Parallel()
	_, err := Read(failingReader{}, Options{})
	require.EqualError(t, err, "read campaign: disk on fire")
}

func TestWriteRejectsRoundTrip(t *testing.T) {
	t.Parallel()
	in := "to,name,order_id\n" +
		"+1555,Ava,ORD-1\n" +
		"+12025550123,\"Smith, Jo\",ORD-2\n" +
		"+12025550123,\"Smith, Jo\",ORD-2\n" +
		"+12025550124,Noah\n" +
		"+12025550125,Mia,ORD-4,extra\n"
	res, err := Read(strings.NewReader(in), Options{})
	require.NoError(t, err)
	require.Len(t, res.Rows, 1)

	var buf bytes.Buffer
	require.NoError(t, WriteRejects(&buf, res.Columns, res.Rejects))
	want := "line,reason,to,name,order_id\n" +
		"2,\"to: \"\"+1555\"\" is not a valid E.164 phone number\",+1555,Ava,ORD-1\n" +
		"4,duplicate of line 3,+12025550123,\"Smith, Jo\",ORD-2\n" +
		"5,\"has 2 fields, want 3; the line was: +12025550124,Noah\",,,\n" +
		"6,\"has 4 fields, want 3; the line was: +12025550125,Mia,ORD-4,extra\",,,\n"
	require.Equal(t, want, buf.String())

	// Read back: fields are intact, rows with the wrong field count stay
	// rejected (their "to" is empty until the user fills in the cells), and
	// line and reason are annotations, not parameters.
	back, err := Read(bytes.NewReader(buf.Bytes()), Options{})
	require.NoError(t, err)
	require.Equal(t, []string{"line", "reason", "to", "name", "order_id"}, back.Columns)
	require.Len(t, back.Rows, 1)
	require.Equal(t, map[string]string{"to": "+12025550123", "name": "Smith, Jo", "order_id": "ORD-2"}, back.Rows[0].Params)
	require.Equal(t, res.Rejects[1].Raw, back.Rows[0].Raw[2:])
	// The duplicate keeps its original key, so running it again sends nothing twice.
	orig := res.Rows[0]
	require.Equal(t, IdempotencyKey("c", "sms", orig, res.Columns), IdempotencyKey("c", "sms", back.Rows[0], back.Columns))
	if diff := cmp.Diff([]outcome{
		{Line: 2, Reason: `to: "+1555" is not a valid E.164 phone number`},
		{Line: 3, To: "+12025550123"},
		{Line: 4, Reason: "to: empty"},
		{Line: 5, Reason: "to: empty"},
	}, outcomes(t, back)); diff != "" {
		t.Errorf("read back (-want +got):\n%s", diff)
	}

	// Fixed as the reason says, the row is sent.
	fixed := strings.Replace(buf.String(), "; the line was: +12025550124,Noah\",,,", "\",+12025550124,Noah,ORD-3", 1)
	again, err := Read(strings.NewReader(fixed), Options{})
	require.NoError(t, err)
	require.Len(t, again.Rows, 2)
	require.Equal(t, map[string]string{"to": "+12025550124", "name": "Noah", "order_id": "ORD-3"}, again.Rows[1].Params)

	// The rejects of a rejects file get fresh line and reason columns.
	buf.Reset()
	require.NoError(t, WriteRejects(&buf, back.Columns, back.Rejects))
	cr := csv.NewReader(&buf)
	cr.FieldsPerRecord = -1
	recs, err := cr.ReadAll()
	require.NoError(t, err)
	require.Equal(t, []string{"line", "reason", "to", "name", "order_id"}, recs[0])
	require.Equal(t, []string{"2", `to: "+1555" is not a valid E.164 phone number`, "+1555", "Ava", "ORD-1"}, recs[1])
	require.Equal(t, []string{"4", "to: empty", "", "", ""}, recs[2])
	for _, rec := range recs {
		require.Len(t, rec, 5, "every record has the header's width")
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, io.ErrShortWrite }

func TestWriteRejectsError(t *testing.T) {
	t.Parallel()
	err := WriteRejects(failingWriter{}, []string{"to"}, []Reject{{Line: 2, Raw: []string{"x"}, Reason: "r"}})
	require.ErrorIs(t, err, io.ErrShortWrite)
}
