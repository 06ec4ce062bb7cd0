package throttle

import (
	"context"
	"embed"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// consumeScript is prelude.lua, the algorithm files and consume.lua joined into
// one script, so any mix of limits is decided in one EVALSHA.
var consumeScript = redis.NewScript(joinLua("prelude.lua", "gcra.lua", "fixed_window.lua",
	"sliding_window_log.lua", "sliding_window_counter.lua", "min_interval.lua",
	"concurrency.lua", "distinct.lua", "pause.lua", "dispatch.lua", "consume.lua"))

// gcraOneScript is the fast path for a call of one GCRA limit on its own key.
var gcraOneScript = redis.NewScript(joinLua("gcra_one.lua"))

// joinLua joins the named files into one script, without their comment
// lines and indentation: an interpreter that compiles a script on every
// call (miniredis, the embedded default) then reads a third of the text.
// Redis compiles a script once per SHA, so it makes no difference there.
// A line `--- @include "name.lua"` (BullMQ's convention) is replaced by
// that file, so a script kept in parts (reserve.lua) names them where
// they run.
func joinLua(names ...string) string {
	var b strings.Builder
	for _, n := range names {
		writeLua(&b, n)
	}
	return b.String()
}

// writeLua appends file name to b as joinLua describes.
func writeLua(b *strings.Builder, name string) {
	src, err := luaFiles.ReadFile("lua/" + name)
	if err != nil {
		panic("throttle: embedded script missing: " + name) // a build defect, not a runtime condition
	}
	for line := range strings.Lines(string(src)) {
		t := strings.TrimSpace(line)
		if part, ok := includeOf(name, t); ok {
			writeLua(b, part)
			continue
		}
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		b.WriteString(t)
		b.WriteByte('\n')
	}
}

// includeOf reads a trimmed line of file name: the part it includes, if it
// is an include line. A comment line that names @include in another form
// panics: it would be dropped as a comment, and the script fail only when
// that part runs.
func includeOf(name, line string) (string, bool) {
	if !strings.HasPrefix(line, "--") || !strings.Contains(line, "@include") {
		return "", false
	}
	part, ok := strings.CutPrefix(line, `--- @include "`)
	if !ok || !strings.HasSuffix(part, `"`) || strings.Count(part, `"`) != 1 {
		panic(fmt.Sprintf(`throttle: %s: malformed include %q: want --- @include "part.lua"`, name, line))
	}
	return strings.TrimSuffix(part, `"`), true
}

// runInts runs s with EVALSHA, as Script.Run does (EVAL's fallback is a
// SCRIPT LOAD and a second EVALSHA), and reads its reply, an array of
// integers, straight into an []int64: Script.Run's reply boxes every value
// in an interface first, an allocation each, and Int64Slice then copies
// them.
func runInts(ctx context.Context, rdb redis.UniversalClient, s *redis.Script, keys []string, args []any) ([]int64, error) {
	cmdArgs := make([]any, 3+len(keys), 3+len(keys)+len(args))
	cmdArgs[0], cmdArgs[1], cmdArgs[2] = "evalsha", s.Hash(), len(keys)
	for i, k := range keys {
		cmdArgs[3+i] = k
	}
	cmdArgs = append(cmdArgs, args...)
	cmd := redis.NewIntSliceCmd(ctx, cmdArgs...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // Cluster routing, as go-redis's own EVALSHA
	}
	err := rdb.Process(ctx, cmd)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		if err = s.Load(ctx, rdb).Err(); err == nil {
			cmd = redis.NewIntSliceCmd(ctx, cmdArgs...)
			if len(keys) > 0 {
				cmd.SetFirstKeyPos(3)
			}
			err = rdb.Process(ctx, cmd)
		}
	}
	if err != nil {
		return nil, err
	}
	return cmd.Val(), nil
}
