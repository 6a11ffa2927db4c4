package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"strings"
	"sync"
)

// TensorType is a ggml tensor type id as stored in a GGUF tensor info.
// Only the types with [TensorType.Supported] true can be read, dequantized
// and written; the others are named so that errors can say what a file
// holds.
type TensorType uint32

// The supported tensor types, with ggml's ids (ggml.h enum ggml_type).
const (
	TypeF32    TensorType = 0
	TypeF16    TensorType = 1
	TypeQ4_0   TensorType = 2
	TypeQ5_0   TensorType = 6
	TypeQ8_0   TensorType = 8
	TypeQ2_K   TensorType = 10
	TypeQ3_K   TensorType = 11
	TypeQ4_K   TensorType = 12
	TypeQ5_K   TensorType = 13
	TypeQ6_K   TensorType = 14
	TypeIQ4_NL TensorType = 20
	TypeIQ4_XS TensorType = 23
	TypeBF16   TensorType = 30
)

// ggmlTypeNames names every ggml type id, supported or not, so that an
// error can name what a refused file holds. Empty entries are ids ggml has
// retired.
var ggmlTypeNames = [...]string{
	0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1",
	10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K",
	16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S",
	22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64",
	29: "IQ1_M", 30: "BF16", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4",
}

// quantLayout is the block layout of a supported type: elems values are
// stored in bytes bytes.
type quantLayout struct{ elems, bytes int }

var quantLayouts = map[TensorType]quantLayout{
	TypeF32:    {1, 4},
	TypeF16:    {1, 2},
	TypeBF16:   {1, 2},
	TypeQ4_0:   {32, 18},
	TypeQ5_0:   {32, 22},
	TypeQ8_0:   {32, 34},
	TypeQ2_K:   {256, 84},
	TypeQ3_K:   {256, 110},
	TypeQ4_K:   {256, 144},
	TypeQ5_K:   {256, 176},
	TypeQ6_K:   {256, 210},
	TypeIQ4_NL: {32, 18},
	TypeIQ4_XS: {256, 136},
}

// String returns ggml's name for t ("F16", "Q4_K"), or "type(N)" for an id
// ggml does not define.
func (t TensorType) String() string {
	if int(t) < len(ggmlTypeNames) && ggmlTypeNames[t] != "" {
		return ggmlTypeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// Supported reports whether this package can read, dequantize and write t.
func (t TensorType) Supported() bool {
	_, ok := quantLayouts[t]
	return ok
}

// BlockSize returns the number of values in one block of t (1 for F32, F16
// and BF16; 32 or 256 for the quantized types), or 0 for an unsupported
// type.
func (t TensorType) BlockSize() int { return quantLayouts[t].elems }

// BlockBytes returns the size in bytes of one block of t, or 0 for an
// unsupported type.
func (t TensorType) BlockBytes() int { return quantLayouts[t].bytes }

// RowBytes returns the size in bytes of n values of type t. It fails when t
// is unsupported, n is negative or not a multiple of the block size, or the
// size overflows int.
func (t TensorType) RowBytes(n int) (int, error) {
	l, ok := quantLayouts[t]
	if !ok {
		return 0, fmt.Errorf("gguf: tensor type %s is not supported", t)
	}
	if n < 0 || n%l.elems != 0 {
		return 0, fmt.Errorf("gguf: %d values is not a whole number of %s blocks of %d", n, t, l.elems)
	}
	hi, lo := bits.Mul64(uint64(n/l.elems), uint64(l.bytes))
	if hi != 0 || lo > math.MaxInt {
		return 0, fmt.Errorf("gguf: %d values of %s overflow the addressable size", n, t)
	}
	return int(lo), nil
}

// ParseTensorType returns the supported type with the given name, in any
// case ("f16", "Q8_0", "q4_k"). It refuses unsupported types.
func ParseTensorType(name string) (TensorType, error) {
	for t := range quantLayouts {
		if strings.EqualFold(t.String(), name) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("gguf: unknown or unsupported tensor type %q (want one of f32, f16, bf16, q4_0, q5_0, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs)", name)
}

// HalfToFloat32 converts an IEEE 754 half-precision value (its bits) to
// float32, exactly.
func HalfToFloat32(h uint16) float32 { return halfTable()[h] }

// halfTable maps every half bit pattern to its float32 value (256 KiB,
// built on first use).
var halfTable = sync.OnceValue(func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = halfToFloat32Slow(uint16(i))
	}
	return &t
})

func halfToFloat32Slow(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch exp {
	case 0x1f: // infinity or NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case 0: // zero or subnormal: mant * 2^-24
		f := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			f = -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// Float32ToHalf converts f to IEEE 754 half precision (its bits), rounding
// to nearest even as ggml does; values beyond the half range become
// infinities and NaN stays NaN.
func Float32ToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		s := uint(14 - e) // value = (mant|1<<23) >> s half-subnormal units
		if s > 24 {
			return sign
		}
		m := mant | 0x800000
		r := m >> s
		rem := m & (1<<s - 1)
		half := uint32(1) << (s - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // a carry into the exponent is correct, up to infinity
	}
	return sign | uint16(r)
}

// float32ToBF16 converts f to bfloat16 bits, rounding to nearest even and
// keeping NaN quiet, as ggml_compute_fp32_to_bf16 does.
func float32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 64
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

func bf16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Dequantize converts data, whole blocks of type t, to float32 values in
// out. len(out) must be a multiple of t's block size and len(data) exactly
// the bytes that many values take. It works on one row or a whole tensor.
func Dequantize(t TensorType, data []byte, out []float32) error {
	need, err := t.RowBytes(len(out))
	if err != nil {
		return err
	}
	if len(data) != need {
		return fmt.Errorf("gguf: dequantize %s: %d bytes for %d values, want %d", t, len(data), len(out), need)
	}
	le := binary.LittleEndian
	switch t {
	case TypeF32:
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(data[4*i:]))
		}
	case TypeF16:
		tab := halfTable()
		for i := range out {
			out[i] = tab[le.Uint16(data[2*i:])]
		}
	case TypeBF16:
		for i := range out {
			out[i] = bf16ToFloat32(le.Uint16(data[2*i:]))
		}
	case TypeQ4_0:
		for b := 0; b < len(out)/32; b++ {
			dequantQ4_0(data[b*18:b*18+18], out[b*32:b*32+32])
		}
	case TypeQ5_0:
		for b := 0; b < len(out)/32; b++ {
			dequantQ5_0(data[b*22:b*22+22], out[b*32:b*32+32])
		}
	case TypeQ8_0:
		for b := 0; b < len(out)/32; b++ {
			dequantQ8_0(data[b*34:b*34+34], out[b*32:b*32+32])
		}
	case TypeQ4_K:
		for b := 0; b < len(out)/256; b++ {
			dequantQ4_K(data[b*144:b*144+144], out[b*256:b*256+256])
		}
	case TypeQ6_K:
		for b := 0; b < len(out)/256; b++ {
			dequantQ6_K(data[b*210:b*210+210], out[b*256:b*256+256])
		}
	default:
		c := blockCodecs[t]
		l := quantLayouts[t]
		for b := 0; b < len(out)/l.elems; b++ {
			c.dequant(data[b*l.bytes:(b+1)*l.bytes], out[b*l.elems:(b+1)*l.elems])
		}
	}
	return nil
}

// dequantQ4_0 decodes block_q4_0 {f16 d; u8 qs[16]}.
func dequantQ4_0(b []byte, y []float32) {
	d := HalfToFloat32(binary.LittleEndian.Uint16(b))
	qs := b[2:18]
	for j := range 16 {
		y[j] = float32(int(qs[j]&0xf)-8) * d
		y[j+16] = float32(int(qs[j]>>4)-8) * d
	}
}

// dequantQ5_0 decodes block_q5_0 {f16 d; u8 qh[4]; u8 qs[16]}.
func dequantQ5_0(b []byte, y []float32) {
	d := HalfToFloat32(binary.LittleEndian.Uint16(b))
	qh := binary.LittleEndian.Uint32(b[2:])
	qs := b[6:22]
	for j := range 16 {
		h0 := byte((qh>>j)<<4) & 0x10
		h1 := byte(qh>>(j+12)) & 0x10
		y[j] = float32(int(qs[j]&0xf|h0)-16) * d
		y[j+16] = float32(int(qs[j]>>4|h1)-16) * d
	}
}

// dequantQ8_0 decodes block_q8_0 {f16 d; i8 qs[32]}.
func dequantQ8_0(b []byte, y []float32) {
	d := HalfToFloat32(binary.LittleEndian.Uint16(b))
	for j, q := range b[2:34] {
		y[j] = float32(int8(q)) * d
	}
}

// q4KScaleMin unpacks the 6-bit scale and min of sub-block j from the 12
// packed bytes of a Q4_K block (ggml get_scale_min_k4).
func q4KScaleMin(j int, s []byte) (sc, m byte) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&0xf | (s[j-4]>>6)<<4, s[j+4]>>4 | (s[j]>>6)<<4
}

// dequantQ4_K decodes block_q4_K {f16 d; f16 dmin; u8 scales[12]; u8
// qs[128]}: 8 sub-blocks of 32 values, y = d·sc·q − dmin·m.
func dequantQ4_K(b []byte, y []float32) {
	d := HalfToFloat32(binary.LittleEndian.Uint16(b))
	dmin := HalfToFloat32(binary.LittleEndian.Uint16(b[2:]))
	scales := b[4:16]
	qs := b[16:144]
	for c := range 4 { // 64-value chunks
		sc1, m1 := q4KScaleMin(2*c, scales)
		sc2, m2 := q4KScaleMin(2*c+1, scales)
		d1, o1 := d*float32(sc1), dmin*float32(m1)
		d2, o2 := d*float32(sc2), dmin*float32(m2)
		q := qs[32*c : 32*c+32]
		yc := y[64*c : 64*c+64]
		for l := range 32 {
			yc[l] = d1*float32(q[l]&0xf) - o1
			yc[l+32] = d2*float32(q[l]>>4) - o2
		}
	}
}

// dequantQ6_K decodes block_q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16];
// f16 d}: 16 sub-blocks of 16 values, 6-bit q − 32, y = d·sc·q.
func dequantQ6_K(b []byte, y []float32) {
	d := HalfToFloat32(binary.LittleEndian.Uint16(b[208:]))
	for h := range 2 { // 128-value halves
		ql := b[64*h : 64*h+64]
		qh := b[128+32*h : 128+32*h+32]
		sc := b[192+8*h : 192+8*h+8]
		yh := y[128*h : 128*h+128]
		for l := range 32 {
			is := l / 16
			q1 := int(ql[l]&0xf|(qh[l]&3)<<4) - 32
			q2 := int(ql[l+32]&0xf|(qh[l]>>2&3)<<4) - 32
			q3 := int(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
			q4 := int(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
			yh[l] = d * float32(int8(sc[is])) * float32(q1)
			yh[l+32] = d * float32(int8(sc[is+2])) * float32(q2)
			yh[l+64] = d * float32(int8(sc[is+4])) * float32(q3)
			yh[l+96] = d * float32(int8(sc[is+6])) * float32(q4)
		}
	}
}

// Quantize encodes in as type t and returns the new bytes. len(in) must be
// a multiple of t's block size; rows are independent, so a whole tensor can
// be quantized at once. Q4_0, Q5_0 and Q8_0 follow ggml's reference
// quantizers; the K-quants and IQ4_NL/IQ4_XS use a simpler per-sub-block
// scale search than llama-quantize's, with the same layout.
func Quantize(t TensorType, in []float32) ([]byte, error) {
	n, err := t.RowBytes(len(in))
	if err != nil {
		return nil, err
	}
	out := make([]byte, n)
	le := binary.LittleEndian
	switch t {
	case TypeF32:
		for i, v := range in {
			le.PutUint32(out[4*i:], math.Float32bits(v))
		}
	case TypeF16:
		for i, v := range in {
			le.PutUint16(out[2*i:], Float32ToHalf(v))
		}
	case TypeBF16:
		for i, v := range in {
			le.PutUint16(out[2*i:], float32ToBF16(v))
		}
	case TypeQ4_0:
		for b := 0; b < len(in)/32; b++ {
			quantQ4_0(in[b*32:b*32+32], out[b*18:b*18+18])
		}
	case TypeQ5_0:
		for b := 0; b < len(in)/32; b++ {
			quantQ5_0(in[b*32:b*32+32], out[b*22:b*22+22])
		}
	case TypeQ8_0:
		for b := 0; b < len(in)/32; b++ {
			quantQ8_0(in[b*32:b*32+32], out[b*34:b*34+34])
		}
	case TypeQ4_K:
		for b := 0; b < len(in)/256; b++ {
			quantQ4_K(in[b*256:b*256+256], out[b*144:b*144+144])
		}
	case TypeQ6_K:
		for b := 0; b < len(in)/256; b++ {
			quantQ6_K(in[b*256:b*256+256], out[b*210:b*210+210])
		}
	default:
		c := blockCodecs[t]
		l := quantLayouts[t]
		for b := 0; b < len(in)/l.elems; b++ {
			c.quant(in[b*l.elems:(b+1)*l.elems], out[b*l.bytes:(b+1)*l.bytes])
		}
	}
	return out, nil
}

// signedAbsMax returns the value of x with the largest magnitude (the first
// one on ties), keeping its sign, and that magnitude.
func signedAbsMax(x []float32) (maxv, amax float32) {
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); a > amax {
			amax, maxv = a, v
		}
	}
	return maxv, amax
}

// truncInt converts like a C cast to an integer: toward zero. NaN and
// out-of-range values give an unspecified but harmless result.
func truncInt(f float32) int { return int(int32(f)) }

// quantQ4_0 is ggml's quantize_row_q4_0_ref for one block.
func quantQ4_0(x []float32, b []byte) {
	maxv, _ := signedAbsMax(x)
	d := maxv / -8
	var id float32
	if d != 0 {
		id = 1 / d
	}
	binary.LittleEndian.PutUint16(b, Float32ToHalf(d))
	for j := range 16 {
		x0 := min(15, truncInt(float32(x[j]*id)+8.5))
		x1 := min(15, truncInt(float32(x[j+16]*id)+8.5))
		b[2+j] = byte(x0)&0xf | byte(x1)<<4
	}
}

// quantQ5_0 is ggml's quantize_row_q5_0_ref for one block.
func quantQ5_0(x []float32, b []byte) {
	maxv, _ := signedAbsMax(x)
	d := maxv / -16
	var id float32
	if d != 0 {
		id = 1 / d
	}
	binary.LittleEndian.PutUint16(b, Float32ToHalf(d))
	var qh uint32
	for j := range 16 {
		x0 := min(31, truncInt(float32(x[j]*id)+16.5))
		x1 := min(31, truncInt(float32(x[j+16]*id)+16.5))
		b[6+j] = byte(x0)&0xf | byte(x1)<<4
		qh |= uint32(x0&0x10>>4) << j
		qh |= uint32(x1&0x10>>4) << (j + 16)
	}
	binary.LittleEndian.PutUint32(b[2:], qh)
}

// quantQ8_0 is ggml's quantize_row_q8_0_ref for one block.
func quantQ8_0(x []float32, b []byte) {
	_, amax := signedAbsMax(x)
	d := amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	binary.LittleEndian.PutUint16(b, Float32ToHalf(d))
	for j, v := range x {
		b[2+j] = byte(int8(clampInt(int(math.Round(float64(float32(v*id)))), -128, 127)))
	}
}

func clampInt(v, lo, hi int) int { return max(lo, min(hi, v)) }

// nearestInt rounds half to even, as ggml's nearest_int does for the
// values it sees; NaN gives an unspecified int.
func nearestInt(f float32) int {
	r := math.RoundToEven(float64(f))
	if !(r > -1<<30 && r < 1<<30) {
		if r > 0 {
			return 1 << 30
		}
		return -1 << 30
	}
	return int(r)
}

// quantQ4_K quantizes one 256-value block: each sub-block of 32 gets the
// scale (max−min)/15 and offset −min (min capped at 0), both then coded in
// 6 bits against the block's d and dmin.
func quantQ4_K(x []float32, b []byte) {
	var scales, mins [8]float32
	var maxScale, maxMin float32
	for j := range 8 {
		sub := x[32*j : 32*j+32]
		lo, hi := sub[0], sub[0]
		for _, v := range sub[1:] {
			lo, hi = min(lo, v), max(hi, v)
		}
		lo = min(lo, 0)
		scales[j] = (hi - lo) / 15
		mins[j] = -lo
		maxScale, maxMin = max(maxScale, scales[j]), max(maxMin, mins[j])
	}
	d16 := Float32ToHalf(maxScale / 63)
	dmin16 := Float32ToHalf(maxMin / 63)
	d, dmin := HalfToFloat32(d16), HalfToFloat32(dmin16)
	var ls, lm [8]byte
	for j := range 8 {
		if d > 0 {
			// Round the scale up so that the sub-block's range still fits 0..15.
			ls[j] = byte(clampInt(int(math.Ceil(float64(scales[j]/d))), 0, 63))
		}
		if dmin > 0 {
			lm[j] = byte(clampInt(nearestInt(mins[j]/dmin), 0, 63))
		}
	}
	le := binary.LittleEndian
	le.PutUint16(b, d16)
	le.PutUint16(b[2:], dmin16)
	s := b[4:16]
	clear(s)
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
	var L [256]byte
	for j := range 8 {
		dd := d * float32(ls[j])
		if dd == 0 {
			continue
		}
		dm := dmin * float32(lm[j])
		for i := 32 * j; i < 32*j+32; i++ {
			L[i] = byte(clampInt(nearestInt((x[i]+dm)/dd), 0, 15))
		}
	}
	qs := b[16:144]
	for c := range 4 {
		for l := range 32 {
			qs[32*c+l] = L[64*c+l] | L[64*c+l+32]<<4
		}
	}
}

// signedSubScales gives each 16-value sub-block of a 256-value block the
// signed scale that maps its largest-magnitude value to top, and returns
// the scale of largest magnitude; ok is false for an all-zero (or NaN)
// block. Q3_K and Q6_K code these scales against the block's d.
func signedSubScales(x []float32, top float32) (scales [16]float32, maxScale float32, ok bool) {
	var maxAbs float32
	for ib := range 16 {
		maxv, _ := signedAbsMax(x[16*ib : 16*ib+16])
		scales[ib] = maxv / top
		if a := float32(math.Abs(float64(scales[ib]))); a > maxAbs {
			maxAbs, maxScale = a, scales[ib]
		}
	}
	return scales, maxScale, maxAbs >= 1e-15 && maxAbs == maxAbs
}

// quantQ6_K quantizes one 256-value block: each sub-block of 16 gets the
// signed scale that maps its largest-magnitude value to −32, coded in 8 bits
// against the block's d, as ggml's reference does.
func quantQ6_K(x []float32, b []byte) {
	scales, maxScale, ok := signedSubScales(x, -32)
	clear(b)
	if !ok {
		return // an all-zero block: d = 0
	}
	iscale := -128 / maxScale
	d16 := Float32ToHalf(1 / iscale)
	d := HalfToFloat32(d16)
	binary.LittleEndian.PutUint16(b[208:], d16)
	sc := b[192:208]
	var L [256]byte
	for ib := range 16 {
		s := clampInt(nearestInt(iscale*scales[ib]), -128, 127)
		sc[ib] = byte(int8(s))
		dd := d * float32(s)
		for i := 16 * ib; i < 16*ib+16; i++ {
			if dd == 0 {
				L[i] = 32
				continue
			}
			L[i] = byte(clampInt(nearestInt(x[i]/dd), -32, 31) + 32)
		}
	}
	for h := range 2 {
		ql := b[64*h : 64*h+64]
		qh := b[128+32*h : 128+32*h+32]
		Lh := L[128*h : 128*h+128]
		for l := range 32 {
			ql[l] = Lh[l]&0xf | Lh[l+64]&0xf<<4
			ql[l+32] = Lh[l+32]&0xf | Lh[l+96]&0xf<<4
			qh[l] = Lh[l]>>4 | Lh[l+32]>>4<<2 | Lh[l+64]>>4<<4 | Lh[l+96]>>4<<6
		}
	}
}
