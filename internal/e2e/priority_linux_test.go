package e2e

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// emulatorNice is the nice value favorEmulator gives the test process.
const emulatorNice = -10

// favorEmulator raises the scheduling priority of every thread of the
// test process, where the emulators run (threads made later inherit it),
// so that on a host the workers and Redis saturate, the emulator reads a
// request's arrival when it arrives: a provider runs on machines of its
// own, and its clock does not wait for ours. Logged by send on the 2-core
// host, the strict emulator read arrivals up to 24ms after the request
// was written, and counted an 81st send in a second the sends had not
// made. It needs CAP_SYS_NICE (root); without it the run goes on as
// before, and says so. It reports whether every thread was raised.
func favorEmulator(t *testing.T) bool {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Logf("emulator priority: %v; unchanged", err)
		return false
	}
	for _, e := range tasks {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, emulatorNice); err != nil {
			t.Logf("emulator priority: nice %d for thread %d: %v; unchanged (run as root to give the emulator the priority a provider's own machines have)", emulatorNice, tid, err)
			return false
		}
	}
	return true
}

// forkAtNormalPriority keeps the calling goroutine on its own thread from
// now on (until it exits, which ends the thread) at nice 0: the processes
// it starts (redis-server, the workers, the CLI) are forked from that
// thread and take its nice value, not the emulator's.
func forkAtNormalPriority(t *testing.T) {
	t.Helper()
	runtime.LockOSThread()
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), 0); err != nil {
		t.Logf("emulator priority: nice 0 for the thread that starts processes: %v", err)
	}
}

// processNice is the nice value of process pid's main thread, from
// /proc/<pid>/stat (field 19); 0 when it cannot be read.
func processNice(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 17 {
		return 0
	}
	n, _ := strconv.Atoi(f[16]) // fields after the command: state is field 3, nice 19
	return n
}
