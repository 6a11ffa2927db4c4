package main

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// No test may read or write the user's saved keys: they go to a
	// directory of their own (tests that check saving set their own).
	dir, err := os.MkdirTemp("", "llmctl-config-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv(configDirEnv, dir)
	os.Unsetenv("LLMD_API_KEY")
	os.Unsetenv("LLMD_ADDR")
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}
