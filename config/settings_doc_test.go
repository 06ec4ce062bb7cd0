package config

import (
	"bytes"
	"flag"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the channel settings part of sluice.example.yaml")

// TestExampleChannelSettings checks that the channel settings part of
// sluice.example.yaml is what the settings table renders. Run with -update
// to rewrite it.
func TestExampleChannelSettings(t *testing.T) {
	const path = "../sluice.example.yaml"
	const hint = "run: go test ./config -run TestExampleChannelSettings -update"
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	begin := bytes.Index(data, []byte(settingsBegin))
	end := bytes.Index(data, []byte(settingsEnd))
	require.True(t, begin >= 0 && end > begin, "%s has no %q ... %q block", path, settingsBegin, settingsEnd)
	end += len(settingsEnd)
	want := settingsComment()
	if *update {
		out := append(append(append([]byte{}, data[:begin]...), want...), data[end:]...)
		require.NoError(t, os.WriteFile(path, out, 0o644))
		return
	}
	require.Equal(t, want, string(data[begin:end]), "%s is stale; %s", path, hint)
}
