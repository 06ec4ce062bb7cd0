package cli

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// versionLine describes the build from its build info: the module's
// version ("(devel)" for a build from a checkout, v1.2.3 for `go install
// …@v1.2.3`), the VCS commit (12 hex digits, "+modified" when the tree had
// uncommitted changes) and its time, and the Go version, e.g.
// "sluice v1.2.3 (github.com/sluice-dev/sluice, commit 78d1820a4f0e, 2026-11-20T10:00:00Z, go1.26.8)".
func versionLine(info *debug.BuildInfo, ok bool) string {
	if !ok || info == nil {
		return "sluice: unknown version (built without module information)"
	}
	version := info.Main.Version
	if version == "" {
		version = "(devel)"
	}
	var rev, at string
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	parts := []string{}
	if info.Main.Path != "" {
		parts = append(parts, info.Main.Path)
	}
	switch {
	case rev == "":
		parts = append(parts, "commit unknown (built without VCS information)")
	default:
		c := "commit " + rev[:min(12, len(rev))]
		if modified {
			c += "+modified"
		}
		parts = append(parts, c)
		if at != "" {
			parts = append(parts, at)
		}
	}
	if info.GoVersion != "" {
		parts = append(parts, info.GoVersion)
	}
	return fmt.Sprintf("sluice %s (%s)", version, strings.Join(parts, ", "))
}

// buildVersion is this binary's versionLine.
func buildVersion() string { return versionLine(debug.ReadBuildInfo()) }

func newVersionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the VCS commit and the Go version it was built from",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(g.stdout, buildVersion())
			return err
		},
	}
}
