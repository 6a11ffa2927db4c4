package pipeline

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
)

// passEmbedder is a fake Embedder: each input's vector is [first token,
// length]; it records the inputs of each pass, and the first pass waits
// for release.
type passEmbedder struct {
	mu      sync.Mutex
	passes  [][][]int32
	started chan struct{}
	release chan struct{}
}

func (f *passEmbedder) Embed(_ context.Context, inputs [][]int32) ([][]float32, error) {
	f.mu.Lock()
	f.passes = append(f.passes, inputs)
	first := len(f.passes) == 1
	f.mu.Unlock()
	if first {
		close(f.started)
		<-f.release
	}
	out := make([][]float32, len(inputs))
	for i, in := range inputs {
		out[i] = []float32{float32(in[0]), float32(len(in))}
	}
	return out, nil
}

// TestEmbedBatcherBatches checks that the requests arriving while a pass
// runs are computed together in the next pass, each getting its own
// vectors, within the token budget.
func TestEmbedBatcherBatches(t *testing.T) {
	f := &passEmbedder{started: make(chan struct{}), release: make(chan struct{})}
	b := NewEmbedBatcher(f, 10, 0)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- b.Run(ctx) }()

	results := make([][][]float32, 5)
	var wg sync.WaitGroup
	call := func(i int, inputs [][]int32) {
		defer wg.Done()
		v, err := b.Embed(t.Context(), inputs)
		require.NoError(t, err)
		results[i] = v
	}
	wg.Add(1)
	go call(0, [][]int32{{100}})
	<-f.started
	// Four calls queue while the first pass runs: 3+3 tokens, then 4
	// (budget 10), then 5 alone.
	for i, in := range [][][]int32{{{1, 1, 1}}, {{2}, {2, 2}}, {{3, 3, 3, 3}}, {{4, 4, 4, 4, 4}}} {
		wg.Add(1)
		go call(i+1, in)
		require.Eventually(t, func() bool { return b.waiting.Load() == int64(i+1) }, 5*time.Second, time.Millisecond)
	}
	st := embedReplica{id: "e", ctx: 8, b: b}.Stats()
	require.Equal(t, 4, st.Waiting)
	require.Equal(t, 1, st.Running)
	close(f.release)
	wg.Wait()

	require.Equal(t, [][]float32{{100, 1}}, results[0])
	require.Equal(t, [][]float32{{1, 3}}, results[1])
	require.Equal(t, [][]float32{{2, 1}, {2, 2}}, results[2])
	require.Equal(t, [][]float32{{3, 4}}, results[3])
	require.Equal(t, [][]float32{{4, 5}}, results[4])
	f.mu.Lock()
	require.Len(t, f.passes, 3, "the four waiting calls ran in two passes")
	require.Len(t, f.passes[1], 4, "three calls (7 tokens of a budget of 10) in one pass")
	f.mu.Unlock()
	st = embedReplica{b: b}.Stats()
	require.Equal(t, uint64(3), st.Steps)
	require.Equal(t, uint64(5), st.Completed)
	require.Equal(t, uint64(16), st.ComputedTokens)

	cancel()
	require.NoError(t, <-done)
	_, err := b.Embed(t.Context(), [][]int32{{1}})
	require.ErrorIs(t, err, engine.ErrClosed)
}

func TestEmbedBatcherQueueAndCancel(t *testing.T) {
	f := &passEmbedder{started: make(chan struct{}), release: make(chan struct{})}
	b := NewEmbedBatcher(f, 100, 1)
	// Not running: the queue of one fills.
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := b.Embed(ctx, [][]int32{{1}})
		errc <- err
	}()
	require.Eventually(t, func() bool { return b.waiting.Load() == 1 }, 5*time.Second, time.Millisecond)
	_, err := b.Embed(t.Context(), [][]int32{{2}})
	require.ErrorIs(t, err, engine.ErrQueueFull)
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)

	// The cancelled call is dropped unrun when Run starts.
	runCtx, stop := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- b.Run(runCtx) }()
	close(f.release)
	require.Eventually(t, func() bool { return b.waiting.Load() == 0 }, 5*time.Second, time.Millisecond)
	v, err := b.Embed(t.Context(), [][]int32{{7, 7}})
	require.NoError(t, err)
	require.Equal(t, [][]float32{{7, 2}}, v)
	f.mu.Lock()
	require.Equal(t, [][][]int32{{{7, 7}}}, f.passes)
	f.mu.Unlock()
	stop()
	require.NoError(t, <-done)
}

func TestCutDimensions(t *testing.T) {
	vecs := [][]float32{{0.6, 0.8, 0}, {0, 0, 1}}
	two := 2
	out, err := cutDimensions(vecs, &two)
	require.NoError(t, err)
	require.InDeltaSlice(t, []float32{0.6, 0.8}, out[0], 1e-7)
	require.Equal(t, []float32{0, 0}, out[1], "a zero vector stays zero")
	five := 5
	out, err = cutDimensions([][]float32{{1, 0}}, &five)
	require.NoError(t, err)
	require.Equal(t, [][]float32{{1, 0}}, out)
	one := 1
	_, err = cutDimensions([][]float32{{float32(math.Inf(1)), 0}}, &one)
	require.Error(t, err)
}

func TestTruncateInput(t *testing.T) {
	// [CLS] a b c d [SEP] cut to 4 keeps [SEP].
	require.Equal(t, []int32{101, 1, 2, 102}, truncateInput([]int32{101, 1, 2, 3, 4, 102}, []int32{1, 2, 3, 4}, 4))
	// No special token at the end: a plain cut.
	require.Equal(t, []int32{1, 2}, truncateInput([]int32{1, 2, 3}, []int32{1, 2, 3}, 2))
}
