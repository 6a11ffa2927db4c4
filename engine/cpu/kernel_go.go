package cpu

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/llmd/llmd/model/gguf"
)

// The portable kernels: plain Go, the reference the SIMD kernels are
// tested against, and what runs on CPUs without them.

func kernGoSet() *kernSet {
	return &kernSet{
		quantize: kernQuantizeGo,
		dotQ: map[gguf.TensorType]func(w []byte, xq []int8, xd, xs []float32) float32{
			gguf.TypeQ4_0: kernDotQ4_0Go,
			gguf.TypeQ5_0: kernDotQ5_0Go,
			gguf.TypeQ8_0: kernDotQ8_0Go,
			gguf.TypeQ4_K: kernDotQ4_KGo,
			gguf.TypeQ6_K: kernDotQ6_KGo,

			gguf.TypeQ2_K:   kernDotQ2_KGo,
			gguf.TypeQ3_K:   kernDotQ3_KGo,
			gguf.TypeQ5_K:   kernDotQ5_KGo,
			gguf.TypeIQ4_NL: kernDotIQ4_NLGo,
			gguf.TypeIQ4_XS: kernDotIQ4_XSGo,
		},
		dotQ4:     map[gguf.TensorType]func(res *[4]float32, w []byte, xq []int8, xd, xs []float32){},
		dotF32:    kernDotF32Go,
		dotF16:    kernDotF16Go,
		toBF16:    kernToBF16Go,
		dotBF16:   kernDotBF16Go,
		f16ToF32:  kernF16ToF32Go,
		bf16ToF32: kernBF16ToF32Go,
		f32ToF16:  kernF32ToF16Go,
	}
}

// kernMinAmax is the smallest block maximum that is quantized; blocks of
// smaller values (below 1e-30, where 127/max would overflow) become zeros.
const kernMinAmax = 1e-30

// kernQuantizeGo quantizes x per 32-value block to int8 with the scale
// d = max|x|/127, rounding half to even: xq = round(x/d), xd = d,
// xs = d·Σxq.
func kernQuantizeGo(xq []int8, xd, xs []float32, x []float32) {
	for b := range xd {
		blk := x[kernQK*b : kernQK*b+kernQK]
		q := xq[kernQK*b : kernQK*b+kernQK]
		var amax float32
		for _, v := range blk {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		var id float32
		if amax >= kernMinAmax {
			id = 127 / amax
		}
		var sum int32
		for j, v := range blk {
			r := int8(math.RoundToEven(float64(v * id)))
			q[j] = r
			sum += int32(r)
		}
		d := amax / 127
		xd[b], xs[b] = d, d*float32(sum)
	}
}

func kernHalf(b []byte) float32 { return kernHalfToFloat32(binary.LittleEndian.Uint16(b)) }

// kernDotQ8_0Go dots Q8_0 blocks {f16 d; i8 qs[32]} with the activations.
func kernDotQ8_0Go(w []byte, xq []int8, xd, _ []float32) float32 {
	var sum float32
	for b := range xd {
		blk := w[34*b : 34*b+34]
		q := blk[2:34]
		x := xq[32*b : 32*b+32]
		var s int32
		for j := range 32 {
			s += int32(int8(q[j])) * int32(x[j])
		}
		sum += kernHalf(blk) * xd[b] * float32(s)
	}
	return sum
}

// kernDotQ4_0Go dots Q4_0 blocks {f16 d; u8 qs[16]} (values q-8, low
// nibbles first) with the activations.
func kernDotQ4_0Go(w []byte, xq []int8, xd, _ []float32) float32 {
	var sum float32
	for b := range xd {
		blk := w[18*b : 18*b+18]
		q := blk[2:18]
		x := xq[32*b : 32*b+32]
		var s int32
		for j := range 16 {
			s += (int32(q[j]&15)-8)*int32(x[j]) + (int32(q[j]>>4)-8)*int32(x[j+16])
		}
		sum += kernHalf(blk) * xd[b] * float32(s)
	}
	return sum
}

// kernDotQ5_0Go dots Q5_0 blocks {f16 d; u32 qh; u8 qs[16]} (values q-16
// with the fifth bits in qh) with the activations.
func kernDotQ5_0Go(w []byte, xq []int8, xd, _ []float32) float32 {
	var sum float32
	for b := range xd {
		blk := w[22*b : 22*b+22]
		qh := binary.LittleEndian.Uint32(blk[2:])
		q := blk[6:22]
		x := xq[32*b : 32*b+32]
		var s int32
		for j := range 16 {
			lo := int32(q[j]&15) | int32(qh>>j&1)<<4
			hi := int32(q[j]>>4) | int32(qh>>(j+16)&1)<<4
			s += (lo-16)*int32(x[j]) + (hi-16)*int32(x[j+16])
		}
		sum += kernHalf(blk) * xd[b] * float32(s)
	}
	return sum
}

// kernQ4KScales unpacks the eight 6-bit scales and mins of a Q4_K block's
// 12 scale bytes (ggml get_scale_min_k4).
func kernQ4KScales(s []byte) (sc, m [8]uint8) {
	for j := range 4 {
		sc[j], m[j] = s[j]&63, s[j+4]&63
		sc[j+4] = s[j+8]&15 | s[j]>>6<<4
		m[j+4] = s[j+8]>>4 | s[j+4]>>6<<4
	}
	return sc, m
}

// kernDotQ4_KGo dots Q4_K blocks {f16 d, dmin; u8 scales[12]; u8 qs[128]}
// with the activations: value = d·sc·q − dmin·m per 32-value sub-block,
// whose minimum term needs the activation block sums xs.
func kernDotQ4_KGo(w []byte, xq []int8, xd, xs []float32) float32 {
	var sum float32
	for sb := range len(xd) / 8 {
		blk := w[144*sb : 144*sb+144]
		d, dmin := kernHalf(blk), kernHalf(blk[2:])
		sc, m := kernQ4KScales(blk[4:16])
		for c := range 4 {
			q := blk[16+32*c : 48+32*c]
			b0, b1 := 8*sb+2*c, 8*sb+2*c+1
			x0, x1 := xq[32*b0:32*b0+32], xq[32*b1:32*b1+32]
			var s0, s1 int32
			for l := range 32 {
				s0 += int32(q[l]&15) * int32(x0[l])
				s1 += int32(q[l]>>4) * int32(x1[l])
			}
			sum += d*(float32(sc[2*c])*xd[b0]*float32(s0)+float32(sc[2*c+1])*xd[b1]*float32(s1)) -
				dmin*(float32(m[2*c])*xs[b0]+float32(m[2*c+1])*xs[b1])
		}
	}
	return sum
}

// kernDotQ6_KGo dots Q6_K blocks {u8 ql[128]; u8 qh[64]; i8 scales[16];
// f16 d} with the activations: value = d·sc·(q−32) per 16-value sub-block.
func kernDotQ6_KGo(w []byte, xq []int8, xd, _ []float32) float32 {
	var sum float32
	for sb := range len(xd) / 8 {
		blk := w[210*sb : 210*sb+210]
		d := kernHalf(blk[208:])
		for h := range 2 {
			ql := blk[64*h : 64*h+64]
			qh := blk[128+32*h : 160+32*h]
			sc := blk[192+8*h : 200+8*h]
			for k := range 4 {
				b := 8*sb + 4*h + k
				x := xq[32*b : 32*b+32]
				qlk := ql[32*(k&1) : 32*(k&1)+32]
				lo, hi := uint(4*(k>>1)), uint(2*k)
				var s int32
				for i := range 2 { // the two 16-value sub-blocks
					qs, hs, xs := qlk[16*i:16*i+16], qh[16*i:16*i+16], x[16*i:16*i+16]
					var si int32
					for l := range 16 {
						si += (int32(qs[l]>>lo&15|(hs[l]>>hi&3)<<4) - 32) * int32(xs[l])
					}
					s += int32(int8(sc[2*k+i])) * si
				}
				sum += d * xd[b] * float32(s)
			}
		}
	}
	return sum
}

// kernDotF32Go returns Σ w[i]·x[i] over len(w) values.
func kernDotF32Go(w, x []float32) float32 {
	x = x[:len(w)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(w); i += 4 {
		s0 += w[i] * x[i]
		s1 += w[i+1] * x[i+1]
		s2 += w[i+2] * x[i+2]
		s3 += w[i+3] * x[i+3]
	}
	for ; i < len(w); i++ {
		s0 += w[i] * x[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// kernHalves views little-endian 16-bit values as uint16s.
func kernHalves(b []byte) []uint16 {
	if len(b) < 2 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)
}

func kernF32ToF16Go(dst []byte, src []float32) {
	dst = dst[:2*len(src)]
	for i, f := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], gguf.Float32ToHalf(f))
	}
}

func kernF16ToF32Go(dst []float32, w []byte) {
	dst = dst[:len(w)/2]
	for i, h := range kernHalves(w) {
		if e := h & 0x7c00; e != 0 && e != 0x7c00 { // kernHalfToFloat32, inlined
			dst[i] = math.Float32frombits(uint32(h&0x8000)<<16 | (uint32(h&0x7fff)<<13 + 112<<23))
		} else {
			dst[i] = kernHalfSpecial(h)
		}
	}
}

// kernHalfToFloat32 is gguf.HalfToFloat32 with the common case, a normal
// half, done in a few integer operations instead of a table lookup.
func kernHalfToFloat32(h uint16) float32 {
	if e := h & 0x7c00; e != 0 && e != 0x7c00 {
		return math.Float32frombits(uint32(h&0x8000)<<16 | (uint32(h&0x7fff)<<13 + 112<<23))
	}
	return kernHalfSpecial(h)
}

// kernHalfSpecial converts a zero, subnormal, infinite or NaN half; apart
// from kernHalfToFloat32 so that that one inlines.
//
//go:noinline
func kernHalfSpecial(h uint16) float32 { return gguf.HalfToFloat32(h) }

func kernBF16ToF32Go(dst []float32, w []byte) {
	for i, h := range kernHalves(w) {
		dst[i] = math.Float32frombits(uint32(h) << 16)
	}
}

// kernDotConverted dots a row of 16-bit values with x by converting it in
// stack-sized chunks.
func kernDotConverted(convert func(dst []float32, w []byte), w []byte, x []float32) float32 {
	var buf [512]float32
	var sum float32
	for c0 := 0; c0 < len(w)/2; c0 += len(buf) {
		c1 := min(len(w)/2, c0+len(buf))
		convert(buf[:c1-c0], w[2*c0:2*c1])
		sum += kernDotF32Go(buf[:c1-c0], x[c0:c1])
	}
	return sum
}

func kernDotF16Go(w []byte, x []float32) float32 {
	return kernDotConverted(kernF16ToF32Go, w, x)
}

func kernDotBF16Go(w []byte, x []float32) float32 {
	return kernDotConverted(kernBF16ToF32Go, w, x)
}
