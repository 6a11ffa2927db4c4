package sim_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/grammar"
	"github.com/llmd/llmd/engine/sim"
	"github.com/stretchr/testify/require"
)

// A grammar in the shape the JSON Schema compiler produces: an object
// with required and optional properties, nested arrays and enums.
const simTestGrammar = `root ::= "{" sp "\"name\":" sp str "," sp "\"tags\":" sp tags ( "," sp "\"age\":" sp int )? "}"
tags ::= "[" sp str ( "," sp str ){20,40} "]"
str  ::= "\"" [^"\\\x00-\x1F]{0,200} "\""
int  ::= "-"? ( [0-9] | [1-9] [0-9]{0,15} )
sp   ::= " "?`

// Under a grammar the simulator's answers match it, whatever happens to
// their sequences: preemption by swap or by recompute, and n > 1 forks
// (each choice with its own grammar state).
func TestEngineOnSimConstrained(t *testing.T) {
	t.Parallel()
	for name, swap := range map[string]int64{"swap": 64 << 30, "recompute": 0} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := sim.DefaultConfig()
			var err error
			cfg.Model, err = sim.ModelByName("flagship")
			require.NoError(t, err)
			cfg.HostSwapBytes = swap
			cfg.ReserveFraction = 0.158 // a KV cache of about 4,000 tokens
			clock := engine.NewVirtualClock(time.Unix(0, 0))
			exec, err := sim.New(cfg, clock)
			require.NoError(t, err)
			tok := exec.Tokenizer()
			vocab := grammar.NewVocabulary(tok.TokenBytes(), []int32{tok.EOS()})
			bound, err := vocab.Bind(simTestGrammar)
			require.NoError(t, err)
			g := bound.Grammar()

			ecfg := engine.DefaultConfig()
			ecfg.ExpectedOutputTokens = 1 // admit optimistically, so sequences get preempted
			eng, err := engine.New(exec, clock, ecfg, nil)
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- eng.Run(ctx) }()
			defer func() {
				cancel()
				require.NoError(t, <-done)
			}()

			const requests, promptTokens = 40, 600
			var wg sync.WaitGroup
			for i := range requests {
				wg.Go(func() {
					prompt := tok.Encode(fmt.Sprintf("Request %d wants JSON about the river.", i))
					for len(prompt) < promptTokens {
						prompt = append(prompt, prompt...)
					}
					n := 1 + i%3
					st, err := eng.Submit(t.Context(), engine.Request{
						ID: fmt.Sprint(i), Tenant: "t", Prompt: prompt[:promptTokens], MaxTokens: 2000,
						N: n, Seed: uint64(7 + i), Constraint: bound.Matcher().Constraint(),
						// Not the batch class: on a virtual clock, which stands
						// still while the engine idles, the ladder would keep it
						// paused once its queue wait grew.
						Priority: engine.PriorityPaid,
					})
					if err != nil {
						t.Error(err)
						return
					}
					outs := make([][]int32, n)
					finish := make([]engine.FinishReason, n)
					for {
						ev, err := st.Next(t.Context())
						if errors.Is(err, io.EOF) {
							break
						}
						if err != nil {
							t.Error(err)
							return
						}
						switch {
						case ev.Kind == engine.EventToken:
							outs[ev.Index] = append(outs[ev.Index], ev.Token)
						case ev.Kind == engine.EventFinish && ev.Index >= 0:
							finish[ev.Index] = ev.Finish
							if ev.Err != nil {
								t.Errorf("request %d choice %d: %v", i, ev.Index, ev.Err)
							}
						}
					}
					for c := range n {
						text := tok.Decode(outs[c])
						if finish[c] != engine.FinishStop || !g.Match(text) {
							t.Errorf("request %d choice %d: finish %s, text %q does not match", i, c, finish[c], text)
						}
					}
				})
			}
			waited := make(chan struct{})
			go func() { wg.Wait(); close(waited) }()
			select {
			case <-waited:
			case <-time.After(60 * time.Second):
				stats := eng.Stats()
				cancel() // ends every stream, so that no goroutine outlives the test
				<-waited
				t.Fatalf("stuck: %+v", stats)
			}
			t.Logf("KV blocks %d, preemptions %d", exec.Info().NumBlocks, eng.Stats().Preemptions)
			require.Positive(t, eng.Stats().Preemptions, "memory is tight enough to preempt")
		})
	}
}
