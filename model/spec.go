package model

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/llmd/llmd/model/gguf"
)

// Limits a model spec must respect. They are far above any supported model
// and keep sizes computed from them inside int64.
const (
	specMaxLayers  = 1024
	specMaxDim     = 1 << 16
	specMaxHeads   = 1024
	specMaxHeadDim = 1024
	specMaxFFN     = 1 << 20
	specMaxContext = 1 << 24
	specMaxVocab   = 1 << 24
	specMaxExperts = 1 << 12
)

// Architectures lists the general.architecture values SpecFromFile
// accepts, sorted.
var Architectures = []string{"bert", "gemma3", "llama", "nomic-bert", "phi3", "qwen2", "qwen3", "qwen3moe"}

// RopeScaling is a model's RoPE context scaling (rope.scaling.* keys).
type RopeScaling struct {
	// Type is "" or "none" (no scaling), "linear", "yarn" or "longrope".
	Type string
	// Factor is the context extension factor (positions are divided by it
	// for linear scaling); 0 when absent.
	Factor float64
	// OriginalContext is the context length the model was trained with
	// before scaling, in tokens; 0 when absent.
	OriginalContext int
}

// Spec is the shape and hyperparameters of a model, derived from a GGUF
// file's metadata and checked against its tensors.
type Spec struct {
	// Arch is one of Architectures: "llama" (also Mistral, SmolLM,
	// TinyLlama), "qwen2", "qwen3", "qwen3moe", "phi3" or "gemma3", or an
	// embedding encoder, "bert" (BGE, MiniLM) or "nomic-bert".
	Arch string
	Name string // general.name, may be empty

	Layers  int
	Dim     int // embedding length
	Heads   int // query heads
	KVHeads int // key/value heads; Heads is a multiple of it
	// HeadDim is the per-head key (and query) length; ValueDim the
	// per-head value length. Both are usually Dim/Heads.
	HeadDim  int
	ValueDim int
	FFN      int // feed-forward hidden length
	Vocab    int // rows of token_embd
	// ContextLength is the trained context length in tokens.
	ContextLength int

	RopeBase    float64 // rope.freq_base, default 10000
	RopeDims    int     // rotated dimensions per head, default HeadDim
	RopeScaling RopeScaling
	// RopeFreqs reports a rope_freqs.weight tensor (Llama 3.1 style
	// per-frequency scaling) of RopeDims/2 values.
	RopeFreqs bool
	// RopeNeox reports NEOX pairing (x[i], x[i+RopeDims/2]) as qwen2 uses;
	// false means adjacent pairs (x[2i], x[2i+1]) as llama uses.
	RopeNeox bool

	RMSEps float64 // RMSNorm epsilon

	TiedOutput bool // no output.weight: logits use token_embd
	QKVBias    bool // blk.N.attn_{q,k,v}.bias present (required for qwen2)
	OutputBias bool // output.bias present

	// QKNorm reports per-head RMSNorm of the queries and keys before RoPE
	// (blk.N.attn_q_norm and attn_k_norm, HeadDim values each): qwen3,
	// qwen3moe and gemma3.
	QKNorm bool
	// FusedQKV reports one blk.N.attn_qkv matrix whose output rows are Q,
	// then K, then V (phi3).
	FusedQKV bool
	// FusedGateUp reports a blk.N.ffn_up of 2·FFN output rows, the gate
	// then the up projection, and no ffn_gate (phi3).
	FusedGateUp bool
	// GELU selects the tanh-approximation GELU for the gated feed-forward
	// (gemma3); false means SiLU (SwiGLU).
	GELU bool
	// EmbedScale multiplies the token embeddings; 0 means 1 (gemma3: √Dim).
	EmbedScale float64
	// PostNorms reports RMSNorms of the attention and feed-forward outputs
	// before they join the residual stream (blk.N.post_attention_norm and
	// post_ffw_norm, gemma3).
	PostNorms bool
	// AttnScale multiplies q·k in attention; 0 means 1/√HeadDim.
	AttnScale float64
	// SlidingWindow is the number of positions a query of a sliding-window
	// layer sees, itself included (p − p' < SlidingWindow); 0 means no
	// sliding-window layers.
	SlidingWindow int
	// SlidingPattern makes every SlidingPattern-th layer global: layer l
	// is a sliding-window layer when l % SlidingPattern < SlidingPattern−1
	// (llama.cpp's set_swa_pattern). Set only with SlidingWindow.
	SlidingPattern int
	// RopeBaseSWA is the RoPE base of the sliding-window layers
	// (rope.freq_base_swa, default 10000); they take no RoPE scaling.
	RopeBaseSWA float64
	// LogitSoftcap caps the logits at ±LogitSoftcap by cap·tanh(x/cap);
	// 0 means none.
	LogitSoftcap float64

	// Experts is the number of feed-forward experts (expert_count) of a
	// mixture-of-experts model, 0 for a dense one. Each token goes to the
	// ExpertsUsed experts of highest router probability (softmax over
	// blk.N.ffn_gate_inp's logits), whose outputs are summed with those
	// probabilities, renormalised to sum to 1 when ExpertWeightsNorm and
	// then multiplied by ExpertWeightsScale unless it is 0 or 1. Each
	// expert's hidden length is ExpertFFN.
	Experts            int
	ExpertsUsed        int
	ExpertFFN          int
	ExpertWeightsNorm  bool
	ExpertWeightsScale float64

	// Encoder reports an embedding model (bert, nomic-bert): a
	// bidirectional encoder whose every token attends to every token of
	// its input, with LayerNorm (weight and bias, NormEps) after each
	// sublayer's residual add, and whose last hidden states are pooled
	// into one embedding by Pooling. It has no KV cache, no output head
	// and generates nothing; the fields below describe it (see also
	// FusedQKV, QKVBias, GELU). The decoder-only fields (RMSEps,
	// TiedOutput, ...) are unset.
	Encoder bool
	// NormEps is an encoder's LayerNorm epsilon
	// (attention.layer_norm_epsilon).
	NormEps float64
	// PosEmbed reports learned absolute position embeddings (a
	// position_embd row per position, ContextLength rows, added to the
	// token's embedding: bert); without it an encoder rotates queries and
	// keys by RoPE (nomic-bert, NEOX pairing).
	PosEmbed bool
	// TokenTypes is the number of token_types rows (0: none); row 0
	// ("sentence A") is added to every token's embedding.
	TokenTypes int
	// AttnOutBias reports blk.N.attn_output.bias; FFNBias ffn_up.bias and
	// ffn_down.bias (bert; llama.cpp reads no FFN biases for nomic-bert).
	AttnOutBias, FFNBias bool
	// Pooling is how an encoder's token states become the embedding
	// (<arch>.pooling_type).
	Pooling Pooling
	// Matryoshka reports a model trained with Matryoshka representation
	// learning, whose embedding may be cut to its leading dimensions and
	// renormalised (the request's "dimensions"): the llmd key
	// <arch>.matryoshka, or a model known to be one by its general.name
	// (nomic-embed-text v1.5 and v2, mxbai-embed-large).
	Matryoshka bool

	// FileType names the quantization level ("F16", "Q8_0", "Q4_K_M"),
	// from general.file_type or else the commonest matrix type.
	FileType string
	// ParamCount is the number of weights over all tensors.
	ParamCount int64
	// WeightBytes is the size of all tensor data in bytes.
	WeightBytes int64
}

// Pooling is llama.cpp's llama_pooling_type: how an embedding model's
// token states become one vector.
type Pooling int

// Pooling types, with llama.cpp's values.
const (
	PoolingNone Pooling = 0 // one embedding per token
	PoolingMean Pooling = 1 // the mean of the input's token states
	PoolingCLS  Pooling = 2 // the first token's state ([CLS])
	PoolingLast Pooling = 3 // the last token's state
	PoolingRank Pooling = 4 // a reranker's classification head
)

// String names p as llama.cpp does ("mean", "cls", ...).
func (p Pooling) String() string {
	switch p {
	case PoolingNone:
		return "none"
	case PoolingMean:
		return "mean"
	case PoolingCLS:
		return "cls"
	case PoolingLast:
		return "last"
	case PoolingRank:
		return "rank"
	}
	return fmt.Sprintf("pooling(%d)", int(p))
}

// KVBytesPerToken returns the KV cache bytes one token takes over all
// layers, with kvTypeBytes bytes per cached value (2 for F16).
func (s Spec) KVBytesPerToken(kvTypeBytes int) int64 {
	return int64(s.Layers) * int64(s.KVHeads) * int64(s.HeadDim+s.ValueDim) * int64(kvTypeBytes)
}

// specFileTypes names llama_ftype values (general.file_type).
var specFileTypes = map[uint64]string{
	0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
	10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M",
	16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S",
	22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M",
	28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0",
	38: "MXFP4_MOE",
}

// SpecFromFile derives the model spec from f's metadata and checks it: the
// architecture is one of Architectures (else the error lists them), sizes
// are in range, heads are a multiple
// of KV heads, and every tensor the forward pass needs is present with the
// shape the metadata implies. Defaults follow llama.cpp: head_count_kv =
// head_count, key_length = value_length = embedding_length/head_count,
// rope.freq_base = 10000, rope.dimension_count = key_length.
func SpecFromFile(f *gguf.File) (Spec, error) {
	arch, ok := f.String("general.architecture")
	if !ok {
		return Spec{}, fmt.Errorf("model: general.architecture is missing")
	}
	if !slices.Contains(Architectures, arch) {
		return Spec{}, fmt.Errorf("model: architecture %q is not supported (supported: %s)", arch, strings.Join(Architectures, ", "))
	}
	s := Spec{Arch: arch, RopeNeox: arch != "llama"}
	s.Name, _ = f.String("general.name")
	p := arch + "."

	if n, ok := f.Uint(p + "expert_count"); ok && n > 0 && arch != "qwen3moe" {
		return Spec{}, fmt.Errorf("model: %sexpert_count is %d: mixture-of-experts %s models are not supported (supported: qwen3moe)", p, n, arch)
	}

	var err error
	intKey := func(key string, def, lo, hi int) int {
		if err != nil {
			return 0
		}
		v, present := f.Value(p + key)
		if !present {
			if def < 0 {
				err = fmt.Errorf("model: %s%s is missing", p, key)
			}
			return def
		}
		n, ok := f.Uint(p + key)
		if !ok {
			err = fmt.Errorf("model: %s%s is %v (%T), want an integer", p, key, v, v)
			return 0
		}
		if n < uint64(lo) || n > uint64(hi) {
			err = fmt.Errorf("model: %s%s is %d, want %d to %d", p, key, n, lo, hi)
			return 0
		}
		return int(n)
	}
	floatKey := func(key string, def float64) float64 {
		if err != nil {
			return 0
		}
		v, present := f.Value(p + key)
		if !present {
			if def < 0 {
				err = fmt.Errorf("model: %s%s is missing", p, key)
			}
			return def
		}
		x, ok := f.Float(p + key)
		if !ok {
			err = fmt.Errorf("model: %s%s is %v (%T), want a float", p, key, v, v)
		}
		return x
	}
	s.Dim = intKey("embedding_length", -1, 1, specMaxDim)
	s.Layers = intKey("block_count", -1, 1, specMaxLayers)
	s.FFN = intKey("feed_forward_length", -1, 1, specMaxFFN)
	s.ContextLength = intKey("context_length", -1, 1, specMaxContext)
	s.Heads = intKey("attention.head_count", -1, 1, specMaxHeads)
	s.KVHeads = intKey("attention.head_count_kv", s.Heads, 1, specMaxHeads)
	if err != nil {
		return Spec{}, err
	}
	if s.Heads%s.KVHeads != 0 {
		return Spec{}, fmt.Errorf("model: %d heads is not a multiple of %d KV heads", s.Heads, s.KVHeads)
	}
	s.HeadDim = intKey("attention.key_length", s.Dim/s.Heads, 1, specMaxHeadDim)
	s.ValueDim = intKey("attention.value_length", s.HeadDim, 1, specMaxHeadDim)
	if err == nil && (s.HeadDim < 1 || s.HeadDim > specMaxHeadDim) {
		return Spec{}, fmt.Errorf("model: head dimension %d (embedding %d / %d heads) is out of range", s.HeadDim, s.Dim, s.Heads)
	}
	s.RopeDims = intKey("rope.dimension_count", s.HeadDim, 2, specMaxHeadDim)
	s.RopeBase = floatKey("rope.freq_base", 10000)
	eps, epsKey := &s.RMSEps, "attention.layer_norm_rms_epsilon"
	if s.Encoder = encoderArch(arch); s.Encoder {
		eps, epsKey = &s.NormEps, "attention.layer_norm_epsilon"
	}
	*eps = floatKey(epsKey, -1)
	if err != nil {
		return Spec{}, err
	}
	if s.RopeDims%2 != 0 || s.RopeDims > s.HeadDim {
		return Spec{}, fmt.Errorf("model: %srope.dimension_count %d must be even and at most the head dimension %d", p, s.RopeDims, s.HeadDim)
	}
	if !(s.RopeBase > 0) || math.IsInf(s.RopeBase, 0) {
		return Spec{}, fmt.Errorf("model: %srope.freq_base %v must be positive", p, s.RopeBase)
	}
	if !(*eps > 0 && *eps < 1) {
		return Spec{}, fmt.Errorf("model: %s%s %v must be in (0, 1)", p, epsKey, *eps)
	}
	if s.RopeScaling, err = specRopeScaling(f, p); err != nil {
		return Spec{}, err
	}
	aerr := s.archParams(f, intKey, floatKey)
	if err != nil {
		// A key read failed: its error comes first.
		return Spec{}, err
	}
	if aerr != nil {
		return Spec{}, aerr
	}

	check := s.checkTensors
	if s.Encoder {
		check = s.checkEncoderTensors
	}
	if err := check(f); err != nil {
		return Spec{}, err
	}
	if n, ok := f.Uint(p + "vocab_size"); ok && n != uint64(s.Vocab) {
		return Spec{}, fmt.Errorf("model: %svocab_size %d does not match token_embd.weight's %d rows", p, n, s.Vocab)
	}
	if n := f.ArrayLen("tokenizer.ggml.tokens"); n > s.Vocab {
		return Spec{}, fmt.Errorf("model: the tokenizer has %d tokens but token_embd.weight only %d rows", n, s.Vocab)
	}

	for _, t := range f.Tensors {
		s.ParamCount += int64(t.Elements())
		s.WeightBytes += int64(t.Size)
	}
	s.FileType = specFileType(f)
	return s, nil
}

// archParams sets the hyperparameters particular to s.Arch, reading the
// keys with SpecFromFile's readers (which keep their first error to
// themselves: the caller checks it before the error returned here), the
// way llama.cpp's per-architecture loaders do.
func (s *Spec) archParams(f *gguf.File, intKey func(key string, def, lo, hi int) int, floatKey func(key string, def float64) float64) error {
	p := s.Arch + "."
	switch s.Arch {
	case "qwen3":
		s.QKNorm = true
	case "qwen3moe":
		s.QKNorm = true
		s.Experts = intKey("expert_count", -1, 1, specMaxExperts)
		s.ExpertsUsed = intKey("expert_used_count", -1, 1, specMaxExperts)
		s.ExpertFFN = intKey("expert_feed_forward_length", 0, 1, specMaxFFN)
		// llama.cpp always renormalises qwen3moe's top-k weights and
		// reads no weight scale for it.
		s.ExpertWeightsNorm = true
	case "phi3":
		s.FusedGateUp = true
		if s.ValueDim != s.HeadDim {
			return fmt.Errorf("model: phi3 needs equal key and value lengths, got %d and %d", s.HeadDim, s.ValueDim)
		}
		for _, name := range []string{"rope_factors_long.weight", "rope_factors_short.weight"} {
			if _, ok := f.Tensor(name); ok {
				return fmt.Errorf("model: tensor %q: LongRoPE scaling (Phi-3 128k) is not supported", name)
			}
		}
		// llama.cpp disables Phi-3's sliding window: phi3 files that carry
		// attention.sliding_window run with full attention, as here.
	case "bert", "nomic-bert":
		if err := s.encoderParams(f, intKey); err != nil {
			return err
		}
	case "gemma3":
		s.QKNorm, s.GELU, s.PostNorms = true, true, true
		s.EmbedScale = float64(float32(math.Sqrt(float64(s.Dim))))
		// llama.cpp (after gemma_pytorch): queries are scaled by
		// 1/√HeadDim, except in the 62-layer 27B model, whose
		// query_pre_attn_scalar is Dim/Heads.
		s.AttnScale = 1 / math.Sqrt(float64(s.HeadDim))
		if s.Layers == 62 {
			s.AttnScale = 1 / math.Sqrt(float64(s.Dim/s.Heads))
		}
		s.SlidingWindow = intKey("attention.sliding_window", 0, 0, specMaxContext)
		if s.SlidingWindow > 0 {
			s.SlidingPattern = intKey("attention.sliding_window_pattern", 6, 1, specMaxLayers)
			s.RopeBaseSWA = floatKey("rope.freq_base_swa", 10000)
		}
		s.LogitSoftcap = floatKey("final_logit_softcapping", 0)
		if n, ok := f.Uint(p + "attention.key_length_swa"); ok && n != uint64(s.HeadDim) {
			return fmt.Errorf("model: %sattention.key_length_swa %d differs from key_length %d: not supported", p, n, s.HeadDim)
		}
	}
	switch {
	case s.Experts > 0 && s.ExpertsUsed > s.Experts:
		return fmt.Errorf("model: %sexpert_used_count %d exceeds expert_count %d", p, s.ExpertsUsed, s.Experts)
	case s.Experts > 0 && s.ExpertFFN == 0:
		// llama.cpp's default when expert_feed_forward_length is absent.
		s.ExpertFFN = s.FFN / s.ExpertsUsed
		if s.ExpertFFN == 0 {
			return fmt.Errorf("model: %sfeed_forward_length %d over %d used experts leaves no expert width", p, s.FFN, s.ExpertsUsed)
		}
	case s.SlidingWindow > 0 && (!(s.RopeBaseSWA > 0) || math.IsInf(s.RopeBaseSWA, 0)):
		return fmt.Errorf("model: %srope.freq_base_swa %v must be positive", p, s.RopeBaseSWA)
	case !(s.LogitSoftcap >= 0) || math.IsInf(s.LogitSoftcap, 0):
		return fmt.Errorf("model: %sfinal_logit_softcapping %v must be a non-negative number", p, s.LogitSoftcap)
	}
	return nil
}

// SlidingLayer reports whether layer l attends over a sliding window of
// SlidingWindow positions rather than the whole sequence.
func (s Spec) SlidingLayer(l int) bool {
	return s.SlidingWindow > 0 && s.SlidingPattern > 0 && l%s.SlidingPattern < s.SlidingPattern-1
}

// specRopeScaling reads rope.scaling.* the way llama.cpp does: a factor
// without a type means linear scaling.
func specRopeScaling(f *gguf.File, p string) (RopeScaling, error) {
	var rs RopeScaling
	rs.Type, _ = f.String(p + "rope.scaling.type")
	factor, ok := f.Float(p + "rope.scaling.factor")
	if !ok {
		factor, ok = f.Float(p + "rope.scale_linear")
	}
	if ok {
		if !(factor >= 0) || math.IsInf(factor, 0) {
			return rs, fmt.Errorf("model: %srope.scaling.factor %v is invalid", p, factor)
		}
		rs.Factor = factor
	}
	if n, ok := f.Uint(p + "rope.scaling.original_context_length"); ok {
		if n > specMaxContext {
			return rs, fmt.Errorf("model: %srope.scaling.original_context_length %d is out of range", p, n)
		}
		rs.OriginalContext = int(n)
	}
	if rs.Type == "" && rs.Factor != 0 && rs.Factor != 1 {
		rs.Type = "linear"
	}
	switch rs.Type {
	case "", "none":
	case "linear", "yarn", "longrope":
		if rs.Factor <= 0 {
			return rs, fmt.Errorf("model: %s RoPE scaling needs a positive %srope.scaling.factor", rs.Type, p)
		}
	default:
		return rs, fmt.Errorf("model: RoPE scaling type %q is not supported", rs.Type)
	}
	return rs, nil
}

// checkTensors checks the tensors the forward pass reads and sets Vocab,
// TiedOutput, QKVBias, FusedQKV, OutputBias and RopeFreqs.
func (s *Spec) checkTensors(f *gguf.File) error {
	shape := func(name string, dims ...int) (bool, error) { return tensorShape(f, name, dims...) }
	need := func(name string, dims ...int) error { return needTensor(f, name, dims...) }

	var err error
	if s.Vocab, err = embeddingVocab(f, s.Dim); err != nil {
		return err
	}
	if err := need("output_norm.weight", s.Dim); err != nil {
		return err
	}
	out, err := shape("output.weight", s.Dim, s.Vocab)
	if err != nil {
		return err
	}
	s.TiedOutput = !out
	if s.OutputBias, err = shape("output.bias", s.Vocab); err != nil {
		return err
	}
	if s.RopeFreqs, err = shape("rope_freqs.weight", s.RopeDims/2); err != nil {
		return err
	}

	if s.Arch == "phi3" {
		_, s.FusedQKV = f.Tensor("blk.0.attn_qkv.weight")
	}
	_, s.QKVBias = f.Tensor("blk.0.attn_q.bias")
	if s.Arch == "qwen2" {
		s.QKVBias = true
	}
	if s.QKVBias && s.FusedQKV {
		return fmt.Errorf("model: q/k/v biases with a fused attn_qkv are not supported")
	}
	for l := range s.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		for _, c := range s.layerTensors() {
			if err := need(p+c.name, c.dims...); err != nil {
				return err
			}
		}
	}
	return nil
}

// specTensor is a per-layer tensor's name (without "blk.N.") and shape.
type specTensor struct {
	name string
	dims []int
}

// layerTensors lists the tensors every layer of s must hold.
func (s *Spec) layerTensors() []specTensor {
	q, k, v := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim, s.KVHeads*s.ValueDim
	ts := []specTensor{{"attn_norm.weight", []int{s.Dim}}}
	if s.FusedQKV {
		ts = append(ts, specTensor{"attn_qkv.weight", []int{s.Dim, q + k + v}})
	} else {
		ts = append(ts,
			specTensor{"attn_q.weight", []int{s.Dim, q}},
			specTensor{"attn_k.weight", []int{s.Dim, k}},
			specTensor{"attn_v.weight", []int{s.Dim, v}})
	}
	if s.QKVBias {
		ts = append(ts,
			specTensor{"attn_q.bias", []int{q}},
			specTensor{"attn_k.bias", []int{k}},
			specTensor{"attn_v.bias", []int{v}})
	}
	if s.QKNorm {
		ts = append(ts,
			specTensor{"attn_q_norm.weight", []int{s.HeadDim}},
			specTensor{"attn_k_norm.weight", []int{s.HeadDim}})
	}
	ts = append(ts,
		specTensor{"attn_output.weight", []int{s.Heads * s.ValueDim, s.Dim}},
		specTensor{"ffn_norm.weight", []int{s.Dim}})
	if s.PostNorms {
		ts = append(ts,
			specTensor{"post_attention_norm.weight", []int{s.Dim}},
			specTensor{"post_ffw_norm.weight", []int{s.Dim}})
	}
	switch {
	case s.Experts > 0:
		ts = append(ts,
			specTensor{"ffn_gate_inp.weight", []int{s.Dim, s.Experts}},
			specTensor{"ffn_gate_exps.weight", []int{s.Dim, s.ExpertFFN, s.Experts}},
			specTensor{"ffn_up_exps.weight", []int{s.Dim, s.ExpertFFN, s.Experts}},
			specTensor{"ffn_down_exps.weight", []int{s.ExpertFFN, s.Dim, s.Experts}})
	case s.FusedGateUp:
		ts = append(ts,
			specTensor{"ffn_up.weight", []int{s.Dim, 2 * s.FFN}},
			specTensor{"ffn_down.weight", []int{s.FFN, s.Dim}})
	default:
		ts = append(ts,
			specTensor{"ffn_gate.weight", []int{s.Dim, s.FFN}},
			specTensor{"ffn_up.weight", []int{s.Dim, s.FFN}},
			specTensor{"ffn_down.weight", []int{s.FFN, s.Dim}})
	}
	return ts
}

// specFileType names the file's quantization level: general.file_type when
// present, else the commonest type among 2-D tensors.
func specFileType(f *gguf.File) string {
	if ft, ok := f.Uint("general.file_type"); ok {
		ft &^= 1024 // LLAMA_FTYPE_GUESSED
		if name, ok := specFileTypes[ft]; ok {
			return name
		}
		return fmt.Sprintf("unknown(%d)", ft)
	}
	counts := map[gguf.TensorType]int{}
	best := gguf.TensorType(0)
	for _, t := range f.Tensors {
		if len(t.Dims) < 2 {
			continue
		}
		counts[t.Type]++
		if c := counts[t.Type]; c > counts[best] || (c == counts[best] && t.Type < best) {
			best = t.Type
		}
	}
	if len(counts) == 0 {
		return ""
	}
	return best.String()
}

// encoderArch reports the embedding encoders among Architectures.
func encoderArch(arch string) bool { return arch == "bert" || arch == "nomic-bert" }

// matryoshkaNames are general.name values (lowercased, as substrings) of
// embedding models trained with Matryoshka representation learning, whose
// files carry no key that says so.
var matryoshkaNames = []string{"nomic-embed-text-v1.5", "nomic-embed-text-v2", "mxbai-embed-large"}

// encoderParams reads an encoder's keys as llama.cpp's bert and nomic-bert
// loaders do: pooling_type (mean when absent, the sentence-transformers
// default; none and rank are refused, as only pooled embeddings are
// served), token_type_count, no causal attention, no mixture of experts;
// and llmd's <arch>.matryoshka.
func (s *Spec) encoderParams(f *gguf.File, intKey func(key string, def, lo, hi int) int) error {
	p := s.Arch + "."
	s.PosEmbed = s.Arch == "bert"
	s.GELU = s.Arch == "bert"
	s.Pooling = Pooling(intKey("pooling_type", int(PoolingMean), 0, 4))
	switch s.Pooling {
	case PoolingNone, PoolingRank:
		return fmt.Errorf("model: %spooling_type is %s: only pooled embeddings (mean, cls, last) are supported", p, s.Pooling)
	}
	if c, ok := f.Bool(p + "attention.causal"); ok && c {
		return fmt.Errorf("model: %sattention.causal is true: a causal encoder is not supported", p)
	}
	if n, ok := f.Uint(p + "moe_every_n_layers"); ok && n > 0 {
		return fmt.Errorf("model: %smoe_every_n_layers is %d: nomic-bert-moe is not supported", p, n)
	}
	if s.HeadDim != s.ValueDim {
		return fmt.Errorf("model: %s needs equal key and value lengths, got %d and %d", s.Arch, s.HeadDim, s.ValueDim)
	}
	if m, ok := f.Bool(p + "matryoshka"); ok {
		s.Matryoshka = m
	} else {
		name := strings.ToLower(s.Name)
		if b, ok := f.String("general.basename"); ok {
			name += " " + strings.ToLower(b)
		}
		for _, n := range matryoshkaNames {
			if strings.Contains(name, n) {
				s.Matryoshka = true
			}
		}
	}
	return nil
}

// checkEncoderTensors checks the tensors of an encoder's forward pass (as
// llama.cpp's bert graph reads them) and sets Vocab, TokenTypes,
// FusedQKV, QKVBias, AttnOutBias and FFNBias.
func (s *Spec) checkEncoderTensors(f *gguf.File) error {
	need := func(name string, dims ...int) error { return needTensor(f, name, dims...) }
	var err error
	if s.Vocab, err = embeddingVocab(f, s.Dim); err != nil {
		return err
	}
	if tt, ok := f.Tensor("token_types.weight"); ok {
		if len(tt.Dims) != 2 || tt.Dims[0] != uint64(s.Dim) || tt.Dims[1] < 1 || tt.Dims[1] > 1<<16 {
			return fmt.Errorf("model: tensor %q has shape %v, want [%d types]", tt.Name, tt.Dims, s.Dim)
		}
		s.TokenTypes = int(tt.Dims[1])
	}
	errs := []error{need("token_embd_norm.weight", s.Dim), need("token_embd_norm.bias", s.Dim)}
	if s.PosEmbed {
		errs = append(errs, need("position_embd.weight", s.Dim, s.ContextLength))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	q, kv := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	_, s.FusedQKV = f.Tensor("blk.0.attn_qkv.weight")
	if s.FusedQKV {
		_, s.QKVBias = f.Tensor("blk.0.attn_qkv.bias")
	} else {
		_, s.QKVBias = f.Tensor("blk.0.attn_q.bias")
	}
	_, s.AttnOutBias = f.Tensor("blk.0.attn_output.bias")
	_, s.FFNBias = f.Tensor("blk.0.ffn_up.bias")
	s.FFNBias = s.FFNBias && s.Arch == "bert"
	for l := range s.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		var ts []specTensor
		if s.FusedQKV {
			ts = append(ts, specTensor{"attn_qkv.weight", []int{s.Dim, q + 2*kv}})
			if s.QKVBias {
				ts = append(ts, specTensor{"attn_qkv.bias", []int{q + 2*kv}})
			}
		} else {
			ts = append(ts, specTensor{"attn_q.weight", []int{s.Dim, q}}, specTensor{"attn_k.weight", []int{s.Dim, kv}},
				specTensor{"attn_v.weight", []int{s.Dim, kv}})
			if s.QKVBias {
				ts = append(ts, specTensor{"attn_q.bias", []int{q}}, specTensor{"attn_k.bias", []int{kv}},
					specTensor{"attn_v.bias", []int{kv}})
			}
		}
		ts = append(ts, specTensor{"attn_output.weight", []int{q, s.Dim}})
		if s.AttnOutBias {
			ts = append(ts, specTensor{"attn_output.bias", []int{s.Dim}})
		}
		ts = append(ts, specTensor{"attn_output_norm.weight", []int{s.Dim}}, specTensor{"attn_output_norm.bias", []int{s.Dim}},
			specTensor{"ffn_up.weight", []int{s.Dim, s.FFN}}, specTensor{"ffn_down.weight", []int{s.FFN, s.Dim}},
			specTensor{"layer_output_norm.weight", []int{s.Dim}}, specTensor{"layer_output_norm.bias", []int{s.Dim}})
		if s.Arch == "nomic-bert" {
			ts = append(ts, specTensor{"ffn_gate.weight", []int{s.Dim, s.FFN}})
		}
		if s.FFNBias {
			ts = append(ts, specTensor{"ffn_up.bias", []int{s.FFN}}, specTensor{"ffn_down.bias", []int{s.Dim}})
		}
		for _, c := range ts {
			if err := need(p+c.name, c.dims...); err != nil {
				return err
			}
		}
	}
	return nil
}

// tensorShape reports whether f has tensor name, and an error when its
// shape is not dims.
func tensorShape(f *gguf.File, name string, dims ...int) (bool, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return false, nil
	}
	want := make([]uint64, len(dims))
	for i, d := range dims {
		want[i] = uint64(d)
	}
	if !slices.Equal(t.Dims, want) {
		return true, fmt.Errorf("model: tensor %q has shape %v, want %v", name, t.Dims, want)
	}
	return true, nil
}

// needTensor is tensorShape for a tensor that must be there.
func needTensor(f *gguf.File, name string, dims ...int) error {
	ok, err := tensorShape(f, name, dims...)
	if err == nil && !ok {
		err = fmt.Errorf("model: tensor %q is missing", name)
	}
	return err
}

// embeddingVocab checks token_embd ([dim, vocab]) and returns the
// vocabulary size.
func embeddingVocab(f *gguf.File, dim int) (int, error) {
	emb, ok := f.Tensor("token_embd.weight")
	if !ok {
		return 0, fmt.Errorf("model: tensor %q is missing", "token_embd.weight")
	}
	if len(emb.Dims) != 2 || emb.Dims[0] != uint64(dim) || emb.Dims[1] > specMaxVocab {
		return 0, fmt.Errorf("model: tensor %q has shape %v, want [%d vocab] with vocab at most %d", emb.Name, emb.Dims, dim, specMaxVocab)
	}
	return int(emb.Dims[1]), nil
}
