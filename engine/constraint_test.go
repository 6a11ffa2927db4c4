package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// maskExec is fakeExec with a vocabulary of 1001 tokens and EOS 0 that
// honours token masks: its natural token is EOS at output index 2 and
// fakeToken elsewhere; where the mask refuses it, the lowest allowed token.
type maskExec struct {
	*fakeExec
	masks int // sampled rows that carried a mask
}

func newMaskExec() *maskExec {
	f := newFakeExec(64, 16, 4096)
	f.info.VocabSize = 1001
	return &maskExec{fakeExec: f}
}

func (m *maskExec) Forward(ctx context.Context, b *Batch) (*Output, error) {
	out, err := m.fakeExec.Forward(ctx, b)
	if err != nil {
		return nil, err
	}
	for i, s := range b.Seqs {
		if !s.Sample {
			continue
		}
		if s.Generated == 2 {
			out.Tokens[i] = 0
		}
		if s.Mask == nil {
			continue
		}
		m.mu.Lock()
		m.masks++
		m.mu.Unlock()
		if t := out.Tokens[i]; s.Mask[t>>6]&(1<<(t&63)) == 0 {
			out.Tokens[i] = lowestAllowed(s.Mask)
		}
	}
	return out, nil
}

func lowestAllowed(mask []uint64) int32 {
	for w, word := range mask {
		for b := range 64 {
			if word&(1<<b) != 0 {
				return int32(w*64 + b)
			}
		}
	}
	return 0 // nothing allowed: EOS, which the engine must refuse
}

// setConstraint allows a fixed set of tokens and is Done after limit of
// them (EOS allowed from then on, as a grammar that may end).
type setConstraint struct {
	allowed []int32
	n       *int // shared counter of Accept calls across clones, to catch sharing
	count   int
	limit   int
}

func (c *setConstraint) Allowed(mask []uint64) {
	clear(mask)
	if c.count >= c.limit {
		mask[0] |= 1
		return
	}
	for _, t := range c.allowed {
		mask[t>>6] |= 1 << (t & 63)
	}
}

func (c *setConstraint) Accept(tok int32) error {
	*c.n++
	for _, t := range c.allowed {
		if t == tok && c.count < c.limit {
			c.count++
			return nil
		}
	}
	if tok == 0 && c.count >= c.limit {
		return nil
	}
	return errors.New("not allowed")
}

func (c *setConstraint) Done() bool { return c.count >= c.limit }

func (c *setConstraint) Clone() Constraint { d := *c; return &d }

func TestEngineSamplingControls(t *testing.T) {
	tests := map[string]struct {
		req       Request
		wantLen   int
		finish    FinishReason
		wantToken func(i int, tok int32) bool
		masks     bool
	}{
		"min tokens suppress EOS": {
			req:     Request{MaxTokens: 8, MinTokens: 5},
			wantLen: 8, finish: FinishLength, masks: true,
			wantToken: func(_ int, tok int32) bool { return tok != 0 },
		},
		"EOS ends without min tokens": {
			req:     Request{MaxTokens: 8},
			wantLen: 2, finish: FinishStop,
		},
		"ignore EOS delivers it and goes on": {
			req:     Request{MaxTokens: 6, IgnoreEOS: true},
			wantLen: 6, finish: FinishLength,
			wantToken: func(i int, tok int32) bool { return (i == 2) == (tok == 0) },
		},
		"stop token ends the choice unsent": {
			req:     Request{MaxTokens: 8, StopTokens: []int32{fakeToken(3, 1)}},
			wantLen: 1, finish: FinishStop,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			exec := newMaskExec()
			e := startEngine(t, exec, DefaultConfig())
			req := tc.req
			req.ID, req.Prompt, req.N, req.Seed = "r", prompt(20, 0), 1, 3
			st, err := e.Submit(t.Context(), req)
			require.NoError(t, err)
			toks, fin, _, err := Collect(t.Context(), st)
			require.NoError(t, err)
			require.Len(t, toks[0], tc.wantLen)
			require.Equal(t, tc.finish, fin[0])
			for i, tok := range toks[0] {
				if tc.wantToken != nil {
					require.True(t, tc.wantToken(i, tok), "token %d: %d", i, tok)
				}
			}
			require.Equal(t, tc.masks, exec.masks > 0)
		})
	}
}

func TestEngineConstraint(t *testing.T) {
	exec := newMaskExec()
	e := startEngine(t, exec, DefaultConfig())
	var accepts int
	c := &setConstraint{allowed: []int32{700, 900}, n: &accepts, limit: 4}
	st, err := e.Submit(t.Context(), Request{ID: "c", Prompt: prompt(40, 0), MaxTokens: 10, N: 3, Seed: 1, Constraint: c})
	require.NoError(t, err)
	toks, fin, _, err := Collect(t.Context(), st)
	require.NoError(t, err)
	for ch := range 3 {
		require.Equal(t, FinishStop, fin[ch], "choice %d ends when its constraint is done", ch)
		require.Equal(t, []int32{700, 700, 700, 700}, toks[ch], "choice %d", ch)
	}
	require.Equal(t, 12, accepts, "each choice advanced its own copy")

	empty := &setConstraint{n: new(int), limit: 1}
	st, err = e.Submit(t.Context(), Request{ID: "e", Prompt: prompt(8, 100), MaxTokens: 10, N: 1, Constraint: empty})
	require.NoError(t, err)
	ev := lastFinish(t, st)
	require.Equal(t, FinishError, ev.Finish)
	require.ErrorContains(t, ev.Err, "allows no token")
}

func lastFinish(t *testing.T, st *Stream) Event {
	t.Helper()
	var fin Event
	for {
		ev, err := st.Next(t.Context())
		if err != nil {
			return fin
		}
		if ev.Kind == EventFinish && ev.Index >= 0 {
			fin = ev
		}
	}
}

func TestEngineRefusesBadControls(t *testing.T) {
	e := startEngine(t, newFakeExec(64, 16, 4096), DefaultConfig())
	var ire *InvalidRequestError
	_, err := e.Submit(t.Context(), Request{ID: "a", Prompt: prompt(4, 0), MaxTokens: 4, MinTokens: 5, N: 1})
	require.ErrorAs(t, err, &ire)
	_, err = e.Submit(t.Context(), Request{ID: "b", Prompt: prompt(4, 0), MaxTokens: 4, MinTokens: 1, N: 1})
	require.ErrorAs(t, err, &ire, "no vocabulary size, no masks")
	require.ErrorContains(t, err, "token masks")
}
