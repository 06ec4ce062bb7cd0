package tasks

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves goroutines behind (the asynq
// server and miniredis start some).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
