//go:build !linux

package e2e

import "testing"

// emulatorNice is the nice value favorEmulator gives the test process on
// Linux.
const emulatorNice = -10

// favorEmulator raises the test process's priority on Linux only.
func favorEmulator(t *testing.T) bool {
	t.Helper()
	t.Log("emulator priority: unchanged (Linux only)")
	return false
}

// forkAtNormalPriority does nothing off Linux.
func forkAtNormalPriority(*testing.T) {}

// processNice is 0 off Linux.
func processNice(int) int { return 0 }
