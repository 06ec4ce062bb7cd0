package throttle

import (
	"embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// consumeScript is prelude.lua, the algorithm files and consume.lua joined into
// one script, so any mix of limits is decided in one EVALSHA.
var consumeScript = redis.NewScript(joinLua("prelude.lua", "gcra.lua", "fixed_window.lua",
	"sliding_window_log.lua", "sliding_window_counter.lua", "min_interval.lua",
	"concurrency.lua", "distinct.lua", "dispatch.lua", "consume.lua"))

// gcraOneScript is the fast path for a call of one GCRA limit on its own key.
var gcraOneScript = redis.NewScript(joinLua("gcra_one.lua"))

// joinLua joins the named files into one script, without their comment
// lines and indentation: an interpreter that compiles a script on every
// call (miniredis, the embedded default) then reads a third of the text.
// Redis compiles a script once per SHA, so it makes no difference there.
func joinLua(names ...string) string {
	var b strings.Builder
	for _, n := range names {
		src, err := luaFiles.ReadFile("lua/" + n)
		if err != nil {
			panic("throttle: embedded script missing: " + n) // a build defect, not a runtime condition
		}
		for line := range strings.Lines(string(src)) {
			t := strings.TrimSpace(line)
			if t == "" || strings.HasPrefix(t, "--") {
				continue
			}
			b.WriteString(t)
			b.WriteByte('\n')
		}
	}
	return b.String()
}
