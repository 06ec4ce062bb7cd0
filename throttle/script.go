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
	"concurrency.lua", "distinct.lua", "consume.lua"))

// gcraOneScript is the fast path for a call of one GCRA limit on its own key.
var gcraOneScript = redis.NewScript(joinLua("gcra_one.lua"))

func joinLua(names ...string) string {
	var b strings.Builder
	for _, n := range names {
		src, err := luaFiles.ReadFile("lua/" + n)
		if err != nil {
			panic("throttle: embedded script missing: " + n) // a build defect, not a runtime condition
		}
		b.Write(src)
		b.WriteByte('\n')
	}
	return b.String()
}
