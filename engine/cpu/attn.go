package cpu

import (
	"encoding/binary"
	"math"

	"github.com/llmd/llmd/model/gguf"
)

// attnSet is one implementation of the attention kernels: the inner loops
// of attend over one block of one KV head for one query head. Every
// function takes exactly sized slices. Keys and values are F32 or F16
// (little-endian half floats as bytes, as the cache holds them).
//
// Bits: within a level, the F16 kernels give exactly the bits of the F32
// kernels on the converted values (the conversion is exact and they add in
// the same order), so attend may convert a block once or read it in place
// as it likes; and each score or output element depends only on its own
// query and the block, never on how many other queries or keys a call
// covers, so attention stays batch-invariant. Levels differ in the order
// of their additions (a few ulps).
type attnSet struct {
	// dotsF32 and dotsF16 set s[j] = scale·Σ_i q[i]·k[j·hd+i] for the
	// len(s) keys of k, hd = len(q).
	dotsF32 func(s, q, k []float32, scale float32)
	dotsF16 func(s, q []float32, k []byte, scale float32)
	// expSum sets s[j] = e^(s[j]-m) (as expNeg, bit for bit: s[j] <= m)
	// and returns Σ s[j].
	expSum func(s []float32, m float32) float32
	// max returns the largest of s, -Inf where s is empty. Maxima are
	// exact, so every level gives the same value (but for a NaN, which
	// makes the softmax NaN anyway, and the sign of a zero largest score,
	// which no exponential sees).
	max func(s []float32) float32
	// accF32 and accF16 set acc[i] = acc[i]·c + Σ_j p[j]·v[j·vd+i] over the
	// len(p) values of v, vd = len(acc), adding j in order.
	accF32 func(acc, p, v []float32, c float32)
	accF16 func(acc, p []float32, v []byte, c float32)
	// swiglu is the feed-forward's activation (swigluGo, bit for bit),
	// here because it takes expSum's exponential.
	swiglu func(gate, up []float32)
	// dequantQ8_0 and dequantQ4_0 decode len(dst)/32 whole GGUF Q8_0 or
	// Q4_0 blocks of src (a quantized KV cache's rows) into dst, d·q per
	// value: exact products, so every level gives the same bits.
	dequantQ8_0 func(dst []float32, src []byte)
	dequantQ4_0 func(dst []float32, src []byte)
}

// attnSets holds each level's attention kernels; like kernSets, levels
// above kernLevelGo are filled in by the architecture's files.
var attnSets = [kernLevelAVX512 + 1]*attnSet{kernLevelGo: {
	dotsF32: attnDotsF32Go,
	dotsF16: attnDotsF16Go,
	expSum:  attnExpSumGo,
	max:     attnMaxGo,
	accF32:  attnAccF32Go,
	accF16:  attnAccF16Go,
	swiglu:  swigluGo,

	dequantQ8_0: dequantQ8_0Go,
	dequantQ4_0: dequantQ4_0Go,
}}

// attnSetFor returns the attention kernels of level l, or of the highest
// level below it that this build has.
func attnSetFor(l kernLevel) *attnSet {
	for ; l > kernLevelGo; l-- {
		if attnSets[l] != nil {
			return attnSets[l]
		}
	}
	return attnSets[kernLevelGo]
}

func attnMaxGo(s []float32) float32 {
	m := float32(math.Inf(-1))
	for _, v := range s {
		m = max(m, v)
	}
	return m
}

func attnDotsF32Go(s, q, k []float32, scale float32) {
	hd := len(q)
	k = k[:len(s)*hd]
	for j := range s {
		kj := k[j*hd : (j+1)*hd]
		var d float32
		for i, v := range q {
			d += v * kj[i]
		}
		s[j] = d * scale
	}
}

func attnDotsF16Go(s, q []float32, k []byte, scale float32) {
	hd := len(q)
	k = k[:2*len(s)*hd]
	for j := range s {
		kj := k[2*j*hd : 2*(j+1)*hd]
		var d float32
		for i, v := range q {
			d += v * attnHalf(kj, i)
		}
		s[j] = d * scale
	}
}

// attnHalf returns the i'th half float of b as a float32.
func attnHalf(b []byte, i int) float32 {
	return gguf.HalfToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
}

func attnExpSumGo(s []float32, m float32) float32 {
	var sum float32
	for j, v := range s {
		p := expNeg(v - m)
		s[j] = p
		sum += p
	}
	return sum
}

func attnAccF32Go(acc, p, v []float32, c float32) {
	vd := len(acc)
	v = v[:len(p)*vd]
	if c != 1 {
		for i := range acc {
			acc[i] *= c
		}
	}
	for j, a := range p {
		axpy(acc, a, v[j*vd:(j+1)*vd])
	}
}

func attnAccF16Go(acc, p []float32, v []byte, c float32) {
	vd := len(acc)
	v = v[:2*len(p)*vd]
	if c != 1 {
		for i := range acc {
			acc[i] *= c
		}
	}
	for j, a := range p {
		vj := v[2*j*vd : 2*(j+1)*vd]
		for i := range acc {
			acc[i] += a * attnHalf(vj, i)
		}
	}
}
