package workload

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRoutingWorkloads: the routing workloads are valid and what they say:
// 4-turn conversations over 8 shared 1,000-token system prompts, the
// documents one opening each conversation with a 1,000-token message.
func TestRoutingWorkloads(t *testing.T) {
	t.Parallel()
	ws := RoutingWorkloads(5, time.Minute, 1)
	require.Len(t, ws, 3)
	for _, w := range ws {
		items, err := Generate(w.Spec)
		require.NoError(t, err, w.Name)
		require.NotEmpty(t, items)
		systems := map[int]bool{}
		for _, it := range items {
			assert.Equal(t, 4, it.Turns)
			assert.Equal(t, 1000, it.SystemTokens)
			systems[it.System] = true
			switch w.Name {
			case "documents":
				want := 10
				if it.Turn == 0 {
					want = 1000
				}
				assert.Equal(t, want, it.InputTokens, "turn %d", it.Turn)
				assert.Equal(t, 16, it.OutputTokens)
			case "turns-1000":
				assert.Equal(t, 1000, it.InputTokens)
			case "turns-200":
				assert.Equal(t, 200, it.InputTokens)
			}
		}
		assert.Len(t, systems, 8, w.Name)
	}
}

// TestFirstInput: FirstInput sizes only a conversation's first message,
// and a spec without it generates what it did before.
func TestFirstInput(t *testing.T) {
	t.Parallel()
	spec := Spec{Requests: 40, Rate: 10, Input: Uniform(5, 50), Output: Fixed(4), Turns: Fixed(3), Seed: 9}
	plain, err := Generate(spec)
	require.NoError(t, err)
	spec.FirstInput = Fixed(700)
	first, err := Generate(spec)
	require.NoError(t, err)
	require.Len(t, first, len(plain))
	for i, it := range first {
		if it.Turn == 0 {
			assert.Equal(t, 700, it.InputTokens)
		} else {
			assert.LessOrEqual(t, it.InputTokens, 50)
		}
		assert.Equal(t, plain[i].At, it.At, "arrivals do not move")
	}
	spec.FirstInput = Uniform(0, 3)
	require.Error(t, spec.Validate())
}
