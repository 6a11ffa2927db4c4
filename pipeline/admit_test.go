package pipeline

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReservation: a request that gives max_tokens reserves it (as before);
// one that does not reserves an estimate, not the room left in the
// context, while the most it may use stays the room.
func TestReservation(t *testing.T) {
	t.Parallel()
	const noHistory = math.MaxInt
	tests := map[string]struct {
		prompt, maxTokens, n int
		estimate, given      bool
		learned              int
		wantTokens, wantMost int64
	}{
		"given":                          {prompt: 20, maxTokens: 100, n: 1, given: true, learned: noHistory, wantTokens: 120, wantMost: 120},
		"given, history ignored":         {prompt: 20, maxTokens: 100, n: 1, given: true, learned: 10, wantTokens: 120, wantMost: 120},
		"given, n=2":                     {prompt: 20, maxTokens: 100, n: 2, given: true, learned: noHistory, wantTokens: 220, wantMost: 220},
		"unset, no history":              {prompt: 20, maxTokens: 32748, n: 1, learned: noHistory, wantTokens: 20 + DefaultOutputEstimate, wantMost: 32768},
		"unset, small room":              {prompt: 20, maxTokens: 50, n: 1, learned: noHistory, wantTokens: 70, wantMost: 70},
		"unset, history":                 {prompt: 20, maxTokens: 32748, n: 1, learned: 40, wantTokens: 60, wantMost: 32768},
		"unset, n=3":                     {prompt: 10, maxTokens: 1000, n: 3, learned: noHistory, wantTokens: 10 + 3*DefaultOutputEstimate, wantMost: 3010},
		"--quota-estimate, given":        {prompt: 20, maxTokens: 100, n: 1, estimate: true, given: true, learned: 30, wantTokens: 50, wantMost: 120},
		"--quota-estimate, no history":   {prompt: 20, maxTokens: 100, n: 1, estimate: true, given: true, learned: noHistory, wantTokens: 120, wantMost: 120},
		"--quota-estimate, unset, fresh": {prompt: 20, maxTokens: 4000, n: 1, estimate: true, learned: noHistory, wantTokens: 20 + DefaultOutputEstimate, wantMost: 4020},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tokens, most := reservation(tc.prompt, tc.maxTokens, tc.n, tc.estimate, tc.given, tc.learned)
			require.Equal(t, tc.wantTokens, tokens, "reserved")
			require.Equal(t, tc.wantMost, most, "most")
			require.LessOrEqual(t, tokens, most)
		})
	}
}

// TestReservationWithoutAnswer: a request with no answer (embeddings)
// reserves its input alone, and never more than it may use.
func TestReservationWithoutAnswer(t *testing.T) {
	tokens, most := reservation(9, 0, 1, false, false, math.MaxInt)
	if tokens != 9 || most != 9 {
		t.Fatalf("reservation(9 prompt tokens, no answer) = %d, %d; want 9, 9", tokens, most)
	}
}
