package engine

import (
	"context"
	"time"
)

// Executor runs the model. It is the engine's plug-in point: engine/sim
// implements it with a roofline cost model, engine/cpu with a real
// transformer forward pass.
//
// Locking: the engine calls an Executor from its step goroutine only, one
// call at a time.
type Executor interface {
	// Info describes the model and the KV capacity the executor provides.
	// It is called once, before the first Forward.
	Info() ExecutorInfo
	// Forward applies the batch's block operations, then runs one fused
	// step over every sequence in b. It returns one sampled token per
	// sequence whose SeqInput.Sample is set, after verifying the draft
	// tokens of a sequence with SeqInput.Draft > 0 (Output.Accepted). An
	// error fails every sequence in the batch; the engine frees their
	// blocks and carries on.
	Forward(ctx context.Context, b *Batch) (*Output, error)
}

// ExecutorInfo is what the engine needs to know about an executor.
type ExecutorInfo struct {
	// Model is the model id served, e.g. "sim/small".
	Model string
	// NumBlocks is the number of KV blocks the executor holds memory for.
	NumBlocks int
	// BlockSize is the number of tokens per KV block.
	BlockSize int
	// ContextLength is the most tokens (prompt plus output) one sequence may hold.
	ContextLength int
	// EOS lists the token ids that end a generation.
	EOS []int32
	// SwapBlocks is the host swap space, in blocks, that the executor can
	// copy preempted sequences' blocks to. Zero disables swapping.
	SwapBlocks int
	// Logprobs reports that the executor computes log-probabilities of the
	// tokens it samples (SeqInput.Logprobs).
	Logprobs bool
	// VocabSize is the number of token ids the executor samples from; a
	// token mask (SeqInput.Mask) has one bit per id.
	VocabSize int
}

// Constraint restricts the tokens a sequence may sample: structured output
// (a grammar matcher, engine/grammar) or anything else that can say, at each
// step, which tokens may come next.
//
// Locking: the engine calls a Constraint from its step goroutine only.
type Constraint interface {
	// Allowed writes into mask (one bit per token id, token t at bit t%64
	// of word t/64; MaskWords words) the tokens allowed next. The
	// end-of-generation tokens are allowed only where the constraint may
	// end.
	Allowed(mask []uint64)
	// Accept advances the constraint over the sampled token; an error
	// means the token was not allowed.
	Accept(tok int32) error
	// Done reports that nothing but the end may follow.
	Done() bool
	// Clone returns an independent copy in the same state.
	Clone() Constraint
}

// MaskWords is the length of a token mask over a vocabulary of n tokens.
func MaskWords(n int) int { return (n + 63) / 64 }

// CostModel is an optional Executor ability: estimates the scheduler uses to
// choose, per preempted sequence, between swapping its blocks to host
// memory and recomputing them later. Without it the engine always
// recomputes.
type CostModel interface {
	// SwapTime estimates copying n blocks one way over the host link.
	SwapTime(blocks int) time.Duration
	// PrefillTime estimates the compute time of prefilling n tokens.
	PrefillTime(tokens int) time.Duration
}

// Batch is one step's work. It is plain data; the executor must not keep it
// after Forward returns.
type Batch struct {
	// Seqs are the sequences in this step, in no particular order.
	Seqs []SeqInput
	// The block operations run before the step, in this order: SwapOut
	// copies device blocks to host swap slots (a block swapped out may be
	// reused later in the same batch), SwapIn copies host slots back to
	// device blocks, and Copies copies device blocks (copy-on-write).
	SwapOut []BlockSwap
	SwapIn  []BlockSwap
	Copies  []BlockCopy
}

// NumTokens is the number of tokens processed in the batch.
func (b *Batch) NumTokens() int {
	n := 0
	for i := range b.Seqs {
		n += len(b.Seqs[i].Tokens)
	}
	return n
}

// SeqInput is one sequence's share of a step: a prefill chunk or one decode
// token.
type SeqInput struct {
	// SeqID identifies the sequence for the life of the request.
	SeqID uint64
	// Tokens are the token ids to process this step; never empty.
	Tokens []int32
	// Pos is the position of Tokens[0]; Tokens[i] sits at Pos+i.
	Pos int
	// Context is the number of tokens whose KV the sequence holds after this
	// step (Pos + len(Tokens)).
	Context int
	// Blocks is the sequence's block table: physical block ids covering
	// positions [0, Context). The caller owns the slice.
	Blocks []int32
	// Sample is set when the step must produce the sequence's next token
	// (a decode step, or the last chunk of a prefill).
	Sample bool
	// Generated is the number of tokens generated so far, not counting the
	// one this step may produce.
	Generated int
	// History is every token of the sequence so far: the prompt, then the
	// Generated outputs (its last Generated entries), for repetition
	// penalties. The caller owns it; read only.
	History []int32
	// Seed seeds sampling; the same seed and inputs give the same tokens.
	Seed uint64
	// Sampling holds the sampling parameters.
	Sampling SamplingParams
	// Logprobs asks for the sampled token's log-probability and the
	// TopLogprobs most likely alternatives (Output.Logprobs).
	Logprobs    bool
	TopLogprobs int
	// Mask, when set, is the set of tokens the sample must come from (one
	// bit per token id, as Constraint.Allowed writes it; ids past its end
	// are not allowed). The executor applies it before anything else of
	// sampling, as if the other tokens' logits were -Inf; log-probabilities
	// are of the masked distribution. The caller owns it; read only.
	Mask []uint64
	// Draft, when positive, makes this a verification step of speculative
	// decoding: the last Draft entries of Tokens are drafted tokens that
	// follow the sequence's last real token, Tokens[len(Tokens)-Draft-1].
	// Sample is set, Mask and Logprobs are not, and History ends with that
	// last real token (the drafts are not in it). The executor samples
	// the token at each of the Draft+1 positions as a plain decode step
	// would (Generated, then Generated+1, ...; the history growing by the
	// accepted drafts), accepts drafts while the sampled token equals the
	// draft, and returns the count accepted in Output.Accepted and the
	// first sampled token that is not an accepted draft in Output.Tokens.
	// K/V is written for every position; the caller treats the slots of
	// rejected drafts as free.
	Draft int
}

// Logprobs is a sampled token's log-probability and the most likely
// alternatives, most likely first: the model's distribution after
// penalties and logit bias, before temperature.
type Logprobs struct {
	Logprob float32
	Top     []TokenLogprob
}

// TokenLogprob is one token's log-probability.
type TokenLogprob struct {
	Token   int32
	Logprob float32
}

// SamplingParams controls how the next token is chosen. The zero value is
// greedy decoding with no penalties.
type SamplingParams struct {
	// Temperature scales the logits; 0 means greedy (the most likely token).
	Temperature float64
	// TopP keeps the smallest set of tokens whose probability reaches TopP;
	// 0 or 1 keeps all.
	TopP float64
	// TopK keeps the K most likely tokens; 0 keeps all.
	TopK int
	// MinP drops tokens whose probability is below MinP times the most
	// likely token's; 0 keeps all.
	MinP float64
	// RepetitionPenalty divides the positive logits (multiplies the
	// negative ones) of tokens already in the prompt or output; 0 or 1 is
	// off.
	RepetitionPenalty float64
	// PresencePenalty and FrequencyPenalty subtract, from the logit of each
	// token already generated, a constant and its count times a constant
	// (OpenAI semantics, -2 to 2).
	PresencePenalty  float64
	FrequencyPenalty float64
	// LogitBias adds a bias (-100 to 100) to given token ids.
	LogitBias map[int32]float32
}

// BlockCopy copies the KV contents of block Src into block Dst.
type BlockCopy struct {
	Src, Dst int32
}

// BlockSwap moves one block between device memory and a host swap slot.
type BlockSwap struct {
	Device int32
	Host   int32
}

// Output is Forward's result.
type Output struct {
	// Tokens holds one entry per Batch.Seqs entry: the sampled token, or -1
	// where Sample was not set.
	Tokens []int32
	// Logprobs is nil, or parallel to Tokens with an entry wherever
	// SeqInput.Logprobs was set.
	Logprobs []*Logprobs
	// Accepted is nil when no sequence had a draft, or parallel to Tokens:
	// for a sequence with SeqInput.Draft > 0, the number of its drafts
	// the target accepted (0 to Draft). Its new tokens are the accepted
	// drafts, in order, then Tokens[i].
	Accepted []int
	// Duration is the time the step took (simulated or measured).
	Duration time.Duration
}

// Clock is the engine's source of time. The real clock sleeps; a virtual
// clock advances instantly, so the same engine can run a simulated hour in
// seconds.
type Clock interface {
	Now() time.Time
	// Sleep waits for d, or returns early with ctx's error.
	Sleep(ctx context.Context, d time.Duration) error
}
