package throttle

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Every script joins whole: no include line is left in it, and each part
// it names is there (writeLua panics on a missing file).
func TestJoinedScriptsHaveNoIncludeLeft(t *testing.T) {
	entries, err := luaFiles.ReadDir("lua")
	require.NoError(t, err)
	for _, e := range entries {
		s := joinLua(e.Name())
		require.NotContains(t, s, "@include", e.Name())
	}
	require.Contains(t, joinLua("reserve.lua"), "local function plan_one", "reserve.lua takes in its parts")
}

// A misspelt include is refused, not dropped as a comment.
func TestMalformedIncludePanics(t *testing.T) {
	part, ok := includeOf("r.lua", `--- @include "pace.lua"`)
	require.True(t, ok)
	require.Equal(t, "pace.lua", part)
	_, ok = includeOf("r.lua", "-- the plan book")
	require.False(t, ok)
	for _, line := range []string{`---@include "pace.lua"`, `--- @include 'pace.lua'`, `--- @include "pace.lua`, `-- @include "pace.lua"`} {
		require.Panics(t, func() { includeOf("r.lua", line) }, line)
	}
}
