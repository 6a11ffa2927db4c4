package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeExec is a deterministic test executor: the token a sequence samples
// depends only on its seed and output index, like the sim executor, so a
// preempted and recomputed sequence must produce the same tokens.
type fakeExec struct {
	info  ExecutorInfo
	clock Clock
	step  time.Duration

	mu      sync.Mutex
	failAt  map[uint64]bool // step numbers (from 1) that fail
	steps   uint64
	maxSeqs int
}

func newFakeExec(blocks, blockSize, ctxLen int) *fakeExec {
	return &fakeExec{
		info:   ExecutorInfo{Model: "fake", NumBlocks: blocks, BlockSize: blockSize, ContextLength: ctxLen, EOS: []int32{0}},
		clock:  NewVirtualClock(time.Unix(0, 0)),
		step:   time.Millisecond,
		failAt: map[uint64]bool{},
	}
}

func (f *fakeExec) Info() ExecutorInfo { return f.info }

func (f *fakeExec) Forward(ctx context.Context, b *Batch) (*Output, error) {
	f.mu.Lock()
	f.steps++
	fail := f.failAt[f.steps]
	f.maxSeqs = max(f.maxSeqs, len(b.Seqs))
	f.mu.Unlock()
	if err := f.clock.Sleep(ctx, f.step); err != nil {
		return nil, err
	}
	if fail {
		return nil, errors.New("fake: device lost")
	}
	out := &Output{Tokens: make([]int32, len(b.Seqs)), Duration: f.step}
	for i, s := range b.Seqs {
		out.Tokens[i] = -1
		if s.Sample {
			out.Tokens[i] = fakeToken(s.Seed, s.Generated)
		}
	}
	return out, nil
}

func fakeToken(seed uint64, i int) int32 {
	x := seed*0x9E3779B97F4A7C15 + uint64(i)*0xBF58476D1CE4E5B9
	x ^= x >> 31
	return int32(1 + x%1000)
}

// startEngine runs an engine on exec until the test ends, then checks the
// idle invariant.
func startEngine(t *testing.T, exec Executor, cfg Config) *Engine {
	t.Helper()
	e, run := newEngine(t, exec, cfg)
	run()
	return e
}

// newEngine returns an engine and a function that starts its loop, so a
// test can queue requests first.
func newEngine(t *testing.T, exec Executor, cfg Config) (*Engine, func()) {
	t.Helper()
	e, err := New(exec, RealClock{}, cfg, nil)
	require.NoError(t, err)
	return e, func() { runEngine(t, e) }
}

func runEngine(t *testing.T, e *Engine) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		requireIdle(t, e)
		cancel()
		require.NoError(t, <-done)
	})
}

// requireIdle checks the idle invariant: nothing running or waiting and
// every block free or cached.
func requireIdle(t *testing.T, e *Engine) {
	t.Helper()
	require.Eventually(t, func() bool {
		s := e.Stats()
		return s.Running == 0 && s.Waiting == 0 && s.BlocksUsed == 0
	}, 5*time.Second, time.Millisecond, "engine not idle: %+v", e.Stats())
}

func prompt(n, offset int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(offset + i + 1)
	}
	return p
}

func TestEngineCompletesConcurrentRequests(t *testing.T) {
	e := startEngine(t, newFakeExec(64, 16, 4096), DefaultConfig())
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			st, err := e.Submit(t.Context(), Request{ID: fmt.Sprint("r", i), Prompt: prompt(30+i, i*100), MaxTokens: 5 + i, N: 1, Seed: uint64(i)})
			require.NoError(t, err)
			toks, fin, usage, err := Collect(t.Context(), st)
			require.NoError(t, err)
			require.Len(t, toks[0], 5+i)
			require.Equal(t, FinishLength, fin[0])
			require.Equal(t, Usage{InputTokens: 30 + i, OutputTokens: 5 + i}, usage)
			for j, tok := range toks[0] {
				require.Equal(t, fakeToken(uint64(i), j), tok)
			}
		})
	}
	wg.Wait()
}

// swapExec adds a cost model to fakeExec so the engine swaps long victims.
type swapExec struct{ *fakeExec }

func (swapExec) SwapTime(blocks int) time.Duration { return time.Duration(blocks) * time.Microsecond }
func (swapExec) PrefillTime(tokens int) time.Duration {
	return time.Duration(tokens) * time.Millisecond
}

// TestEngineOverAdmission is EN-4: four times more sequences than the KV
// blocks can hold, admitted optimistically. Every request completes through
// preemption (by recompute, or by swap when the executor offers it), with
// the same tokens as an unpreempted run.
func TestEngineOverAdmission(t *testing.T) {
	for name, swap := range map[string]bool{"recompute": false, "swap": true} {
		t.Run(name, func(t *testing.T) {
			const seqs, promptLen, maxTok = 32, 40, 40
			// Each sequence needs 5 blocks of 16; 40 blocks hold 8 of them.
			fe := newFakeExec(40, 16, 4096)
			var exec Executor = fe
			if swap {
				fe.info.SwapBlocks = 64
				exec = swapExec{fe}
			}
			cfg := DefaultConfig()
			cfg.ExpectedOutputTokens = 1 // admit on the prompt alone
			e, run := newEngine(t, exec, cfg)
			// Queue everything before the loop starts, so all requests
			// compete for the blocks at once.
			streams := make([]*Stream, seqs)
			for i := range seqs {
				var err error
				streams[i], err = e.Submit(t.Context(), Request{ID: fmt.Sprint("r", i), Priority: PriorityBatch,
					Prompt: prompt(promptLen, i*1000), MaxTokens: maxTok, N: 1, Seed: uint64(i)})
				require.NoError(t, err)
			}
			run()
			var wg sync.WaitGroup
			for i, st := range streams {
				wg.Go(func() {
					toks, fin, usage, err := Collect(t.Context(), st)
					require.NoError(t, err)
					require.Equal(t, FinishLength, fin[0])
					require.Equal(t, maxTok, usage.OutputTokens)
					for j, tok := range toks[0] {
						require.Equal(t, fakeToken(uint64(i), j), tok, "request %d token %d", i, j)
					}
				})
			}
			wg.Wait()
			st := e.Stats()
			require.Positive(t, st.Preemptions)
			if swap {
				require.Positive(t, st.PreemptionsSwap)
			} else {
				require.Zero(t, st.PreemptionsSwap)
			}
			require.Eventually(t, func() bool { return e.Stats().SwapBlocksUsed == 0 }, 5*time.Second, time.Millisecond)
		})
	}
}

func TestEngineCancelFreesBlocks(t *testing.T) {
	exec := newFakeExec(64, 16, 1<<20)
	exec.clock = RealClock{}
	e := startEngine(t, exec, DefaultConfig())
	ctx, cancel := context.WithCancel(t.Context())
	st, err := e.Submit(ctx, Request{ID: "long", Prompt: prompt(100, 0), MaxTokens: 900, N: 1})
	require.NoError(t, err)
	ev, err := st.Next(t.Context())
	require.NoError(t, err)
	require.Equal(t, EventToken, ev.Kind)
	require.Eventually(t, func() bool { return e.Stats().BlocksUsed > 0 }, 5*time.Second, time.Millisecond, "stats are published after the step that produced the first token")
	cancel()
	_, fin, usage, err := Collect(t.Context(), st)
	require.NoError(t, err)
	require.Equal(t, FinishCancelled, fin[0])
	require.Positive(t, usage.OutputTokens)
	requireIdle(t, e)
}

func TestEngineExecutorErrorFailsBatchAndContinues(t *testing.T) {
	exec := newFakeExec(64, 16, 4096)
	exec.failAt[1] = true
	e := startEngine(t, exec, DefaultConfig())
	st, err := e.Submit(t.Context(), Request{ID: "a", Prompt: prompt(10, 0), MaxTokens: 3, N: 1})
	require.NoError(t, err)
	_, fin, _, err := Collect(t.Context(), st)
	require.Error(t, err)
	require.Equal(t, FinishError, fin[0])

	st, err = e.Submit(t.Context(), Request{ID: "b", Prompt: prompt(10, 0), MaxTokens: 3, N: 1})
	require.NoError(t, err)
	toks, _, _, err := Collect(t.Context(), st)
	require.NoError(t, err)
	require.Len(t, toks[0], 3)
}

func TestEngineNChoicesShareThePrompt(t *testing.T) {
	e := startEngine(t, newFakeExec(64, 16, 4096), DefaultConfig())
	st, err := e.Submit(t.Context(), Request{ID: "n", Prompt: prompt(40, 0), MaxTokens: 6, N: 3, Seed: 7})
	require.NoError(t, err)
	toks, fin, usage, err := Collect(t.Context(), st)
	require.NoError(t, err)
	require.Len(t, toks, 3)
	for c := range 3 {
		require.Equal(t, FinishLength, fin[c])
		require.Len(t, toks[c], 6)
		require.Equal(t, fakeToken(7+uint64(c), 0), toks[c][0])
	}
	require.Equal(t, Usage{InputTokens: 40, OutputTokens: 18}, usage)
}

func TestEngineSubmitErrors(t *testing.T) {
	e := startEngine(t, newFakeExec(8, 16, 100), DefaultConfig())
	_, err := e.Submit(t.Context(), Request{ID: "x", Prompt: prompt(90, 0), MaxTokens: 20, N: 1})
	var cle *ContextLengthError
	require.ErrorAs(t, err, &cle)
	require.Equal(t, 100, cle.Limit)
	_, err = e.Submit(t.Context(), Request{ID: "y", MaxTokens: 1, N: 1})
	var ire *InvalidRequestError
	require.ErrorAs(t, err, &ire)
}

func TestEngineStopCancelsLiveRequests(t *testing.T) {
	exec := newFakeExec(64, 16, 1<<20)
	exec.clock = RealClock{}
	e, err := New(exec, RealClock{}, DefaultConfig(), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.Run(ctx) }()
	st, err := e.Submit(t.Context(), Request{ID: "a", Prompt: prompt(10, 0), MaxTokens: 900, N: 1})
	require.NoError(t, err)
	_, err = st.Next(t.Context())
	require.NoError(t, err)
	cancel()
	require.NoError(t, <-done)
	_, fin, _, err := Collect(t.Context(), st)
	require.NoError(t, err)
	require.Equal(t, FinishCancelled, fin[0])
	_, err = e.Submit(t.Context(), Request{ID: "b", Prompt: prompt(10, 0), MaxTokens: 1, N: 1})
	require.ErrorIs(t, err, ErrClosed)
	require.Zero(t, e.Stats().BlocksUsed)
}

func TestEngineRefusesLogprobsWithoutSupport(t *testing.T) {
	e := startEngine(t, newFakeExec(8, 16, 100), DefaultConfig())
	_, err := e.Submit(t.Context(), Request{ID: "x", Prompt: prompt(4, 0), MaxTokens: 2, N: 1, Logprobs: true})
	var ire *InvalidRequestError
	require.ErrorAs(t, err, &ire)
}
