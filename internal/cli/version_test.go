package cli

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestVersionLineNamesVersionAndCommit(t *testing.T) {
	t.Parallel()
	info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/sluice-dev/sluice", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "78d1820a4f0e5c6b7d8e9f00112233445566778"}, {Key: "vcs.time", Value: "2026-11-20T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	require.Equal(t, "sluice v1.2.3 (github.com/sluice-dev/sluice, commit 78d1820a4f0e+modified, 2026-11-20T10:00:00Z, go1.26.8)", versionLine(info, true))
	info.Settings, info.Main.Version = nil, "(devel)"
	require.Equal(t, "sluice (devel) (github.com/sluice-dev/sluice, commit unknown (built without VCS information), go1.26.8)", versionLine(info, true))
	require.Equal(t, "sluice: unknown version (built without module information)", versionLine(nil, false))
}

// `sluice --version` and `sluice version` print the build's line; an
// unknown flag on the root is named once, not as "sluice: sluice: …".
func TestVersionFlagAndCommand(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--version"}, {"version"}} {
		r := run(t, args...)
		require.Equal(t, 0, r.code, r.stderr)
		require.Equal(t, buildVersion()+"\n", r.stdout)
		require.Regexp(t, `^sluice \S+ \(`, r.stdout)
	}
	r := run(t, "--verison")
	require.Equal(t, 2, r.code)
	require.Equal(t, "sluice: unknown flag: --verison\n", r.stderr)
	r = run(t, "limits", "set", "--burst", "x")
	require.Equal(t, 2, r.code)
	require.Equal(t, "sluice: limits set: invalid argument \"x\" for \"--burst\" flag: strconv.ParseInt: parsing \"x\": invalid syntax\n", r.stderr)
}

// A command that does not read the configuration refuses --config (exit
// 2) before it does anything, instead of ignoring the file.
func TestCommandsThatIgnoreTheConfigRefuseIt(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, "bad.yaml", "channels:\n  sms:\n    rate_typo: 1\n")
	for _, args := range [][]string{
		{"emulate"},
		{"version"},
		{"config", "check", cfg},
	} {
		r := run(t, append([]string{"-c", cfg}, args...)...)
		require.Equal(t, 2, r.code, "%q", args)
		require.Contains(t, r.stderr, ": --config is not read here: ")
		require.Empty(t, r.stdout)
	}
	// The commands that read it load it: the bad file is refused; the demo
	// too, which reads its redis section only.
	r := run(t, "-c", cfg, "limits", "list")
	require.Equal(t, 1, r.code)
	r = run(t, "-c", cfg, "demo", "--timeout", "1s")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "channels.sms.rate_typo: unknown field")
	require.Contains(t, r.stderr, "rate_typo")
}
