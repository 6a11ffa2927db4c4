package cpu

import (
	"math"
	"sync"

	"github.com/llmd/llmd/model/gguf"
)

// geluTable holds GELU (tanh approximation) of every half float, rounded
// to a half float and widened back to float32: ggml's CPU evaluates GELU
// this way (its F16 lookup table), so the executor does too, to give the
// activations llama.cpp gives. Built on first use (256 KiB).
var geluTable = sync.OnceValue(func() []float32 {
	t := make([]float32, 1<<16)
	for i := range t {
		x := gguf.HalfToFloat32(uint16(i))
		t[i] = gguf.HalfToFloat32(gguf.Float32ToHalf(geluTanh(x)))
	}
	return t
})

// geluTanh is 0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²))) in float32
// arithmetic, tanh taken in float64 and rounded.
func geluTanh(x float32) float32 {
	const (
		coefA       = float32(0.044715)
		sqrt2OverPi = float32(0.79788456080286535587989211986876)
	)
	th := float32(math.Tanh(float64(sqrt2OverPi * x * (1 + coefA*x*x))))
	return 0.5 * x * (1 + th)
}

// gegluGo writes gelu(gate)·up into gate. GELU is read from geluTable at
// gate rounded to a half float; below −10 it is 0 and from 10 on it is
// the input itself, as in ggml.
func gegluGo(gate, up []float32) {
	up = up[:len(gate)]
	tab := geluTable()
	for i, g := range gate {
		var y float32
		switch {
		case g <= -10:
			y = 0
		case g >= 10:
			y = g
		default:
			y = tab[gguf.Float32ToHalf(g)]
		}
		gate[i] = y * up[i]
	}
}

// headNorm applies RMSNorm with weight w (headDim values) to each of the
// heads of x independently, in place: qwen3's and gemma3's q/k norms.
func headNorm(x []float32, heads int, w []float32, eps float64) {
	hd := len(w)
	for h := range heads {
		v := x[h*hd : (h+1)*hd]
		scale := float32(1 / math.Sqrt(sumSquares(v)/float64(hd)+eps))
		for i, a := range v {
			v[i] = a * scale * w[i]
		}
	}
}

// sumSquares returns Σ x², added in float64 in four chains (i mod 4, then
// (0+1)+(2+3)): one chain waits on each add, four keep the adder busy, so
// a norm of a few thousand values costs a quarter of the time.
func sumSquares(x []float32) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		v := x[i : i+4 : i+4]
		s0 += float64(v[0]) * float64(v[0])
		s1 += float64(v[1]) * float64(v[1])
		s2 += float64(v[2]) * float64(v[2])
		s3 += float64(v[3]) * float64(v[3])
	}
	for ; i < len(x); i++ {
		s0 += float64(x[i]) * float64(x[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// softcap replaces each x by c·tanh(x/c).
func softcap(x []float32, c float32) {
	for i, v := range x {
		x[i] = c * float32(math.Tanh(float64(v/c)))
	}
}
