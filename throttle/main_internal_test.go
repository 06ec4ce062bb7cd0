package throttle

import (
	"flag"
	"os"
	"strings"
	"testing"
)

// TestMain runs every test of the package (both its own and throttle_test's)
// with the reserve script checking each read its copy of the plan hashes
// answers against Redis (pace.lua, PLAN_CHECK): a write that skipped the
// copy fails the script that reads it, whatever the test asserts.
// Benchmarks (-test.bench) run the scripts as shipped: the check's reads
// would double what they measure.
func TestMain(m *testing.M) {
	const off, on = "local PLAN_CHECK = false\n", "local PLAN_CHECK = true\n"
	flag.Parse()
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		os.Exit(m.Run())
	}
	buildReserveScripts(func(src string) string {
		if !strings.Contains(src, off) {
			panic("throttle: pace.lua's PLAN_CHECK line is gone")
		}
		return strings.Replace(src, off, on, 1)
	})
	os.Exit(m.Run())
}
