package safety_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/safety"
)

func TestOutputMonitor(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		every   int
		atEnd   bool
		tokens  []int // successive token counts fed to Due
		due     []int // those at which a check is due
		enabled bool
	}{
		"off": {tokens: []int{1, 2, 3, 100}},
		"at end only": {
			atEnd: true, tokens: []int{1, 2, 3, 100}, enabled: true,
		},
		"every 3": {
			every: 3, tokens: []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, due: []int{3, 6, 9}, enabled: true,
		},
		"every 3, several tokens a step": {
			every: 3, tokens: []int{2, 7, 8, 9, 20, 21}, due: []int{7, 9, 20, 21}, enabled: true,
		},
		"every 1": {
			every: 1, tokens: []int{0, 1, 2, 3}, due: []int{1, 2, 3}, enabled: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, err := safety.New(safety.Config{URL: "http://127.0.0.1:1", OutputEvery: tc.every, OutputAtEnd: tc.atEnd}, nil)
			require.NoError(t, err)
			m := c.NewOutputMonitor()
			require.Equal(t, tc.enabled, m.Enabled())
			var due []int
			for _, n := range tc.tokens {
				if m.Due(n) {
					due = append(due, n)
				}
			}
			require.Equal(t, tc.due, due)
			require.Equal(t, tc.enabled, m.Final(), "a final check whenever output checks are on")
			require.False(t, m.Final(), "only once")
			require.False(t, m.Due(1000), "nothing after the end")
		})
	}
}
