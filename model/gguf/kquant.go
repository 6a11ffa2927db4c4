package gguf

import (
	"encoding/binary"
	"math"
)

// This file holds the block formats added beside Q4_K and Q6_K: the 2-, 3-
// and 5-bit K-quants and the non-linear 4-bit IQ4_NL and IQ4_XS. The
// layouts and the dequantization arithmetic are ggml's (ggml-common.h,
// dequantize_row_* in ggml-quants.c); the quantizers are simpler than
// llama-quantize's (no importance weights, no scale search), with the same
// layouts.

// blockCodec decodes (dequant) and encodes (quant) one block of a type.
type blockCodec struct {
	dequant func(b []byte, y []float32)
	quant   func(x []float32, b []byte)
}

var blockCodecs = map[TensorType]blockCodec{
	TypeQ2_K:   {dequantQ2_K, quantQ2_K},
	TypeQ3_K:   {dequantQ3_K, quantQ3_K},
	TypeQ5_K:   {dequantQ5_K, quantQ5_K},
	TypeIQ4_NL: {dequantIQ4_NL, quantIQ4_NL},
	TypeIQ4_XS: {dequantIQ4_XS, quantIQ4_XS},
}

// IQ4NLValues is the codebook of IQ4_NL and IQ4_XS (ggml kvalues_iq4nl):
// a 4-bit code q stands for IQ4NLValues[q] times the block scale.
var IQ4NLValues = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// Block offsets of the formats (ggml-common.h):
//
//	block_q2_K   {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin}           84 bytes
//	block_q3_K   {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}      110 bytes
//	block_q5_K   {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]} 176 bytes
//	block_iq4_nl {f16 d; u8 qs[16]}                                     18 bytes
//	block_iq4_xs {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}    136 bytes
//
// In Q2_K and Q3_K value i of a 256-value block (n = i/128, j = i%128/32,
// h = i%32/16, l = i%16) is bits 2j..2j+1 of qs[32n+16h+l], in sub-block
// i/16; Q3_K's third bit is bit 4n+j of hmask[16h+l], and a clear bit
// subtracts 4.

// Q3KScales unpacks the sixteen 6-bit scales of a Q3_K block's 12 scale
// bytes, less 32 (−32..31), as ggml's kmask1/kmask2 shuffle does: scale i
// has its low four bits in byte i%8 (low nibble for i < 8) and its high
// two in bits 2·(i/4) of byte 8+i%4.
func Q3KScales(s []byte) (sc [16]int8) {
	for i := range 16 {
		lo := s[i%8] & 0xf
		if i >= 8 {
			lo = s[i%8] >> 4
		}
		hi := s[8+i%4] >> (2 * (i / 4)) & 3
		sc[i] = int8(lo|hi<<4) - 32
	}
	return sc
}

// dequantQ2_K decodes block_q2_K: y = d·(sc&15)·q − dmin·(sc>>4) per
// 16-value sub-block, q in 0..3.
func dequantQ2_K(b []byte, y []float32) {
	d := HalfToFloat32(binary.LittleEndian.Uint16(b[80:]))
	dmin := HalfToFloat32(binary.LittleEndian.Uint16(b[82:]))
	scales, qs := b[0:16], b[16:80]
	for i := range 16 { // sub-blocks
		n, j, h := i/8, i%8/2, i%2
		sc := scales[i]
		dl, ml := d*float32(sc&0xf), dmin*float32(sc>>4)
		q := qs[32*n+16*h : 32*n+16*h+16]
		yo := y[16*i : 16*i+16]
		for l := range 16 {
			yo[l] = float32(dl*float32(q[l]>>(2*j)&3)) - ml
		}
	}
}

// dequantQ3_K decodes block_q3_K: y = d·sc·q per 16-value sub-block, sc
// in −32..31 and q in −4..3.
func dequantQ3_K(b []byte, y []float32) {
	d := HalfToFloat32(binary.LittleEndian.Uint16(b[108:]))
	hm, qs := b[0:32], b[32:96]
	sc := Q3KScales(b[96:108])
	for i := range 16 {
		n, j, h := i/8, i%8/2, i%2
		dl := d * float32(sc[i])
		q := qs[32*n+16*h : 32*n+16*h+16]
		hb := hm[16*h : 16*h+16]
		m := byte(1) << (4*n + j)
		yo := y[16*i : 16*i+16]
		for l := range 16 {
			v := int(q[l] >> (2 * j) & 3)
			if hb[l]&m == 0 {
				v -= 4
			}
			yo[l] = dl * float32(v)
		}
	}
}

// dequantQ5_K decodes block_q5_K: y = d·sc·q − dmin·m per 32-value
// sub-block (the 6-bit scales and mins packed as Q4_K's), q in 0..31 with
// the fifth bit of value l of sub-block s in bit s of qh[l].
func dequantQ5_K(b []byte, y []float32) {
	d := HalfToFloat32(binary.LittleEndian.Uint16(b))
	dmin := HalfToFloat32(binary.LittleEndian.Uint16(b[2:]))
	scales, qh, qs := b[4:16], b[16:48], b[48:176]
	for c := range 4 { // 64-value chunks
		sc1, m1 := q4KScaleMin(2*c, scales)
		sc2, m2 := q4KScaleMin(2*c+1, scales)
		d1, o1 := d*float32(sc1), dmin*float32(m1)
		d2, o2 := d*float32(sc2), dmin*float32(m2)
		q := qs[32*c : 32*c+32]
		u1, u2 := byte(1)<<(2*c), byte(2)<<(2*c)
		yc := y[64*c : 64*c+64]
		for l := range 32 {
			lo, hi := q[l]&0xf, q[l]>>4
			if qh[l]&u1 != 0 {
				lo += 16
			}
			if qh[l]&u2 != 0 {
				hi += 16
			}
			yc[l] = float32(d1*float32(lo)) - o1
			yc[l+32] = float32(d2*float32(hi)) - o2
		}
	}
}

// dequantIQ4_NL decodes block_iq4_nl: y = d·IQ4NLValues[q], low nibbles
// first.
func dequantIQ4_NL(b []byte, y []float32) {
	d := HalfToFloat32(binary.LittleEndian.Uint16(b))
	for j, q := range b[2:18] {
		y[j] = d * float32(IQ4NLValues[q&0xf])
		y[j+16] = d * float32(IQ4NLValues[q>>4])
	}
}

// IQ4XSScale returns the 6-bit scale (0..63, used less 32) of 32-value
// sub-block ib of an IQ4_XS block: its low four bits in scales_l, its high
// two in scales_h.
func IQ4XSScale(b []byte, ib int) int {
	sh := binary.LittleEndian.Uint16(b[2:])
	return int(b[4+ib/2]>>(4*(ib%2))&0xf) | int(sh>>(2*ib)&3)<<4
}

// dequantIQ4_XS decodes block_iq4_xs: y = d·(ls−32)·IQ4NLValues[q] per
// 32-value sub-block, each laid out as an IQ4_NL block's codes.
func dequantIQ4_XS(b []byte, y []float32) {
	d := HalfToFloat32(binary.LittleEndian.Uint16(b))
	for ib := range 8 {
		dl := d * float32(IQ4XSScale(b, ib)-32)
		q := b[8+16*ib : 24+16*ib]
		yo := y[32*ib : 32*ib+32]
		for j := range 16 {
			yo[j] = dl * float32(IQ4NLValues[q[j]&0xf])
			yo[j+16] = dl * float32(IQ4NLValues[q[j]>>4])
		}
	}
}

// affineScales gives each of the len(x)/sub sub-blocks of x the scale
// (max−min)/levels and the offset −min (min capped at 0), and returns them
// with their largest values.
func affineScales(x []float32, sub int, levels float32) (scales, mins []float32, maxScale, maxMin float32) {
	n := len(x) / sub
	scales, mins = make([]float32, n), make([]float32, n)
	for j := range n {
		s := x[sub*j : sub*j+sub]
		lo, hi := s[0], s[0]
		for _, v := range s[1:] {
			lo, hi = min(lo, v), max(hi, v)
		}
		lo = min(lo, 0)
		scales[j], mins[j] = (hi-lo)/levels, -lo
		maxScale, maxMin = max(maxScale, scales[j]), max(maxMin, mins[j])
	}
	return scales, mins, maxScale, maxMin
}

// affineCodes codes scales and mins against the f16 super-block scales
// maxScale/top and maxMin/top (scales rounded up, so that a sub-block's
// range still fits), and returns those scales' bits with the codes.
func affineCodes(scales, mins []float32, maxScale, maxMin float32, top int) (d16, dmin16 uint16, ls, lm []byte) {
	d16 = Float32ToHalf(maxScale / float32(top))
	dmin16 = Float32ToHalf(maxMin / float32(top))
	d, dmin := HalfToFloat32(d16), HalfToFloat32(dmin16)
	ls, lm = make([]byte, len(scales)), make([]byte, len(mins))
	for j := range scales {
		if d > 0 {
			ls[j] = byte(clampInt(int(math.Ceil(float64(scales[j]/d))), 0, top))
		}
		if dmin > 0 {
			lm[j] = byte(clampInt(nearestInt(mins[j]/dmin), 0, top))
		}
	}
	return d16, dmin16, ls, lm
}

// affineValues sets L[i] to x[i]'s code in 0..top for sub-blocks of sub
// values with the coded scales ls and mins lm.
func affineValues(L []byte, x []float32, sub, top int, d, dmin float32, ls, lm []byte) {
	for j := range ls {
		dd := d * float32(ls[j])
		if dd == 0 {
			continue
		}
		dm := dmin * float32(lm[j])
		for i := sub * j; i < sub*j+sub; i++ {
			L[i] = byte(clampInt(nearestInt((x[i]+dm)/dd), 0, top))
		}
	}
}

// quantQ2_K quantizes one 256-value block: each 16-value sub-block gets
// the scale (max−min)/3 and offset −min, coded in 4 bits each.
func quantQ2_K(x []float32, b []byte) {
	scales, mins, maxScale, maxMin := affineScales(x, 16, 3)
	d16, dmin16, ls, lm := affineCodes(scales, mins, maxScale, maxMin, 15)
	var L [256]byte
	affineValues(L[:], x, 16, 3, HalfToFloat32(d16), HalfToFloat32(dmin16), ls, lm)
	clear(b)
	for i := range 16 {
		b[i] = ls[i] | lm[i]<<4
	}
	for i, v := range L {
		n, j, h, l := i/128, i%128/32, i%32/16, i%16
		b[16+32*n+16*h+l] |= v << (2 * j)
	}
	binary.LittleEndian.PutUint16(b[80:], d16)
	binary.LittleEndian.PutUint16(b[82:], dmin16)
}

// quantQ3_K quantizes one 256-value block: each 16-value sub-block gets the
// signed scale that maps its largest-magnitude value to −4, coded in 6 bits
// against the block's d.
func quantQ3_K(x []float32, b []byte) {
	scales, maxScale, ok := signedSubScales(x, -4)
	clear(b)
	if !ok {
		return // an all-zero block: d = 0
	}
	iscale := -32 / maxScale
	d16 := Float32ToHalf(1 / iscale)
	d := HalfToFloat32(d16)
	binary.LittleEndian.PutUint16(b[108:], d16)
	sc := b[96:108]
	for ib := range 16 {
		s := clampInt(nearestInt(iscale*scales[ib]), -32, 31)
		v := byte(s + 32)
		if ib < 8 {
			sc[ib] |= v & 0xf
		} else {
			sc[ib-8] |= v & 0xf << 4
		}
		sc[8+ib%4] |= v >> 4 << (2 * (ib / 4))
		dd := d * float32(s)
		for i := 16 * ib; i < 16*ib+16; i++ {
			L := 4 // the code of 0
			if dd != 0 {
				L = clampInt(nearestInt(x[i]/dd), -4, 3) + 4
			}
			n, j, h, l := i/128, i%128/32, i%32/16, i%16
			b[32+32*n+16*h+l] |= byte(L&3) << (2 * j)
			if L >= 4 {
				b[16*h+l] |= 1 << (4*n + j)
			}
		}
	}
}

// quantQ5_K quantizes one 256-value block as quantQ4_K does, with 32
// levels.
func quantQ5_K(x []float32, b []byte) {
	scales, mins, maxScale, maxMin := affineScales(x, 32, 31)
	d16, dmin16, ls, lm := affineCodes(scales, mins, maxScale, maxMin, 63)
	var L [256]byte
	affineValues(L[:], x, 32, 31, HalfToFloat32(d16), HalfToFloat32(dmin16), ls, lm)
	clear(b)
	le := binary.LittleEndian
	le.PutUint16(b, d16)
	le.PutUint16(b[2:], dmin16)
	putQ4KScales(b[4:16], ls, lm)
	qh, qs := b[16:48], b[48:176]
	for c := range 4 {
		for l := range 32 {
			lo, hi := L[64*c+l], L[64*c+l+32]
			qs[32*c+l] = lo&0xf | hi&0xf<<4
			qh[l] |= lo>>4<<(2*c) | hi>>4<<(2*c+1)
		}
	}
}

// putQ4KScales packs eight 6-bit scales and mins as Q4_K and Q5_K store
// them (the inverse of q4KScaleMin); s must be zero.
func putQ4KScales(s []byte, ls, lm []byte) {
	for j := range 8 {
		if j < 4 {
			s[j] = ls[j]
			s[j+4] = lm[j]
		} else {
			s[j+4] = ls[j]&0xf | lm[j]&0xf<<4
			s[j-4] |= ls[j] >> 4 << 6
			s[j] |= lm[j] >> 4 << 6
		}
	}
}

// iq4Nearest returns the code whose IQ4NLValues entry is nearest v (the
// lower one on ties); NaN gives code 0.
func iq4Nearest(v float32) byte {
	best, bestErr := byte(0), float32(math.Inf(1))
	for q, k := range IQ4NLValues {
		if e := float32(math.Abs(float64(v - float32(k)))); e < bestErr {
			best, bestErr = byte(q), e
		}
	}
	return best
}

// iq4Codes writes the codes of 32 values x for the scale d into 16 bytes
// qs, low nibbles first.
func iq4Codes(x []float32, d float32, qs []byte) {
	var id float32
	if d != 0 {
		id = 1 / d
	}
	for j := range 16 {
		qs[j] = iq4Nearest(x[j]*id) | iq4Nearest(x[j+16]*id)<<4
	}
}

// quantIQ4_NL quantizes one 32-value block: the scale maps the value of
// largest magnitude to −127, the codebook's first entry.
func quantIQ4_NL(x []float32, b []byte) {
	maxv, amax := signedAbsMax(x)
	var d16 uint16
	if amax >= 1e-15 {
		d16 = Float32ToHalf(maxv / -127)
	}
	binary.LittleEndian.PutUint16(b, d16)
	iq4Codes(x, HalfToFloat32(d16), b[2:18])
}

// quantIQ4_XS quantizes one 256-value block: each 32-value sub-block's
// scale maps its largest-magnitude value to −127, coded in 6 bits
// (−32..31) against the block's d.
func quantIQ4_XS(x []float32, b []byte) {
	var scales [8]float32
	var maxScale, maxAbs float32
	for ib := range 8 {
		maxv, _ := signedAbsMax(x[32*ib : 32*ib+32])
		scales[ib] = maxv / -127
		if a := float32(math.Abs(float64(scales[ib]))); a > maxAbs {
			maxAbs, maxScale = a, scales[ib]
		}
	}
	clear(b)
	if maxAbs < 1e-15 || maxAbs != maxAbs {
		return // an all-zero block: d = 0
	}
	d16 := Float32ToHalf(maxScale / -32)
	d := HalfToFloat32(d16)
	binary.LittleEndian.PutUint16(b, d16)
	var sh uint16
	for ib := range 8 {
		ls := 32
		if d != 0 {
			ls = clampInt(nearestInt(scales[ib]/d), -32, 31) + 32
		}
		b[4+ib/2] |= byte(ls&0xf) << (4 * (ib % 2))
		sh |= uint16(ls>>4) << (2 * ib)
		iq4Codes(x[32*ib:32*ib+32], d*float32(ls-32), b[8+16*ib:24+16*ib])
	}
	binary.LittleEndian.PutUint16(b[2:], sh)
}
