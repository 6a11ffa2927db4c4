package model

import (
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
var Architectures = []string{"gemma3", "llama", "phi3", "qwen2", "qwen3", "qwen3moe"}

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
	// TinyLlama), "qwen2", "qwen3", "qwen3moe", "phi3" or "gemma3".
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

	// FileType names the quantization level ("F16", "Q8_0", "Q4_K_M"),
	// from general.file_type or else the commonest matrix type.
	FileType string
	// ParamCount is the number of weights over all tensors.
	ParamCount int64
	// WeightBytes is the size of all tensor data in bytes.
	WeightBytes int64
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
	s.RMSEps = floatKey("attention.layer_norm_rms_epsilon", -1)
	if err != nil {
		return Spec{}, err
	}
	if s.RopeDims%2 != 0 || s.RopeDims > s.HeadDim {
		return Spec{}, fmt.Errorf("model: %srope.dimension_count %d must be even and at most the head dimension %d", p, s.RopeDims, s.HeadDim)
	}
	if !(s.RopeBase > 0) || math.IsInf(s.RopeBase, 0) {
		return Spec{}, fmt.Errorf("model: %srope.freq_base %v must be positive", p, s.RopeBase)
	}
	if !(s.RMSEps > 0 && s.RMSEps < 1) {
		return Spec{}, fmt.Errorf("model: %sattention.layer_norm_rms_epsilon %v must be in (0, 1)", p, s.RMSEps)
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

	if err := s.checkTensors(f); err != nil {
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
	shape := func(name string, dims ...int) (bool, error) {
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
	need := func(name string, dims ...int) error {
		ok, err := shape(name, dims...)
		if err == nil && !ok {
			err = fmt.Errorf("model: tensor %q is missing", name)
		}
		return err
	}

	emb, ok := f.Tensor("token_embd.weight")
	if !ok {
		return fmt.Errorf("model: tensor %q is missing", "token_embd.weight")
	}
	if len(emb.Dims) != 2 || emb.Dims[0] != uint64(s.Dim) || emb.Dims[1] > specMaxVocab {
		return fmt.Errorf("model: tensor %q has shape %v, want [%d vocab] with vocab at most %d", emb.Name, emb.Dims, s.Dim, specMaxVocab)
	}
	s.Vocab = int(emb.Dims[1])
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
