package sim

import (
	"fmt"
	"strings"
)

// Model is a model profile: the shape of a decoder-only transformer with
// grouped-query attention. Its ID always starts with "sim/".
type Model struct {
	// ID is the model id served, e.g. "sim/flagship".
	ID string
	// Layers is the number of transformer blocks.
	Layers int
	// HiddenSize is the residual stream width.
	HiddenSize int
	// Heads is the number of attention (query) heads.
	Heads int
	// KVHeads is the number of key/value heads (grouped-query attention).
	KVHeads int
	// HeadDim is the dimension of one attention head.
	HeadDim int
	// FFNSize is the intermediate size of the (gated) MLP.
	FFNSize int
	// VocabSize is the number of token ids.
	VocabSize int
	// Params is the number of parameters, embeddings included.
	Params int64
	// WeightDTypeBytes is the size of one weight in bytes: 1 for FP8, 2
	// for BF16.
	WeightDTypeBytes int
	// KVDTypeBytes is the size of one K or V element in the cache in
	// bytes: 2 for FP16/BF16, 1 for FP8.
	KVDTypeBytes int
	// ContextLength is the most tokens (prompt plus output) one sequence
	// may hold.
	ContextLength int

	// Experts is the number of feed-forward experts per layer of a
	// mixture-of-experts model, 0 for a dense one. Each token goes to
	// ExpertsUsed of them, each a gated MLP of ExpertFFNSize (FFNSize is
	// then unused): a step reads only the experts its tokens go to.
	Experts, ExpertsUsed, ExpertFFNSize int
	// SlidingWindow is the number of positions a sliding-window layer
	// attends to, 0 for none; with it, layer l slides when
	// l % SlidingPattern < SlidingPattern−1 (Gemma 3: every 6th layer is
	// global). A sliding layer reads at most SlidingWindow tokens of KV.
	SlidingWindow, SlidingPattern int
}

// KVBytesPerToken is the KV cache one token takes across all layers and
// GPUs, in bytes: K and V, for every layer and KV head.
func (m Model) KVBytesPerToken() int64 {
	return 2 * int64(m.Layers) * int64(m.KVHeads) * int64(m.HeadDim) * int64(m.KVDTypeBytes)
}

// WeightBytes is the size of the weights in bytes.
func (m Model) WeightBytes() int64 {
	return m.Params * int64(m.WeightDTypeBytes)
}

// Validate reports the first problem with m's shape, if any.
func (m Model) Validate() error {
	switch {
	case !strings.HasPrefix(m.ID, modelPrefix) || len(m.ID) == len(modelPrefix):
		return fmt.Errorf("sim: model id %q must start with %q", m.ID, modelPrefix)
	case m.Layers < 1, m.HiddenSize < 1, m.Heads < 1, m.KVHeads < 1, m.HeadDim < 1, m.FFNSize < 1, m.Params < 1:
		return fmt.Errorf("sim: model %s: layers, sizes, heads and params must be positive", m.ID)
	case m.Heads%m.KVHeads != 0:
		return fmt.Errorf("sim: model %s: %d heads are not a multiple of %d KV heads", m.ID, m.Heads, m.KVHeads)
	case m.WeightDTypeBytes != 1 && m.WeightDTypeBytes != 2:
		return fmt.Errorf("sim: model %s: weight dtype of %d bytes; want 1 (FP8) or 2 (BF16)", m.ID, m.WeightDTypeBytes)
	case m.KVDTypeBytes != 1 && m.KVDTypeBytes != 2:
		return fmt.Errorf("sim: model %s: KV dtype of %d bytes; want 1 (FP8) or 2 (FP16)", m.ID, m.KVDTypeBytes)
	case m.VocabSize < minVocabSize:
		return fmt.Errorf("sim: model %s: vocabulary of %d tokens; want at least %d", m.ID, m.VocabSize, minVocabSize)
	case m.ContextLength < 1:
		return fmt.Errorf("sim: model %s: context length %d must be positive", m.ID, m.ContextLength)
	case m.Experts < 0 || m.Experts > 0 && (m.ExpertsUsed < 1 || m.ExpertsUsed > m.Experts || m.ExpertFFNSize < 1):
		return fmt.Errorf("sim: model %s: %d experts, %d used, %d wide: want 1 to the experts used and a positive width", m.ID, m.Experts, m.ExpertsUsed, m.ExpertFFNSize)
	case m.SlidingWindow < 0 || m.SlidingWindow > 0 && m.SlidingPattern < 1:
		return fmt.Errorf("sim: model %s: sliding window %d with pattern %d: want a window of 0 or more and a pattern of 1 or more", m.ID, m.SlidingWindow, m.SlidingPattern)
	}
	return nil
}

// modelPrefix starts every simulated model id.
const modelPrefix = "sim/"

// models are the built-in profiles by short name, in modelNames order.
// Params follow from the shape (embeddings and LM head untied, see
// countParams).
var models = map[string]Model{
	// small: Llama-3.1-8B-like, BF16 weights.
	"small": {
		ID:               "sim/small",
		Layers:           32,
		HiddenSize:       4096,
		Heads:            32,
		KVHeads:          8,
		HeadDim:          128,
		FFNSize:          14336,
		VocabSize:        128256,
		Params:           8_030_261_248,
		WeightDTypeBytes: 2,
		KVDTypeBytes:     2,
		ContextLength:    32768,
	},
	// mid: Qwen2.5-32B-like, BF16 weights.
	"mid": {
		ID:               "sim/mid",
		Layers:           64,
		HiddenSize:       5120,
		Heads:            40,
		KVHeads:          8,
		HeadDim:          128,
		FFNSize:          27648,
		VocabSize:        152064,
		Params:           32_763_876_352,
		WeightDTypeBytes: 2,
		KVDTypeBytes:     2,
		ContextLength:    32768,
	},
	// flagship: Llama-3.1-70B-like, FP8 weights, FP16 KV cache (327,680
	// bytes per token).
	"flagship": {
		ID:               "sim/flagship",
		Layers:           80,
		HiddenSize:       8192,
		Heads:            64,
		KVHeads:          8,
		HeadDim:          128,
		FFNSize:          28672,
		VocabSize:        128256,
		Params:           70_553_706_496,
		WeightDTypeBytes: 1,
		KVDTypeBytes:     2,
		ContextLength:    32768,
	},
	// llama3-405b: Llama-3.1-405B-like, FP8 weights (Meta's official FP8
	// checkpoint), FP16 KV cache; needs 8 H100s.
	"llama3-405b": {
		ID:               "sim/llama3-405b",
		Layers:           126,
		HiddenSize:       16384,
		Heads:            128,
		KVHeads:          8,
		HeadDim:          128,
		FFNSize:          53248,
		VocabSize:        128256,
		Params:           405_853_388_800,
		WeightDTypeBytes: 1,
		KVDTypeBytes:     2,
		ContextLength:    32768,
	},
	// moe: Qwen3-30B-A3B-like, BF16 weights: 128 experts of 768, 8 used
	// per token, so a token multiplies by about 3.3B of the 30.5B weights.
	"moe": {
		ID:               "sim/moe",
		Layers:           48,
		HiddenSize:       2048,
		Heads:            32,
		KVHeads:          4,
		HeadDim:          128,
		FFNSize:          6144,
		VocabSize:        151936,
		Params:           30_532_110_336,
		WeightDTypeBytes: 2,
		KVDTypeBytes:     2,
		ContextLength:    32768,
		Experts:          128,
		ExpertsUsed:      8,
		ExpertFFNSize:    768,
	},
	// gemma3-27b: Gemma-3-27B-like, BF16 weights; five of every six
	// layers attend over a 1024-token window. Params counts an untied LM
	// head like the other profiles (Gemma ties it: 27.0B).
	"gemma3-27b": {
		ID:               "sim/gemma3-27b",
		Layers:           62,
		HiddenSize:       5376,
		Heads:            32,
		KVHeads:          16,
		HeadDim:          128,
		FFNSize:          21504,
		VocabSize:        262144,
		Params:           28_417_605_888,
		WeightDTypeBytes: 2,
		KVDTypeBytes:     2,
		ContextLength:    32768,
		SlidingWindow:    1024,
		SlidingPattern:   6,
	},
	// llama2-7b: Llama-2-7B-like (meta-llama/Llama-2-7b-hf), FP16
	// weights; full multi-head attention (32 KV heads, 524,288 bytes of
	// KV a token) and a 4,096-token context. Used by the calibration
	// against vLLM's published throughput (internal/fleet).
	"llama2-7b": {
		ID:               "sim/llama2-7b",
		Layers:           32,
		HiddenSize:       4096,
		Heads:            32,
		KVHeads:          32,
		HeadDim:          128,
		FFNSize:          11008,
		VocabSize:        32000,
		Params:           6_738_415_616,
		WeightDTypeBytes: 2,
		KVDTypeBytes:     2,
		ContextLength:    4096,
	},
}

var modelNames = []string{"small", "mid", "flagship", "llama3-405b", "llama2-7b", "moe", "gemma3-27b"}

// ModelNames returns the short names of the built-in model profiles: the
// general ones smallest first, then those added for calibration
// (llama2-7b); ModelByName accepts them with or without the "sim/" prefix.
// The caller owns the returned slice.
func ModelNames() []string {
	return append([]string(nil), modelNames...)
}

// ModelByName returns the built-in model profile named name ("small",
// "mid", "flagship", "llama3-405b", "llama2-7b", "moe" or "gemma3-27b",
// with or without the
// "sim/" prefix, case-insensitive).
func ModelByName(name string) (Model, error) {
	key := strings.TrimPrefix(strings.ToLower(strings.TrimSpace(name)), modelPrefix)
	if m, ok := models[key]; ok {
		return m, nil
	}
	return Model{}, fmt.Errorf("sim: unknown model %q (known: %s)", name, strings.Join(modelNames, ", "))
}

// countParams counts the parameters of m's shape: token embeddings and an
// untied LM head, attention (Q, K, V, O without biases), a gated MLP (gate,
// up, down; or a router and the experts' MLPs) and two RMSNorms per layer,
// and a final norm.
func countParams(m Model) int64 {
	h, kvDim, qDim := int64(m.HiddenSize), int64(m.KVHeads*m.HeadDim), int64(m.Heads*m.HeadDim)
	attn := h*qDim + 2*h*kvDim + qDim*h
	mlp := 3 * h * int64(m.FFNSize)
	if m.Experts > 0 {
		mlp = int64(m.Experts)*m.expertParams() + h*int64(m.Experts)
	}
	perLayer := attn + mlp + 2*h
	return 2*int64(m.VocabSize)*h + int64(m.Layers)*perLayer + h
}
