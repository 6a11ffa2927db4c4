package store

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine outlives them: the
// touch writer must stop on Close, and the usage writer when Run returns.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
