package cli

import (
	"encoding/json"
	"io"
	"os"

	"golang.org/x/term"
)

// terminalOrNil returns w when it is a terminal, else nil: progress bars are
// for people, and a log file or pipe gets only the summary.
func terminalOrNil(w io.Writer) io.Writer {
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return w
	}
	return nil
}

// printJSON writes v to w as indented JSON, the form of every --json output.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
