package store

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine outlives them: the
// touch writer and the usage writer must stop on Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
