package cli

import (
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
