package cpu

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/synth"
)

// TestEngineLogprobs: a request that asks for logprobs gets, on every token
// event, the sampled token's log-probability and its top alternatives; with
// greedy decoding the sampled token is the most likely one.
func TestEngineLogprobs(t *testing.T) {
	f := openModel(t, synth.Model{Arch: "llama", Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, FFN: 64, Vocab: 300,
		Type: gguf.TypeF16, Seed: 3}, nil)
	exec := newExec(t, f, Config{Threads: 1, KVBlocks: 16, BlockSize: 16})
	require.True(t, exec.Info().Logprobs)
	eng, err := engine.New(exec, engine.RealClock{}, engine.DefaultConfig(), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- eng.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()

	st, err := eng.Submit(t.Context(), engine.Request{ID: "a", Prompt: randomTokens(1, 12, 300), MaxTokens: 6, N: 1,
		Logprobs: true, TopLogprobs: 3})
	require.NoError(t, err)
	events := 0
	for {
		ev, err := st.Next(t.Context())
		if err != nil {
			break
		}
		if ev.Kind != engine.EventToken {
			continue
		}
		events++
		lp := ev.Logprobs
		require.NotNil(t, lp)
		require.LessOrEqual(t, lp.Logprob, float32(0))
		require.Len(t, lp.Top, 3)
		require.Equal(t, ev.Token, lp.Top[0].Token, "greedy picks the most likely token")
		require.InDelta(t, lp.Top[0].Logprob, lp.Logprob, 1e-6)
		require.GreaterOrEqual(t, lp.Top[0].Logprob, lp.Top[1].Logprob)
		require.GreaterOrEqual(t, lp.Top[1].Logprob, lp.Top[2].Logprob)
	}
	require.Positive(t, events)

	// A request without logprobs gets none.
	st, err = eng.Submit(t.Context(), engine.Request{ID: "b", Prompt: randomTokens(2, 12, 300), MaxTokens: 2, N: 1})
	require.NoError(t, err)
	ev, err := st.Next(t.Context())
	require.NoError(t, err)
	require.Nil(t, ev.Logprobs)
	_, _, _, err = engine.Collect(t.Context(), st)
	require.NoError(t, err)
}
