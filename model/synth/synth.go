package synth

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/llmd/llmd/model/gguf"
)

// Model describes a model of the given shape with random weights drawn
// from a fixed seed, for tests and `llmctl model init`. Zero fields take
// the defaults named in their comments.
type Model struct {
	Arch                                    string // one of Architectures
	Name                                    string // general.name
	Dim, Layers, Heads, KVHeads, FFN, Vocab int
	HeadDim                                 int             // 0: Dim/Heads
	RopeDims                                int             // rotated dims per head; 0: HeadDim
	ContextLength                           int             // 0: 2048
	RopeBase                                float64         // 0: 10000 (llama, phi3), 1000000 (the others)
	RMSEps                                  float64         // 0: 1e-5 (llama, phi3), 1e-6 (the others)
	Type                                    gguf.TensorType // type of the 2-D weights; norms, biases and routers stay F32
	Mix                                     Mix             // when set, llama-quantize's mixture instead of Type
	Tied                                    bool            // no output.weight: logits use token_embd
	Seed                                    uint64          // seed of the weight draws

	// Experts and ExpertsUsed shape a qwen3moe model (required there):
	// ExpertsUsed of Experts experts per token, each ExpertFFN wide
	// (0: FFN).
	Experts, ExpertsUsed, ExpertFFN int
	// SlidingWindow and SlidingPattern shape gemma3's sliding-window
	// layers (0: 512 and 6, as Gemma 3 1B; a negative window writes no
	// sliding-window keys), RopeBaseSWA their RoPE base (0: 10000).
	SlidingWindow, SlidingPattern int
	RopeBaseSWA                   float64

	// Pooling is an embedding model's pooling: "mean" (the default),
	// "cls" or "last". Matryoshka writes <arch>.matryoshka (the embedding
	// may be cut to its leading dimensions).
	Pooling    string
	Matryoshka bool
}

// Architectures lists the architectures Model writes.
var Architectures = []string{"bert", "gemma3", "llama", "nomic-bert", "phi3", "qwen2", "qwen3", "qwen3moe"}

// Writer returns a writer holding the model's architecture metadata and
// weights, laid out as llama.cpp's converters write each architecture:
// token_embd, per layer attention (with q/k/v biases for qwen2, per-head
// q/k norms for qwen3, qwen3moe and gemma3, one fused attn_qkv for phi3)
// and a gated FFN (ffn_gate and ffn_up, or phi3's fused ffn_up of 2·FFN
// rows, or qwen3moe's F32 router ffn_gate_inp and 3-D expert stacks),
// gemma3's post-attention and post-FFN norms, output_norm and, unless
// Tied, output. The caller adds
// tokenizer metadata before writing. With Mix set, each matrix gets
// llama-quantize's type for its role and layer. Rows whose length is not
// a multiple of a K-quant's 256 fall back as llama-quantize does (rowType),
// and to F16 when not a multiple of 32.
//
// bert and nomic-bert, the embedding encoders, are laid out as
// encoderWriter says.
//
// Weights are N(0, (g/√fan_in)²) with g = 0.5 for attn_output and ffn_down
// and 1 otherwise; token_embd is N(0, 1), or N(0, 1/16²) when tied; norm
// weights are U(0.75, 1.25); qwen2 biases are N(0, 0.1²); routers are
// N(0, (2/√Dim)²).
func (m Model) Writer() (*gguf.Writer, error) {
	if !slices.Contains(Architectures, m.Arch) {
		return nil, fmt.Errorf("model: random model: architecture %q is not supported (want one of %s)", m.Arch, strings.Join(Architectures, ", "))
	}
	if m.Arch == "bert" || m.Arch == "nomic-bert" {
		return m.encoderWriter()
	}
	if m.HeadDim == 0 && m.Heads > 0 {
		m.HeadDim = m.Dim / m.Heads
	}
	if m.RopeDims == 0 {
		m.RopeDims = m.HeadDim
	}
	if m.KVHeads == 0 {
		m.KVHeads = m.Heads
	}
	if m.ContextLength == 0 {
		m.ContextLength = 2048
	}
	small := m.Arch == "llama" || m.Arch == "phi3" // 10000 and 1e-5
	if m.RopeBase == 0 {
		m.RopeBase = map[bool]float64{true: 10000, false: 1000000}[small]
	}
	if m.RMSEps == 0 {
		m.RMSEps = map[bool]float64{true: 1e-5, false: 1e-6}[small]
	}
	moe := m.Arch == "qwen3moe"
	if moe && m.ExpertFFN == 0 {
		m.ExpertFFN = m.FFN
	}
	gemma := m.Arch == "gemma3"
	if gemma {
		if m.SlidingWindow == 0 {
			m.SlidingWindow = 512
		}
		if m.SlidingPattern == 0 {
			m.SlidingPattern = 6
		}
		if m.RopeBaseSWA == 0 {
			m.RopeBaseSWA = 10000
		}
	}
	const maxSide = 1 << 20
	for _, c := range []struct {
		name string
		v    int
	}{{"dim", m.Dim}, {"layers", m.Layers}, {"heads", m.Heads}, {"kv heads", m.KVHeads}, {"ffn", m.FFN}, {"vocab", m.Vocab}, {"head dim", m.HeadDim}} {
		if c.v <= 0 || c.v > maxSide {
			return nil, fmt.Errorf("model: random model: %s %d out of range (1 to %d)", c.name, c.v, maxSide)
		}
	}
	if m.Layers > 1024 || m.Heads%m.KVHeads != 0 || m.HeadDim%2 != 0 {
		return nil, fmt.Errorf("model: random model: want layers <= 1024, heads (%d) a multiple of kv heads (%d) and an even head dim (%d)", m.Heads, m.KVHeads, m.HeadDim)
	}
	if m.RopeDims < 2 || m.RopeDims%2 != 0 || m.RopeDims > m.HeadDim {
		return nil, fmt.Errorf("model: random model: rope dims %d must be even, at least 2 and at most the head dim %d", m.RopeDims, m.HeadDim)
	}
	if moe && (m.Experts < 1 || m.Experts > 1024 || m.ExpertsUsed < 1 || m.ExpertsUsed > m.Experts || m.ExpertFFN < 1 || m.ExpertFFN > maxSide) {
		return nil, fmt.Errorf("model: random model: qwen3moe needs 1 to 1024 experts (got %d), 1 to that many used (got %d) and a positive expert width (got %d)", m.Experts, m.ExpertsUsed, m.ExpertFFN)
	}
	if m.Mix == MixNone && !m.Type.Supported() {
		return nil, &gguf.UnsupportedTypeError{Type: uint32(m.Type)}
	}
	if m.Mix != MixNone && m.Mix.fileType() == 0 {
		return nil, fmt.Errorf("model: random model: unknown mixture %d", int(m.Mix))
	}

	w := gguf.NewWriter()
	a := m.Arch + "."
	w.SetString("general.architecture", m.Arch)
	if m.Name != "" {
		w.SetString("general.name", m.Name)
	}
	if m.Mix != MixNone {
		w.SetUint32("general.file_type", m.Mix.fileType())
	} else {
		w.SetUint32("general.file_type", fileTypeOf(m.Type))
	}
	if m.Mix != MixNone || m.Type.BlockSize() > 1 {
		w.SetUint32("general.quantization_version", 2)
	}
	w.SetUint32(a+"context_length", uint32(m.ContextLength))
	w.SetUint32(a+"embedding_length", uint32(m.Dim))
	w.SetUint32(a+"block_count", uint32(m.Layers))
	w.SetUint32(a+"feed_forward_length", uint32(m.FFN))
	w.SetUint32(a+"attention.head_count", uint32(m.Heads))
	w.SetUint32(a+"attention.head_count_kv", uint32(m.KVHeads))
	w.SetFloat32(a+"attention.layer_norm_rms_epsilon", float32(m.RMSEps))
	w.SetFloat32(a+"rope.freq_base", float32(m.RopeBase))
	w.SetUint32(a+"rope.dimension_count", uint32(m.RopeDims))
	if m.HeadDim != m.Dim/m.Heads || m.Arch == "qwen3" || moe || gemma {
		// The qwen3 and gemma3 converters always write them.
		w.SetUint32(a+"attention.key_length", uint32(m.HeadDim))
		w.SetUint32(a+"attention.value_length", uint32(m.HeadDim))
	}
	w.SetUint32(a+"vocab_size", uint32(m.Vocab))
	if moe {
		w.SetUint32(a+"expert_count", uint32(m.Experts))
		w.SetUint32(a+"expert_used_count", uint32(m.ExpertsUsed))
		w.SetUint32(a+"expert_feed_forward_length", uint32(m.ExpertFFN))
	}
	if gemma && m.SlidingWindow > 0 {
		w.SetUint32(a+"attention.sliding_window", uint32(m.SlidingWindow))
		w.SetUint32(a+"attention.sliding_window_pattern", uint32(m.SlidingPattern))
		w.SetFloat32(a+"rope.freq_base_swa", float32(m.RopeBaseSWA))
	}

	rng := rand.New(rand.NewPCG(m.Seed, m.Seed^0x9e3779b97f4a7c15))
	normal := func(n int, std float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * std)
		}
		return v
	}
	uniform := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(0.75 + 0.5*rng.Float64())
		}
		return v
	}
	matrix := func(name string, in, out int, g float64) error {
		return w.AddTensor(name, []uint64{uint64(in), uint64(out)}, m.matrixType(name, in), normal(in*out, g/math.Sqrt(float64(in))))
	}
	vec := func(name string, v []float32) error {
		return w.AddTensor(name, []uint64{uint64(len(v))}, gguf.TypeF32, v)
	}
	embStd := 1.0
	if m.Tied {
		embStd = 1.0 / 16
	}
	emb := normal(m.Dim*m.Vocab, embStd)
	if err := w.AddTensor("token_embd.weight", []uint64{uint64(m.Dim), uint64(m.Vocab)}, m.matrixType("token_embd.weight", m.Dim), emb); err != nil {
		return nil, err
	}
	experts := func(name string, in, out int, g float64) error {
		dims := []uint64{uint64(in), uint64(out), uint64(m.Experts)}
		return w.AddTensor(name, dims, m.matrixType(name, in), normal(in*out*m.Experts, g/math.Sqrt(float64(in))))
	}
	q, kv := m.Heads*m.HeadDim, m.KVHeads*m.HeadDim
	for l := range m.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		errs := []error{vec(p+"attn_norm.weight", uniform(m.Dim))}
		if m.Arch == "phi3" {
			errs = append(errs, matrix(p+"attn_qkv.weight", m.Dim, q+2*kv, 1))
		} else {
			errs = append(errs,
				matrix(p+"attn_q.weight", m.Dim, q, 1),
				matrix(p+"attn_k.weight", m.Dim, kv, 1),
				matrix(p+"attn_v.weight", m.Dim, kv, 1))
		}
		switch m.Arch {
		case "qwen2":
			errs = append(errs,
				vec(p+"attn_q.bias", normal(q, 0.1)),
				vec(p+"attn_k.bias", normal(kv, 0.1)),
				vec(p+"attn_v.bias", normal(kv, 0.1)))
		case "qwen3", "qwen3moe", "gemma3":
			errs = append(errs,
				vec(p+"attn_q_norm.weight", uniform(m.HeadDim)),
				vec(p+"attn_k_norm.weight", uniform(m.HeadDim)))
		}
		errs = append(errs,
			matrix(p+"attn_output.weight", q, m.Dim, 0.5),
			vec(p+"ffn_norm.weight", uniform(m.Dim)))
		if gemma {
			errs = append(errs,
				vec(p+"post_attention_norm.weight", uniform(m.Dim)),
				vec(p+"post_ffw_norm.weight", uniform(m.Dim)))
		}
		switch m.Arch {
		case "qwen3moe":
			errs = append(errs,
				w.AddTensor(p+"ffn_gate_inp.weight", []uint64{uint64(m.Dim), uint64(m.Experts)}, gguf.TypeF32,
					normal(m.Dim*m.Experts, 2/math.Sqrt(float64(m.Dim)))),
				experts(p+"ffn_gate_exps.weight", m.Dim, m.ExpertFFN, 1),
				experts(p+"ffn_up_exps.weight", m.Dim, m.ExpertFFN, 1),
				experts(p+"ffn_down_exps.weight", m.ExpertFFN, m.Dim, 0.5))
		case "phi3":
			errs = append(errs,
				matrix(p+"ffn_up.weight", m.Dim, 2*m.FFN, 1),
				matrix(p+"ffn_down.weight", m.FFN, m.Dim, 0.5))
		default:
			errs = append(errs,
				matrix(p+"ffn_gate.weight", m.Dim, m.FFN, 1),
				matrix(p+"ffn_up.weight", m.Dim, m.FFN, 1),
				matrix(p+"ffn_down.weight", m.FFN, m.Dim, 0.5))
		}
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
	}
	if err := vec("output_norm.weight", uniform(m.Dim)); err != nil {
		return nil, err
	}
	if !m.Tied {
		if err := matrix("output.weight", m.Dim, m.Vocab, 1); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// rowType returns the type to store rows of length n as when t was
// asked for: llama-quantize's fallbacks for rows that are not whole blocks
// (Q2_K and Q3_K to Q4_0, Q4_K to Q5_0, Q6_K to Q8_0, IQ4_XS to IQ4_NL),
// then F16. Q5_K falls back to Q5_0, not llama-quantize's Q5_1, which
// this project does not support.
func rowType(t gguf.TensorType, n int) gguf.TensorType {
	if n%t.BlockSize() == 0 {
		return t
	}
	switch t {
	case gguf.TypeQ2_K, gguf.TypeQ3_K:
		return rowType(gguf.TypeQ4_0, n)
	case gguf.TypeQ4_K, gguf.TypeQ5_K:
		return rowType(gguf.TypeQ5_0, n)
	case gguf.TypeQ6_K:
		return rowType(gguf.TypeQ8_0, n)
	case gguf.TypeIQ4_XS:
		return rowType(gguf.TypeIQ4_NL, n)
	}
	return gguf.TypeF16
}

// fileTypeOf returns the general.file_type (llama_ftype) of a model
// whose matrices are mostly of type t.
func fileTypeOf(t gguf.TensorType) uint32 {
	switch t {
	case gguf.TypeF32:
		return 0
	case gguf.TypeF16:
		return 1
	case gguf.TypeQ4_0:
		return 2
	case gguf.TypeQ8_0:
		return 7
	case gguf.TypeQ5_0:
		return 8
	case gguf.TypeQ2_K:
		return 10
	case gguf.TypeQ3_K:
		return 11 // Q3_K_S
	case gguf.TypeQ4_K:
		return 14 // Q4_K_S
	case gguf.TypeQ5_K:
		return 16 // Q5_K_S
	case gguf.TypeQ6_K:
		return 18
	case gguf.TypeIQ4_NL:
		return 25
	case gguf.TypeIQ4_XS:
		return 30
	case gguf.TypeBF16:
		return 32
	}
	return 0
}
