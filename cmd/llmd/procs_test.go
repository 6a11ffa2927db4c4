package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestProcsFor(t *testing.T) {
	tests := map[string]struct {
		threads, cpus, procs, want int
	}{
		"default threads on every core": {threads: 0, cpus: 2, procs: 2, want: 3},
		"as many threads as cores":      {threads: 2, cpus: 2, procs: 2, want: 3},
		"more threads than cores":       {threads: 4, cpus: 2, procs: 2, want: 5},
		"fewer threads leave a P":       {threads: 1, cpus: 4, procs: 4, want: 4},
		"already raised":                {threads: 2, cpus: 2, procs: 3, want: 3},
		"raised further by the user":    {threads: 2, cpus: 2, procs: 8, want: 8},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, procsFor(tc.threads, tc.cpus, tc.procs))
		})
	}
}
