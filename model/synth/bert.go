package synth

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/llmd/llmd/model/gguf"
)

// encoderPooling maps Model.Pooling to llama.cpp's pooling_type values.
var encoderPooling = map[string]uint32{"": 1, "mean": 1, "cls": 2, "last": 3}

// encoderWriter writes an embedding encoder as llama.cpp's converters lay
// bert and nomic-bert out: token_embd, token_types (two rows), for bert
// position_embd (ContextLength rows), token_embd_norm (weight and bias);
// per layer bert's attn_q, attn_k and attn_v with biases, attn_output
// with bias, ffn_up and ffn_down with biases (a GELU FFN), or
// nomic-bert's fused attn_qkv, attn_output, ffn_up, ffn_gate and ffn_down
// without biases (SwiGLU, RoPE); attn_output_norm and layer_output_norm
// (weight and bias) in both. Metadata: attention.layer_norm_epsilon
// (1e-12), attention.causal false, pooling_type, for nomic-bert
// rope.freq_base (1000), tokenizer.ggml.token_type_count 2, and
// <arch>.matryoshka when set. ContextLength defaults to 512.
//
// Matrices are N(0, 1/fan_in), biases N(0, 0.1²), norm weights
// U(0.75, 1.25) and norm biases N(0, 0.1²); token_embd, token_types and
// position_embd are N(0, 1) (position_embd and token_types scaled by 0.5).
func (m Model) encoderWriter() (*gguf.Writer, error) {
	pool, ok := encoderPooling[m.Pooling]
	if !ok {
		return nil, fmt.Errorf("model: random model: pooling %q is not one of mean, cls, last", m.Pooling)
	}
	if m.ContextLength == 0 {
		m.ContextLength = 512
	}
	if m.KVHeads == 0 {
		m.KVHeads = m.Heads
	}
	if m.RopeBase == 0 {
		m.RopeBase = 1000
	}
	const maxSide = 1 << 20
	for _, c := range []struct {
		name string
		v    int
	}{{"dim", m.Dim}, {"layers", m.Layers}, {"heads", m.Heads}, {"ffn", m.FFN}, {"vocab", m.Vocab}, {"context", m.ContextLength}} {
		if c.v <= 0 || c.v > maxSide {
			return nil, fmt.Errorf("model: random model: %s %d out of range (1 to %d)", c.name, c.v, maxSide)
		}
	}
	if m.Layers > 1024 || m.Dim%m.Heads != 0 || m.KVHeads != m.Heads || (m.Dim/m.Heads)%2 != 0 ||
		(m.HeadDim != 0 && m.HeadDim != m.Dim/m.Heads) {
		return nil, fmt.Errorf("model: random model: %s wants layers <= 1024, a dim (%d) of an even width per head (%d heads), as many kv heads and no other head dim", m.Arch, m.Dim, m.Heads)
	}
	if !m.Type.Supported() {
		return nil, &gguf.UnsupportedTypeError{Type: uint32(m.Type)}
	}
	nomic := m.Arch == "nomic-bert"

	w := gguf.NewWriter()
	a := m.Arch + "."
	w.SetString("general.architecture", m.Arch)
	if m.Name != "" {
		w.SetString("general.name", m.Name)
	}
	w.SetUint32("general.file_type", fileTypeOf(m.Type))
	if m.Type.BlockSize() > 1 {
		w.SetUint32("general.quantization_version", 2)
	}
	w.SetUint32(a+"context_length", uint32(m.ContextLength))
	w.SetUint32(a+"embedding_length", uint32(m.Dim))
	w.SetUint32(a+"block_count", uint32(m.Layers))
	w.SetUint32(a+"feed_forward_length", uint32(m.FFN))
	w.SetUint32(a+"attention.head_count", uint32(m.Heads))
	w.SetFloat32(a+"attention.layer_norm_epsilon", 1e-12)
	w.SetBool(a+"attention.causal", false)
	w.SetUint32(a+"pooling_type", pool)
	if nomic {
		w.SetFloat32(a+"rope.freq_base", float32(m.RopeBase))
	}
	if m.Matryoshka {
		w.SetBool(a+"matryoshka", true)
	}
	w.SetUint32("tokenizer.ggml.token_type_count", 2)

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
	matrix := func(name string, in, out int, std float64) error {
		return w.AddTensor(name, []uint64{uint64(in), uint64(out)}, rowType(m.Type, in), normal(in*out, std))
	}
	vec := func(name string, v []float32) error {
		return w.AddTensor(name, []uint64{uint64(len(v))}, gguf.TypeF32, v)
	}
	norm := func(name string) error {
		return errors.Join(vec(name+".weight", uniform(m.Dim)), vec(name+".bias", normal(m.Dim, 0.1)))
	}
	fan := func(in int) float64 { return 1 / math.Sqrt(float64(in)) }
	errs := []error{
		matrix("token_embd.weight", m.Dim, m.Vocab, 1),
		w.AddTensor("token_types.weight", []uint64{uint64(m.Dim), 2}, gguf.TypeF32, normal(2*m.Dim, 0.5)),
	}
	if !nomic {
		errs = append(errs, matrix("position_embd.weight", m.Dim, m.ContextLength, 0.5))
	}
	errs = append(errs, norm("token_embd_norm"))
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for l := range m.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		var errs []error
		if nomic {
			errs = append(errs, matrix(p+"attn_qkv.weight", m.Dim, 3*m.Dim, fan(m.Dim)))
		} else {
			errs = append(errs,
				matrix(p+"attn_q.weight", m.Dim, m.Dim, fan(m.Dim)), vec(p+"attn_q.bias", normal(m.Dim, 0.1)),
				matrix(p+"attn_k.weight", m.Dim, m.Dim, fan(m.Dim)), vec(p+"attn_k.bias", normal(m.Dim, 0.1)),
				matrix(p+"attn_v.weight", m.Dim, m.Dim, fan(m.Dim)), vec(p+"attn_v.bias", normal(m.Dim, 0.1)))
		}
		errs = append(errs, matrix(p+"attn_output.weight", m.Dim, m.Dim, fan(m.Dim)))
		if !nomic {
			errs = append(errs, vec(p+"attn_output.bias", normal(m.Dim, 0.1)))
		}
		errs = append(errs, norm(p+"attn_output_norm"), matrix(p+"ffn_up.weight", m.Dim, m.FFN, fan(m.Dim)))
		if nomic {
			errs = append(errs, matrix(p+"ffn_gate.weight", m.Dim, m.FFN, fan(m.Dim)))
		} else {
			errs = append(errs, vec(p+"ffn_up.bias", normal(m.FFN, 0.1)))
		}
		errs = append(errs, matrix(p+"ffn_down.weight", m.FFN, m.Dim, fan(m.FFN)))
		if !nomic {
			errs = append(errs, vec(p+"ffn_down.bias", normal(m.Dim, 0.1)))
		}
		errs = append(errs, norm(p+"layer_output_norm"))
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
	}
	return w, nil
}
