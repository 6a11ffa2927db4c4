package synth

import (
	"fmt"
	"strings"

	"github.com/llmd/llmd/model/gguf"
)

// Mix is a llama.cpp quantization mixture (a llama_ftype such as
// LLAMA_FTYPE_MOSTLY_Q4_K_M): a default type for the matrices and per-tensor
// exceptions, as llama-quantize chooses them (llama_tensor_get_type_impl in
// llama.cpp's src/llama-quant.cpp) for a dense model that is not Falcon
// and not 70B-sized. The zero Mix is none: every matrix is Model.Type.
type Mix int

// The mixtures Model can write.
const (
	MixNone Mix = iota
	MixQ3_K_M
	MixQ4_K_M
	MixQ5_K_M
)

var mixNames = map[Mix]string{MixQ3_K_M: "Q3_K_M", MixQ4_K_M: "Q4_K_M", MixQ5_K_M: "Q5_K_M"}

// String returns llama.cpp's name of x ("Q4_K_M"), or "none".
func (x Mix) String() string {
	if n, ok := mixNames[x]; ok {
		return n
	}
	return "none"
}

// ParseMix returns the mixture named name in any case ("q4_k_m"), or false
// when name is none of them.
func ParseMix(name string) (Mix, bool) {
	for x, n := range mixNames {
		if strings.EqualFold(n, name) {
			return x, true
		}
	}
	return MixNone, false
}

// ParseType parses a model type as llmctl model init takes it: a tensor
// type ("q4_k": every matrix that type, falling back per row length) or a
// mixture ("q4_k_m"). Exactly one of the results is set.
func ParseType(name string) (gguf.TensorType, Mix, error) {
	if x, ok := ParseMix(name); ok {
		return 0, x, nil
	}
	t, err := gguf.ParseTensorType(name)
	if err != nil {
		return 0, MixNone, fmt.Errorf("%w, or a mixture: q3_k_m, q4_k_m, q5_k_m", err)
	}
	return t, MixNone, nil
}

// base returns the mixture's default matrix type.
func (x Mix) base() gguf.TensorType {
	switch x {
	case MixQ3_K_M:
		return gguf.TypeQ3_K
	case MixQ5_K_M:
		return gguf.TypeQ5_K
	}
	return gguf.TypeQ4_K
}

// fileType returns the mixture's general.file_type (llama_ftype).
func (x Mix) fileType() uint32 {
	switch x {
	case MixQ3_K_M:
		return 12
	case MixQ4_K_M:
		return 15
	case MixQ5_K_M:
		return 17
	}
	return 0
}

// mixUseMoreBits is llama-quantize's use_more_bits: the first and last
// eighth of the layers and every third one between get more bits.
func mixUseMoreBits(layer, layers int) bool {
	return layer < layers/8 || layer >= 7*layers/8 || (layer-layers/8)%3 == 2
}

// tensorType returns the type of matrix role ("attn_v", "ffn_down",
// "output", ...) in layer (of layers) whose rows hold in values; tiedEmbd
// marks a token_embd that is also the output. Rows that are not whole
// blocks of the choice fall back as llama-quantize's do (rowType).
func (x Mix) tensorType(role string, layer, layers, in int, tiedEmbd bool) gguf.TensorType {
	t := x.base()
	switch {
	case role == "output" || tiedEmbd:
		// llama-quantize checks the row against the default type's block.
		if in%t.BlockSize() != 0 {
			return gguf.TypeQ8_0
		}
		t = gguf.TypeQ6_K
	case role == "attn_v":
		switch {
		case x == MixQ3_K_M && layer < 2:
			t = gguf.TypeQ5_K
		case x == MixQ3_K_M:
			t = gguf.TypeQ4_K
		case mixUseMoreBits(layer, layers):
			t = gguf.TypeQ6_K
		}
	case role == "ffn_down":
		switch {
		case x == MixQ3_K_M && layer < layers/16:
			t = gguf.TypeQ5_K
		case x == MixQ3_K_M:
			t = gguf.TypeQ4_K
		case mixUseMoreBits(layer, layers):
			t = gguf.TypeQ6_K
		}
	case role == "attn_output" && x == MixQ3_K_M:
		t = gguf.TypeQ4_K
	}
	return rowType(t, in)
}

// matrixType returns the type of the matrix called name ("token_embd.weight",
// "blk.3.attn_v.weight") whose rows hold in values: Model.Type, or the
// mixture's choice.
func (m Model) matrixType(name string, in int) gguf.TensorType {
	if m.Mix == MixNone {
		return rowType(m.Type, in)
	}
	role, layer := strings.TrimSuffix(name, ".weight"), 0
	var rest string
	if n, err := fmt.Sscanf(role, "blk.%d.%s", &layer, &rest); n == 2 && err == nil {
		role = rest
	}
	return m.Mix.tensorType(role, layer, m.Layers, in, role == "token_embd" && m.Tied)
}
