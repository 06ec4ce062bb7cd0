package campaign

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/tasks"
)

// Options configures Read.
type Options struct {
	// Comma is the field separator, e.g. ';' for spreadsheets exported with a
	// European locale. Zero means ','.
	Comma rune
}

// Result is a parsed campaign file.
type Result struct {
	// Columns is the header, in file order, with names trimmed and the
	// recipient column spelled "to" whatever its case in the file.
	Columns []string
	// Rows are the valid data rows, in file order.
	Rows []Row
	// Rejects are the data rows that cannot be sent, and the lines that are
	// not valid CSV or whose quote is a stray, in file order, with the
	// reason. Every line after the header is in exactly one of Rows and
	// Rejects, except empty lines and one-line rows whose fields are all
	// blank (",," or `"",""`), which are skipped (see Read).
	Rejects []Reject
}

// Row is one valid recipient row.
type Row struct {
	// Line is the 1-based physical line of the file where the row starts
	// (the header is line 1 unless blank lines precede it). A row whose
	// quoted field holds line breaks covers Line and the lines after it, one
	// per line break in Raw; none of those lines is a row of its own.
	Line int
	// To is the recipient in E.164 form ("+12025550123").
	To string
	// Params maps each column name in Result.Columns to the row's value,
	// trimmed of surrounding whitespace; Params["to"] is To. The annotation
	// columns "line" and "reason" (see WriteRejects) are left out.
	Params map[string]string
	// Raw is the row's fields exactly as read (a quoted CRLF line break
	// reads as "\n").
	Raw []string
}

// Reject is a data row, or a line, that Read did not accept.
type Reject struct {
	// Line is the 1-based physical line where the row starts. Only a
	// duplicate of a valid multi-line row covers more than Line (one more
	// line per line break in Raw); any other reject is one line, and a line
	// that is not valid CSV or opens a stray quote is rejected alone,
	// whatever follows it.
	Line int
	// Raw is the row's fields as read. For a line that is not valid CSV (a
	// bare or unbalanced quote), it is that one line's text, without its line
	// ending, as one field.
	Raw []string
	// Reason says what is wrong: `to: "+1555" is not a valid E.164 phone
	// number`, "to: empty", "has 4 fields, want 3", "duplicate of line 7",
	// "name: contains a NUL byte", "name: not valid UTF-8", a CSV syntax
	// error on the line itself (`bare " in non-quoted-field`, `extraneous or
	// missing " in quoted-field`), or a quote that opens a field on this line
	// and does not close it into a valid row: "unterminated quoted field
	// starting at line 99", "quoted field starting at line 99 ends on line
	// 104, giving 2 fields, want 3", `quoted field starting at line 99 ends
	// on line 104, putting a line break in "to"`, "quoted field starting at
	// line 99 ends on line 104, swallowing line 101, a row of its own",
	// "quoted field starting at line 99 ends on line 100, making an invalid
	// row (to: empty)".
	Reason string
}

// Annotation columns that WriteRejects adds. When a fixed rejects file is
// read back they are not parameters, so a row gets the same idempotency key
// as in the original file.
const (
	lineColumn   = "line"
	reasonColumn = "reason"
)

// A quoted field may carry a record over line breaks (an SMS body with
// paragraphs), but then the record, from the first byte of its first line
// to the end of its last line, spans at most maxRecordLines lines and
// maxRecordBytes bytes. That is far more than any message (WhatsApp text
// stops at 4096 characters, a 10-part SMS at 1530), and it caps what a
// stray quote can take with it and how far Read looks for its end.
const (
	maxRecordLines = 100
	maxRecordBytes = 64 << 10
)

var bom = []byte("\ufeff")

// Read parses a campaign CSV: a header row naming the columns, then one
// recipient per row. The "to" column (matched case-insensitively, ignoring
// surrounding spaces) is required and holds the recipient's phone number in
// international format ("+1 (202) 555-0123" is accepted and normalized to
// E.164); the other columns are parameters for message templates (see
// Render).
//
// Read accepts a UTF-8 byte order mark and CRLF line endings, and skips empty
// lines and one-line rows whose fields are all blank (",," or `"",""`). It
// rejects, with a reason, rows with the wrong number of fields, a NUL byte or
// invalid UTF-8 in a field (the reason names the column), an empty or invalid
// "to", and exact duplicates of an earlier row (same normalized "to" and same
// parameter values). The same recipient with different parameters is valid:
// it is two messages.
//
// No line is lost: every physical line after the header, except the skipped
// ones, ends up in exactly one row of Result.Rows or Result.Rejects, under
// its own line number or inside the one valid multi-line row it belongs to,
// and a line that is a row of its own (the header's field count and a valid
// "to" when read alone) is always under its own number. Read parses one
// record at a time, from the start of a line L. A record that stays on line
// L is a row, or, if the line is not valid CSV (a bare quote, text after a
// closing quote), line L alone is rejected with the CSV error. A quoted field
// that is still open at the end of line L may continue on the next lines,
// and the record is then one row, reported at line L, but only if it closes
// properly within maxRecordLines (100) lines and maxRecordBytes (64 KiB),
// has as many fields as the header, keeps "to" on one line, is a valid row
// (a valid "to", no NUL byte or invalid UTF-8), and none of the lines after
// L that it takes is a row of its own. Otherwise the quote is taken to be a
// stray: line L alone is rejected ("unterminated quoted field starting at
// line L", or why the record it closes into is not taken) and parsing
// starts again at line L+1. So a stray quote costs its own line, never the
// rest of the file nor a row after it. The price is that a line of a
// message body that reads as a row on its own ("+12025550123,see you,Ann"
// under a three-column header) cannot be inside a quoted field: the record
// is rejected at its first line, and its other lines are read one by one.
//
// The error is non-nil only when the file as a whole is unusable: it cannot
// be read, has no header, or the header is not valid CSV, is not on one line
// (a quote that carries it onto the next line would make that line part of a
// column name), lacks "to", repeats or omits a column name, or has a name
// with a line break, a NUL byte or invalid UTF-8. It says where: `line 1:
// missing required column "to" (have: name, code)`, `line 1: header: quoted
// field starting at line 1 ends on line 2, putting a line break in the name
// of column 2`.
// Read holds the whole input in memory.
func Read(r io.Reader, opts Options) (*Result, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read campaign: %w", err)
	}
	data = bytes.TrimPrefix(data, bom)

	comma := ','
	if opts.Comma != 0 {
		if c := opts.Comma; c == '"' || c == '\r' || c == '\n' || c == utf8.RuneError || !utf8.ValidRune(c) {
			return nil, fmt.Errorf("comma: %q cannot separate CSV fields", opts.Comma)
		}
		comma = opts.Comma
	}
	sc := newRecordScanner(data, comma)

	// The header is one line: a quote that carries it onto the next line is a
	// stray, or the next line would become part of a column name and be lost.
	hdr, ok := sc.next(func(rec []string, _ int, _ []byte) string {
		i := slices.IndexFunc(rec, func(f string) bool { return strings.ContainsAny(f, "\r\n") })
		return fmt.Sprintf("putting a line break in the name of column %d", i+1)
	})
	if !ok {
		return nil, errors.New("line 1: missing header row (the input is empty)")
	}
	if hdr.reason != "" {
		return nil, fmt.Errorf("line %d: header: %s", hdr.line, hdr.reason)
	}
	headerLine := hdr.line
	res := &Result{}
	toIdx := -1
	for i, name := range hdr.fields {
		name = strings.TrimSpace(name)
		if strings.EqualFold(name, "to") {
			name = "to"
			toIdx = i
		}
		switch {
		case name == "":
			return nil, fmt.Errorf("line %d: column %d has no name", headerLine, i+1)
		case strings.IndexByte(name, 0) >= 0:
			return nil, fmt.Errorf("line %d: column %d: name %q contains a NUL byte (is the file UTF-16? save it as UTF-8)", headerLine, i+1, name)
		case strings.ContainsAny(name, "\r\n"):
			return nil, fmt.Errorf("line %d: column %d: name %q contains a line break", headerLine, i+1, name)
		case !utf8.ValidString(name):
			return nil, fmt.Errorf("line %d: column %d: name %q is not valid UTF-8 (save the file as UTF-8)", headerLine, i+1, name)
		case slices.ContainsFunc(res.Columns, func(c string) bool { return strings.EqualFold(c, name) }):
			return nil, fmt.Errorf("line %d: duplicate column %q", headerLine, name)
		}
		res.Columns = append(res.Columns, name)
	}
	if toIdx < 0 {
		return nil, fmt.Errorf("line %d: missing required column \"to\" (have: %s)", headerLine, strings.Join(res.Columns, ", "))
	}

	seen := make(map[string]int) // content key → line of first occurrence
	phones := phoneCache{}
	// rowOfItsOwn reports whether line, one physical line, read alone is a
	// row that would be sent or rejected as a duplicate: the header's field
	// count and a valid "to".
	rowOfItsOwn := func(line []byte) bool {
		rec, ok := sc.lineRecord(line)
		if !ok || len(rec) != len(res.Columns) {
			return false
		}
		to := strings.TrimSpace(rec[toIdx])
		if to == "" {
			return false
		}
		_, err := phones.normalize(to)
		return err == nil
	}
	// accept says why a record starting at line first whose quoted field
	// runs onto the lines in cont is not taken as one row ("" if it is). It
	// is one row only if it is a valid row and no line it takes is a row of
	// its own: a quote that closes on a later line with the right field
	// count is otherwise a stray that would hide rows, or would hide the
	// lines of an invalid record inside one reject.
	accept := func(rec []string, first int, cont []byte) string {
		switch {
		case len(rec) != len(res.Columns):
			return "giving " + fieldCount(len(rec), len(res.Columns))
		case strings.ContainsAny(rec[toIdx], "\r\n"):
			return `putting a line break in "to"`
		}
		for line := first + 1; len(cont) > 0; line++ {
			text := cont
			if i := bytes.IndexByte(cont, '\n'); i >= 0 {
				text = cont[:i+1]
			}
			cont = cont[len(text):]
			if rowOfItsOwn(text) {
				return fmt.Sprintf("swallowing line %d, a row of its own", line)
			}
		}
		if _, why := parseRow(res.Columns, toIdx, first, rec, phones); why != "" {
			return "making an invalid row (" + why + ")"
		}
		return ""
	}
	for {
		rec, ok := sc.next(accept)
		if !ok {
			break
		}
		if rec.reason != "" {
			res.Rejects = append(res.Rejects, Reject{Line: rec.line, Raw: []string{rec.raw}, Reason: rec.reason})
			continue
		}
		if isBlank(rec.fields) {
			continue
		}
		line := rec.line
		row, reason := parseRow(res.Columns, toIdx, line, rec.fields, phones)
		if reason == "" {
			key := string(contentKey(nil, row, res.Columns))
			if first, ok := seen[key]; ok {
				reason = "duplicate of line " + strconv.Itoa(first)
			} else {
				seen[key] = line
			}
		}
		if reason != "" {
			res.Rejects = append(res.Rejects, Reject{Line: line, Raw: rec.fields, Reason: reason})
			continue
		}
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}

// recordScanner splits a CSV input into records one at a time, starting
// each at the beginning of a physical line and never letting a quote carry a
// record past the bounds (see Read). encoding/csv parses each record's
// bytes; the scanner only chooses which bytes.
type recordScanner struct {
	data  []byte
	off   int // offset of the next physical line
	line  int // its 1-based number
	comma rune
	src   bytes.Reader
	buf   *bufio.Reader // reused by each record's csv.Reader
}

// scanned is what recordScanner.next found at one line.
type scanned struct {
	line   int      // first physical line
	fields []string // the record's fields, when reason is ""
	raw    string   // the line's text without its line ending, when reason is set
	reason string   // why the line alone is rejected
}

func newRecordScanner(data []byte, comma rune) *recordScanner {
	return &recordScanner{data: data, line: 1, comma: comma, buf: bufio.NewReader(nil)}
}

// next returns the record that starts at the next non-empty line, or false
// at the end of the input. A record whose quoted field runs onto later lines
// is returned whole only if it parses, stays within the bounds, and accept
// takes it: accept gets the record, its first line's number and the bytes of
// its other lines, and returns "" or why not. Otherwise next rejects the
// first line alone and resumes at the line after it.
func (s *recordScanner) next(accept func(rec []string, first int, cont []byte) string) (scanned, bool) {
	for s.off < len(s.data) {
		end, next := s.lineEnd(s.off)
		text := bytes.TrimSuffix(s.data[s.off:end], []byte("\r"))
		if len(text) == 0 { // an empty line, as encoding/csv skips them
			s.off, s.line = next, s.line+1
			continue
		}
		start, line := s.off, s.line
		// Unless it is rejected whole, line L is consumed alone.
		s.off, s.line = next, s.line+1
		if !endsInQuotedField(text, s.comma) {
			rec, _, err := s.parse(s.data[start:next])
			if err != nil {
				return scanned{line: line, raw: string(text), reason: syntaxReason(err)}, true
			}
			return scanned{line: line, fields: rec}, true
		}

		// A quoted field is open at the end of line L: look for its end in
		// the following lines, within the bounds.
		limit := next
		for n := 1; n < maxRecordLines && limit < len(s.data); n++ {
			stop := min(len(s.data), start+maxRecordBytes)
			if limit >= stop {
				break
			}
			i := bytes.IndexByte(s.data[limit:stop], '\n')
			if i < 0 {
				if stop < len(s.data) {
					break // the line does not end within the bound
				}
				limit = len(s.data)
				break
			}
			limit += i + 1
		}
		rec, n, err := s.parse(s.data[start:limit])
		if err != nil || start+n < next {
			// Line L is well-formed up to its open quote, so the error is
			// where the field should close: at the end of the window, or at a
			// quote followed by text. (A record ending inside line L cannot
			// happen, but would put the next one mid-line.)
			return scanned{line: line, raw: string(text), reason: fmt.Sprintf("unterminated quoted field starting at line %d", line)}, true
		}
		span := bytes.Count(s.data[start:start+n], []byte("\n"))
		if n > 0 && s.data[start+n-1] != '\n' {
			span++ // the last line has no line ending
		}
		if why := accept(rec, line, s.data[next:start+n]); why != "" {
			return scanned{line: line, raw: string(text), reason: fmt.Sprintf("quoted field starting at line %d ends on line %d, %s", line, line+span-1, why)}, true
		}
		s.off, s.line = start+n, line+span
		return scanned{line: line, fields: rec}, true
	}
	return scanned{}, false
}

// lineRecord reads line, one physical line with or without its line ending,
// as a record on its own. It is false if the line is not one: it is empty,
// has a quoting error, or leaves a quoted field open.
func (s *recordScanner) lineRecord(line []byte) ([]string, bool) {
	rec, _, err := s.parse(line)
	return rec, err == nil
}

// lineEnd returns the offset of the '\n' ending the line at off (or the end
// of the input) and the offset of the next line.
func (s *recordScanner) lineEnd(off int) (end, next int) {
	i := bytes.IndexByte(s.data[off:], '\n')
	if i < 0 {
		return len(s.data), len(s.data)
	}
	return off + i, off + i + 1
}

// parse reads one record from b with encoding/csv, returning it and the
// number of bytes it took.
func (s *recordScanner) parse(b []byte) ([]string, int, error) {
	s.src.Reset(b)
	s.buf.Reset(&s.src)
	cr := csv.NewReader(s.buf) // a *bufio.Reader of the default size is used as is
	cr.Comma = s.comma
	cr.FieldsPerRecord = -1 // rows with the wrong field count are rejected, not fatal
	rec, err := cr.Read()
	if err == io.EOF { // cannot happen: b starts with a non-empty line
		err = errors.New("empty record")
	}
	return rec, int(cr.InputOffset()), err
}

// syntaxReason is the reject reason for a CSV error.
func syntaxReason(err error) string {
	if pe, ok := errors.AsType[*csv.ParseError](err); ok {
		return pe.Err.Error()
	}
	return err.Error()
}

// endsInQuotedField reports whether line, one line of text without its line
// ending, leaves a quoted field open when read as the start of a record with
// encoding/csv's strict quoting rules. It is false if the line is complete
// or has a quoting error first, which parsing the line alone reports.
func endsInQuotedField(line []byte, comma rune) bool {
	var buf [utf8.UTFMax]byte
	commaBytes := buf[:utf8.EncodeRune(buf[:], comma)]
	commaLen := len(commaBytes)
	for {
		if len(line) == 0 || line[0] != '"' { // unquoted field
			i := bytes.IndexRune(line, comma)
			field := line
			if i >= 0 {
				field = line[:i]
			}
			if i < 0 || bytes.IndexByte(field, '"') >= 0 {
				return false // the last field, or a bare quote
			}
			line = line[i+commaLen:]
			continue
		}
		line = line[1:] // quoted field
		for {
			i := bytes.IndexByte(line, '"')
			if i < 0 {
				return true
			}
			line = line[i+1:]
			if len(line) == 0 || line[0] != '"' {
				break // the closing quote
			}
			line = line[1:] // "" is a literal quote
		}
		if !bytes.HasPrefix(line, commaBytes) {
			return false // the end of the line, or text after the closing quote
		}
		line = line[commaLen:]
	}
}

// fieldCount says "has 1 field, want 3".
func fieldCount(got, want int) string {
	fields := "fields"
	if got == 1 {
		fields = "field"
	}
	return fmt.Sprintf("%d %s, want %d", got, fields, want)
}

// phoneCache remembers tasks.NormalizePhone's answer for each trimmed "to"
// value during one Read. Checking a number against libphonenumber's metadata
// takes most of Read's time (~15 µs, ten times that under the race
// detector), and campaigns repeat recipients: a second order, a rejects file
// run again, test files drawn from the 6,154 fictional numbers.
type phoneCache map[string]phoneAnswer

type phoneAnswer struct {
	e164 string
	err  error
}

func (c phoneCache) normalize(to string) (string, error) {
	if a, ok := c[to]; ok {
		return a.e164, a.err
	}
	e164, err := tasks.NormalizePhone(to)
	c[to] = phoneAnswer{e164, err}
	return e164, err
}

// parseRow validates one record; a non-empty reason rejects it.
func parseRow(columns []string, toIdx, line int, rec []string, phones phoneCache) (Row, string) {
	if len(rec) != len(columns) {
		return Row{}, "has " + fieldCount(len(rec), len(columns))
	}
	for i, c := range columns {
		switch {
		case strings.IndexByte(rec[i], 0) >= 0:
			return Row{}, c + ": contains a NUL byte"
		case !utf8.ValidString(rec[i]):
			return Row{}, c + ": not valid UTF-8"
		}
	}
	to := strings.TrimSpace(rec[toIdx])
	if to == "" {
		return Row{}, "to: empty"
	}
	e164, err := phones.normalize(to)
	if err != nil {
		return Row{}, "to: " + err.Error()
	}
	params := make(map[string]string, len(columns))
	for i, c := range columns {
		if !isAnnotation(c) {
			params[c] = strings.TrimSpace(rec[i])
		}
	}
	params["to"] = e164
	return Row{Line: line, To: e164, Params: params, Raw: rec}, ""
}

func isBlank(rec []string) bool {
	for _, f := range rec {
		if strings.TrimSpace(f) != "" {
			return false
		}
	}
	return true
}

func isAnnotation(column string) bool {
	return strings.EqualFold(column, lineColumn) || strings.EqualFold(column, reasonColumn)
}

// rawLine gives a reject's fields as one CSV line: a line that was not
// valid CSV is its single field, as read.
func rawLine(raw []string) string {
	if len(raw) == 1 {
		return raw[0]
	}
	var b strings.Builder
	cw := csv.NewWriter(&b)
	_ = cw.Write(raw) // a strings.Builder does not fail
	cw.Flush()
	return strings.TrimSuffix(b.String(), "\n")
}

// contentKey appends to b an unambiguous encoding of what makes a row's
// message: its recipient and its parameter values in column order.
func contentKey(b []byte, row Row, columns []string) []byte {
	b = appendField(b, row.To)
	for _, c := range columns {
		if v, ok := row.Params[c]; ok && c != "to" {
			b = appendField(b, v)
		}
	}
	return b
}

// appendField appends s length-prefixed, so that no two field lists encode
// the same.
func appendField(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}

// WriteRejects writes rejects as CSV for the user to fix and feed back to
// Read: the header, then one record per reject, with two columns in front:
// "line" (the reject's line in the input) and "reason". Every record has
// the header's width, so the file opens as a table anywhere:
//
//   - A reject with the header's field count (a bad number, a duplicate, a
//     NUL byte) keeps its fields under their headings.
//   - A reject with another field count, or a line that was not valid CSV,
//     has empty cells and its original text at the end of its reason
//     (`has 2 fields, want 3; the line was: +12025550124,Noah`). Its empty
//     "to" keeps it rejected until the user fills in the cells; a stray quote
//     in it is inside a quoted cell, so it swallows nothing when read back.
//
// Reading the file back gives one row or reject per record. One exception: a
// line inside a duplicate's multi-line field that, with the two extra
// columns, is a row of its own in the rejects file is read as one there (see
// Read). A reason that quotes a row near Read's 64 KiB bound may take the
// record past it.
//
// Read treats "line" and "reason" as annotations, not parameters, so a fixed
// row gets the same idempotency key as it would have had in the original
// file; the columns may also be deleted. If header already has them (the
// rejects of a rejects file), they are replaced rather than repeated.
func WriteRejects(w io.Writer, header []string, rejects []Reject) error {
	var keep []int // header columns other than line and reason
	for i, c := range header {
		if !isAnnotation(strings.TrimSpace(c)) {
			keep = append(keep, i)
		}
	}
	cw := csv.NewWriter(w)
	out := []string{lineColumn, reasonColumn}
	for _, i := range keep {
		out = append(out, header[i])
	}
	if err := cw.Write(out); err != nil {
		return fmt.Errorf("write rejects: %w", err)
	}
	for _, r := range rejects {
		out = append(out[:0], strconv.Itoa(r.Line), r.Reason)
		if len(r.Raw) == len(header) {
			for _, i := range keep {
				out = append(out, r.Raw[i])
			}
		} else {
			out[1] = r.Reason + "; the line was: " + rawLine(r.Raw)
			for range keep {
				out = append(out, "")
			}
		}
		if err := cw.Write(out); err != nil {
			return fmt.Errorf("write rejects: line %d: %w", r.Line, err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write rejects: %w", err)
	}
	return nil
}
