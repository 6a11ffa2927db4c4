package cpu

import (
	"math"

	"github.com/llmd/llmd/model/gguf"
)

// The portable kernels of Q2_K, Q3_K, Q5_K, IQ4_NL and IQ4_XS. They follow
// the models that their SIMD kernels compute, so that those agree with
// them bit for bit. Integer sums are exact, so only the float operations
// and their order matter:
//
//   - The super-block types (Q2_K, Q3_K, Q5_K, IQ4_XS) keep eight float32
//     accumulators, one per 32-value block of a 256-value super-block. Block
//     b's integer dot S (the weights' values times the activations, times
//     the integer sub-block scale of each 16 or 32 values) goes into
//     acc[b] += (d·xd[b])·S, each product rounded to float32 before the sum
//     (never fused: the SIMD kernels multiply, then add). Q2_K's min term
//     M (the sub-block mins times the activations) then comes off as
//     acc[b] −= (dmin·xd[b])·M; Q5_K's, (dmin·m_b)·xs[b], comes off before
//     the super-block's dots.
//   - IQ4_NL (32-value blocks, any count) takes each group of eight blocks
//     as a super-block, block b of the group into acc[b] with its own d;
//     each block after the last group goes in by lanes: its integer dot
//     by lanes, lane l the sum over values 4l..4l+3, into
//     acc[l] += (d·xd[b])·S[l].
//   - The result is ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)), hsumps's order.

// kernLaneAcc holds the eight float32 accumulators.
type kernLaneAcc [8]float32

// add adds f·s[l] to each lane, rounding the product first.
func (a *kernLaneAcc) add(f float32, s *[8]int32) {
	for l, v := range s {
		a[l] += float32(f * float32(v))
	}
}

func (a *kernLaneAcc) sum() float32 {
	return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))
}

// kernBlockDot returns sc0·Σ w[k]·x[k] over the first 16 values plus sc1
// times the sum over the last 16.
func kernBlockDot(w *[32]int32, x []int8, sc0, sc1 int32) int32 {
	x = x[:32]
	var s0, s1 int32
	for k := range 16 {
		s0 += w[k] * int32(x[k])
		s1 += w[k+16] * int32(x[k+16])
	}
	return sc0*s0 + sc1*s1
}

// kernLaneDot sets s[l] to sc[l/4]·Σ w[k]·x[k] over k in 4l..4l+3: the
// lanes of a 32-value block whose two 16-value halves have the integer
// scales sc[0] and sc[1].
func kernLaneDot(s *[8]int32, w *[32]int32, x []int8, sc0, sc1 int32) {
	x = x[:32]
	for l := range 8 {
		var v int32
		for k := 4 * l; k < 4*l+4; k++ {
			v += w[k] * int32(x[k])
		}
		if l < 4 {
			s[l] = sc0 * v
		} else {
			s[l] = sc1 * v
		}
	}
}

// kernDotQ2_KGo dots Q2_K blocks {u8 scales[16]; u8 qs[64]; f16 d, dmin}
// with the activations: value = d·(sc&15)·q − dmin·(sc>>4) per 16 values.
// 32-value block b of a super-block is bits 2(b%4).. of qs[32(b/4):][:32],
// with the scales of sub-blocks 2b and 2b+1.
func kernDotQ2_KGo(w []byte, xq []int8, xd, _ []float32) float32 {
	var acc kernLaneAcc
	var v, ones [32]int32
	for k := range ones {
		ones[k] = 1
	}
	for sb := range len(xd) / 8 {
		blk := w[84*sb : 84*sb+84]
		d, dmin := kernHalf(blk[80:]), kernHalf(blk[82:])
		for b := range 8 {
			q := blk[16+32*(b/4) : 48+32*(b/4)]
			for k := range 32 {
				v[k] = int32(q[k] >> (2 * (b % 4)) & 3)
			}
			x := xq[32*(8*sb+b) : 32*(8*sb+b)+32]
			sc0, sc1 := blk[2*b], blk[2*b+1]
			s := kernBlockDot(&v, x, int32(sc0&15), int32(sc1&15))
			m := kernBlockDot(&ones, x, int32(sc0>>4), int32(sc1>>4))
			xdb := xd[8*sb+b]
			acc[b] += float32(float32(d*xdb) * float32(s))
			acc[b] -= float32(float32(dmin*xdb) * float32(m))
		}
	}
	return acc.sum()
}

// kernDotQ3_KGo dots Q3_K blocks {u8 hmask[32]; u8 qs[64]; u8 scales[12];
// f16 d}: value = d·sc·q per 16 values, q = (2 bits of qs) − 4 unless the
// hmask bit is set. 32-value block b is bits 2(b%4).. of qs[32(b/4):][:32]
// and bit b of hmask[0:32].
func kernDotQ3_KGo(w []byte, xq []int8, xd, _ []float32) float32 {
	var acc kernLaneAcc
	var v [32]int32
	for sb := range len(xd) / 8 {
		blk := w[110*sb : 110*sb+110]
		d := kernHalf(blk[108:])
		sc := gguf.Q3KScales(blk[96:108])
		hm := blk[0:32]
		for b := range 8 {
			q := blk[32+32*(b/4) : 64+32*(b/4)]
			for k := range 32 {
				v[k] = int32(q[k]>>(2*(b%4))&3) - 4 + 4*int32(hm[k]>>b&1)
			}
			x := xq[32*(8*sb+b) : 32*(8*sb+b)+32]
			s := kernBlockDot(&v, x, int32(sc[2*b]), int32(sc[2*b+1]))
			acc[b] += float32(float32(d*xd[8*sb+b]) * float32(s))
		}
	}
	return acc.sum()
}

// kernDotQ5_KGo dots Q5_K blocks {f16 d, dmin; u8 scales[12]; u8 qh[32];
// u8 qs[128]}: value = d·sc·q − dmin·m per 32 values. Block b is the low
// (b even) or high nibbles of qs[32(b/2):][:32] with bit b of qh as bit 4;
// its min term dmin·m_b·xs_b goes into lane b first.
func kernDotQ5_KGo(w []byte, xq []int8, xd, xs []float32) float32 {
	var acc kernLaneAcc
	var v [32]int32
	for sb := range len(xd) / 8 {
		blk := w[176*sb : 176*sb+176]
		d, dmin := kernHalf(blk), kernHalf(blk[2:])
		sc, m := kernQ4KScales(blk[4:16])
		qh := blk[16:48]
		for b := range 8 {
			acc[b] -= float32(float32(dmin*float32(m[b])) * xs[8*sb+b])
		}
		for b := range 8 {
			q := blk[48+32*(b/2) : 80+32*(b/2)]
			sh := 4 * (b % 2)
			for k := range 32 {
				v[k] = int32(q[k]>>sh&15) | int32(qh[k]>>b&1)<<4
			}
			x := xq[32*(8*sb+b) : 32*(8*sb+b)+32]
			s := kernBlockDot(&v, x, int32(sc[b]), int32(sc[b]))
			acc[b] += float32(float32(d*xd[8*sb+b]) * float32(s))
		}
	}
	return acc.sum()
}

// kernIQ4Values sets v to the 32 codebook values of 16 IQ4 code bytes:
// low nibbles, then high nibbles.
func kernIQ4Values(v *[32]int32, q []byte) {
	q = q[:16]
	for k, c := range q {
		v[k] = int32(gguf.IQ4NLValues[c&15])
		v[k+16] = int32(gguf.IQ4NLValues[c>>4])
	}
}

// kernDotIQ4_NLGo dots IQ4_NL blocks {f16 d; u8 qs[16]} (codebook values
// times d) with the activations.
func kernDotIQ4_NLGo(w []byte, xq []int8, xd, _ []float32) float32 {
	var acc kernLaneAcc
	var v [32]int32
	var s [8]int32
	groups := len(xd) / 8 * 8
	for b := range xd {
		blk := w[18*b : 18*b+18]
		kernIQ4Values(&v, blk[2:18])
		x := xq[32*b : 32*b+32]
		f := float32(kernHalf(blk) * xd[b])
		if b < groups {
			acc[b%8] += float32(f * float32(kernBlockDot(&v, x, 1, 1)))
			continue
		}
		kernLaneDot(&s, &v, x, 1, 1)
		acc.add(f, &s)
	}
	return acc.sum()
}

// kernDotIQ4_XSGo dots IQ4_XS blocks {f16 d; u16 scales_h; u8
// scales_l[4]; u8 qs[128]}: value = d·(ls−32)·codebook value per 32
// values.
func kernDotIQ4_XSGo(w []byte, xq []int8, xd, _ []float32) float32 {
	var acc kernLaneAcc
	var v [32]int32
	for sb := range len(xd) / 8 {
		blk := w[136*sb : 136*sb+136]
		d := kernHalf(blk)
		for b := range 8 {
			kernIQ4Values(&v, blk[8+16*b:24+16*b])
			ls := int32(gguf.IQ4XSScale(blk, b) - 32)
			s := kernBlockDot(&v, xq[32*(8*sb+b):32*(8*sb+b)+32], ls, ls)
			acc[b] += float32(float32(d*xd[8*sb+b]) * float32(s))
		}
	}
	return acc.sum()
}

// kernFMA32 returns a·b+c rounded once to float32 (round half to even), as
// VFMADD231PS computes it. The product is exact in float64 and the sum is
// rounded to float64 first; that second rounding can only go wrong where
// the float64 sum falls exactly halfway between two float32s while the
// exact sum does not (the float64 sum's error, from TwoSum, says which way
// it lies).
func kernFMA32(a, b, c float32) float32 {
	p := float64(a) * float64(b)
	s := p + float64(c)
	r := float32(s)
	if math.IsInf(s, 0) || math.IsNaN(s) || float64(r) == s {
		return r
	}
	bv := s - p
	e := (p - (s - bv)) + (float64(c) - bv)
	if e == 0 {
		return r
	}
	lo, hi := r, r
	if float64(r) < s {
		hi = math.Nextafter32(r, float32(math.Inf(1)))
	} else {
		lo = math.Nextafter32(r, float32(math.Inf(-1)))
	}
	if (float64(lo)+float64(hi))/2 != s {
		return r
	}
	if e > 0 {
		return hi
	}
	return lo
}
