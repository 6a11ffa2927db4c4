package cpu

import (
	"encoding/binary"
	"math"

	"github.com/llmd/llmd/model/gguf"
)

// The KV cache's block quantizers and the portable dequantizers. The
// layouts are GGUF's: a Q8_0 block is an f16 scale d then 32 int8 values
// (34 bytes), value = d·q; a Q4_0 block is an f16 scale d then 16 bytes
// whose low nibbles are values 0..15 and high nibbles values 16..31, value
// = d·(q−8) (18 bytes). The quantizers round as ggml's reference ones do,
// so a cached row has the bytes llama.cpp would store for it.

// quantRowQ8_0 quantizes src (a multiple of 32 values) into Q8_0 blocks in
// dst: d = max|x|/127, q = round(x/d) half away from zero.
func quantRowQ8_0(dst []byte, src []float32) {
	for b := 0; b < len(src)/32; b++ {
		x, o := src[32*b:32*b+32], dst[34*b:34*b+34]
		var amax float32
		for _, v := range x {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(o, gguf.Float32ToHalf(d))
		for j, v := range x {
			// |v·id| <= 127 (up to rounding of id): clamp for safety.
			q := math.Round(float64(v * id))
			o[2+j] = byte(int8(max(-128, min(127, q))))
		}
	}
}

// quantRowQ4_0 quantizes src (a multiple of 32 values) into Q4_0 blocks in
// dst: m is the value of largest magnitude (its sign kept), d = m/−8, and
// q = min(15, trunc(x/d + 8.5)).
func quantRowQ4_0(dst []byte, src []float32) {
	for b := 0; b < len(src)/32; b++ {
		x, o := src[32*b:32*b+32], dst[18*b:18*b+18]
		var m, amax float32
		for _, v := range x {
			if a := float32(math.Abs(float64(v))); a > amax {
				amax, m = a, v
			}
		}
		d := m / -8
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(o, gguf.Float32ToHalf(d))
		for j := range 16 {
			lo := min(15, max(0, int32(x[j]*id+8.5)))
			hi := min(15, max(0, int32(x[j+16]*id+8.5)))
			o[2+j] = byte(lo) | byte(hi)<<4
		}
	}
}

// dequantQ8_0Go decodes the Q8_0 blocks of src into dst, 32 values each.
func dequantQ8_0Go(dst []float32, src []byte) {
	for b := 0; b < len(dst)/32; b++ {
		blk := src[34*b : 34*b+34]
		d := kernHalf(blk)
		y := dst[32*b : 32*b+32]
		for j, q := range blk[2:34] {
			y[j] = d * float32(int8(q))
		}
	}
}

// dequantQ4_0Go decodes the Q4_0 blocks of src into dst, 32 values each.
func dequantQ4_0Go(dst []float32, src []byte) {
	for b := 0; b < len(dst)/32; b++ {
		blk := src[18*b : 18*b+18]
		d := kernHalf(blk)
		y := dst[32*b : 32*b+32]
		for j, q := range blk[2:18] {
			y[j] = d * float32(int32(q&15)-8)
			y[j+16] = d * float32(int32(q>>4)-8)
		}
	}
}
