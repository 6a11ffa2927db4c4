package cpu

import "github.com/llmd/llmd/model/gguf"

// The portable kernels of Q2_K, Q3_K, Q5_K, IQ4_NL and IQ4_XS. They follow
// the lane model that their SIMD kernels compute, so that those agree with
// them bit for bit:
//
//   - Each 32-value activation block b is dotted in integers with the
//     weights' values in their natural order, giving eight int32 lanes:
//     lane l sums values 4l..4l+3, times the weight's integer sub-block
//     scale where it has one (Q2_K, Q3_K, Q5_K, IQ4_XS). Integer sums are
//     exact, so their order does not matter.
//   - Eight float32 accumulators, one per lane, take acc[l] += f·float(S[l])
//     with f = d·xd[b] (the weight's f16 super-block or block scale times the
//     activation scale), each product rounded to float32 before the sum
//     (never fused: the SIMD kernels multiply, then add).
//   - The min terms of Q2_K (per 16 values) are lanes too, subtracted after
//     the block's dot; those of Q5_K (per 32 values, with the activation
//     block sums xs) go block b into lane b, before the super-block's dots.
//   - The result is ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)), hsumps's order.

// kernLaneAcc holds the eight float32 lane accumulators.
type kernLaneAcc [8]float32

// add adds f·s[l] to each lane, rounding the product first.
func (a *kernLaneAcc) add(f float32, s *[8]int32) {
	for l, v := range s {
		a[l] += float32(f * float32(v))
	}
}

// sub subtracts f·s[l] from each lane, rounding the product first.
func (a *kernLaneAcc) sub(f float32, s *[8]int32) {
	for l, v := range s {
		a[l] -= float32(f * float32(v))
	}
}

func (a *kernLaneAcc) sum() float32 {
	return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))
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
	var s, m [8]int32
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
			kernLaneDot(&s, &v, x, int32(sc0&15), int32(sc1&15))
			kernLaneDot(&m, &ones, x, int32(sc0>>4), int32(sc1>>4))
			xdb := xd[8*sb+b]
			acc.add(float32(d*xdb), &s)
			acc.sub(float32(dmin*xdb), &m)
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
	var s [8]int32
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
			kernLaneDot(&s, &v, x, int32(sc[2*b]), int32(sc[2*b+1]))
			acc.add(float32(d*xd[8*sb+b]), &s)
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
	var s [8]int32
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
			kernLaneDot(&s, &v, x, int32(sc[b]), int32(sc[b]))
			acc.add(float32(d*xd[8*sb+b]), &s)
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
	for b := range xd {
		blk := w[18*b : 18*b+18]
		kernIQ4Values(&v, blk[2:18])
		kernLaneDot(&s, &v, xq[32*b:32*b+32], 1, 1)
		acc.add(float32(kernHalf(blk)*xd[b]), &s)
	}
	return acc.sum()
}

// kernDotIQ4_XSGo dots IQ4_XS blocks {f16 d; u16 scales_h; u8
// scales_l[4]; u8 qs[128]}: value = d·(ls−32)·codebook value per 32
// values.
func kernDotIQ4_XSGo(w []byte, xq []int8, xd, _ []float32) float32 {
	var acc kernLaneAcc
	var v [32]int32
	var s [8]int32
	for sb := range len(xd) / 8 {
		blk := w[136*sb : 136*sb+136]
		d := kernHalf(blk)
		for b := range 8 {
			kernIQ4Values(&v, blk[8+16*b:24+16*b])
			ls := int32(gguf.IQ4XSScale(blk, b) - 32)
			kernLaneDot(&s, &v, xq[32*(8*sb+b):32*(8*sb+b)+32], ls, ls)
			acc.add(float32(d*xd[8*sb+b]), &s)
		}
	}
	return acc.sum()
}
