package gguf

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestQuantTypeTable(t *testing.T) {
	cases := map[TensorType]struct {
		name         string
		elems, bytes int
	}{
		TypeF32:    {"F32", 1, 4},
		TypeF16:    {"F16", 1, 2},
		TypeBF16:   {"BF16", 1, 2},
		TypeQ4_0:   {"Q4_0", 32, 18},
		TypeQ5_0:   {"Q5_0", 32, 22},
		TypeQ8_0:   {"Q8_0", 32, 34},
		TypeQ4_K:   {"Q4_K", 256, 144},
		TypeQ6_K:   {"Q6_K", 256, 210},
		TypeQ2_K:   {"Q2_K", 256, 84},
		TypeQ3_K:   {"Q3_K", 256, 110},
		TypeQ5_K:   {"Q5_K", 256, 176},
		TypeIQ4_NL: {"IQ4_NL", 32, 18},
		TypeIQ4_XS: {"IQ4_XS", 256, 136},
	}
	for typ, c := range cases {
		require.Equal(t, c.name, typ.String())
		require.True(t, typ.Supported())
		require.Equal(t, c.elems, typ.BlockSize(), c.name)
		require.Equal(t, c.bytes, typ.BlockBytes(), c.name)
		n, err := typ.RowBytes(4 * c.elems)
		require.NoError(t, err)
		require.Equal(t, 4*c.bytes, n)
		parsed, err := ParseTensorType(c.name)
		require.NoError(t, err)
		require.Equal(t, typ, parsed)
	}
	require.Equal(t, uint32(30), uint32(TypeBF16))
	require.Equal(t, "Q4_1", TensorType(3).String())
	require.Equal(t, "type(99)", TensorType(99).String())
	require.False(t, TensorType(3).Supported())
	require.Zero(t, TensorType(3).BlockSize())

	_, err := TypeQ8_0.RowBytes(33)
	require.Error(t, err)
	_, err = TypeQ8_0.RowBytes(-32)
	require.Error(t, err)
	_, err = TypeQ8_0.RowBytes(math.MaxInt - 31)
	require.Error(t, err, "overflow")
	_, err = TensorType(3).RowBytes(32)
	require.Error(t, err)
	_, err = ParseTensorType("q4_1")
	require.ErrorContains(t, err, "q4_1")
	typ, err := ParseTensorType("q4_k")
	require.NoError(t, err)
	require.Equal(t, TypeQ4_K, typ)
}

func TestQuantHalf(t *testing.T) {
	cases := map[string]struct {
		f float32
		h uint16
	}{
		"one":              {1, 0x3c00},
		"minus two":        {-2, 0xc000},
		"half":             {0.5, 0x3800},
		"max":              {65504, 0x7bff},
		"overflow":         {65520, 0x7c00}, // rounds up to infinity
		"smallest normal":  {6.103515625e-05, 0x0400},
		"smallest subnorm": {5.960464477539063e-08, 0x0001},
		"tie to even zero": {2.9802322387695312e-08, 0x0000},
		"tie up to 2 sub":  {1.4901161193847656e-07, 0x0002},       // 2.5 units -> 2
		"round mantissa":   {1.0009765625 + 0.00048828125, 0x3c02}, // tie -> even
		"inf":              {float32(math.Inf(-1)), 0xfc00},
		"zero":             {0, 0},
	}
	for name, c := range cases {
		require.Equal(t, c.h, Float32ToHalf(c.f), name)
		if name != "overflow" && name != "tie to even zero" && name != "tie up to 2 sub" && name != "round mantissa" {
			require.Equal(t, c.f, HalfToFloat32(c.h), name)
		}
	}
	require.True(t, math.IsNaN(float64(HalfToFloat32(Float32ToHalf(float32(math.NaN()))))))
	for h := range 1 << 16 { // every finite half survives a round trip
		f := HalfToFloat32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		require.Equal(t, uint16(h), Float32ToHalf(f), "half %#04x", h)
	}
	require.Equal(t, uint16(0x3f80), float32ToBF16(1))
	require.Equal(t, uint16(0x3f81), float32ToBF16(math.Float32frombits(0x3f80c000))) // above the tie
	require.Equal(t, uint16(0x3f80), float32ToBF16(math.Float32frombits(0x3f808000))) // tie to even
}

// quantHandCase is a hand-built block and values computed by hand from
// ggml's layout: want maps element index to value.
type quantHandCase struct {
	typ   TensorType
	block []byte
	want  map[int]float32
}

func quantHandCases() map[string]quantHandCase {
	// Q4_0: d = 0.5; qs[0] = 0x9f: y[0] = (15-8)·0.5, y[16] = (9-8)·0.5;
	// the rest 0x88: zero.
	q40 := make([]byte, 18)
	binary.LittleEndian.PutUint16(q40, 0x3800)
	for j := range 16 {
		q40[2+j] = 0x88
	}
	q40[2] = 0x9f
	q40[3] = 0x10 // y[1] = (0-8)·0.5, y[17] = (1-8)·0.5

	// Q5_0: d = 0.25; qh bit 0 and bit 16 set; qs[0] = 0x3f:
	// y[0] = (15|16)-16 = 15 → 3.75; y[16] = (3|16)-16 = 3 → 0.75;
	// other qs 0 and qh bits clear: (0-16)·0.25 = -4.
	q50 := make([]byte, 22)
	binary.LittleEndian.PutUint16(q50, 0x3400)
	binary.LittleEndian.PutUint32(q50[2:], 1|1<<16)
	q50[6] = 0x3f

	// Q8_0: d = 2; qs[0] = -3, qs[31] = 127.
	q80 := make([]byte, 34)
	binary.LittleEndian.PutUint16(q80, 0x4000)
	q80[2] = byte(0xfd)
	q80[33] = 127

	// Q4_K: d = 1, dmin = 0.5. Sub-block 0: sc 2, m 4; sub-block 1: sc 3,
	// m 1; sub-block 4: sc 5, m 33 (its high bits live in bytes 0 and 4).
	q4k := make([]byte, 144)
	binary.LittleEndian.PutUint16(q4k, 0x3c00)
	binary.LittleEndian.PutUint16(q4k[2:], 0x3800)
	s := q4k[4:16]
	s[0] = 2                   // sc0 | (sc4>>4)<<6 = 2 | 0
	s[1] = 3                   // sc1
	s[4] = 4 | 2<<6            // m0 | (m4>>4)<<6
	s[5] = 1                   // m1
	s[8] = 5&0xf | (33&0xf)<<4 // sc4 low | m4 low << 4
	q4k[16] = 0x7a             // chunk 0, l 0: y[0] low 10, y[32] high 7
	q4k[16+64] = 0x03          // chunk 2, l 0: y[128] low 3, y[160] high 0

	// Q6_K: d = 0.5; scales sc[0]=2, sc[2]=-1, sc[4]=3, sc[6]=1, sc[8]=4.
	// ql[0] = 0x5f, qh[0] = 0b11_10_01_10: q1 = (15|2<<4)-32 = 15,
	// q2 (ql[32] = 0) = (0|1<<4)-32 = -16, q3 = (5|2<<4)-32 = 5,
	// q4 = (0|3<<4)-32 = 16. Second half: ql[64] = 0x21, qh[32] = 3:
	// y[128] = (1|3<<4)-32 = 17, y[192] = (2|0)-32 = -30.
	q6k := make([]byte, 210)
	binary.LittleEndian.PutUint16(q6k[208:], 0x3800)
	sc := q6k[192:208]
	sc[0], sc[2], sc[4], sc[6], sc[8] = 2, 0xff, 3, 1, 4
	q6k[0] = 0x5f
	q6k[128] = 0xe6
	q6k[64] = 0x21
	q6k[128+32] = 0x03

	return map[string]quantHandCase{
		"Q4_0": {TypeQ4_0, q40, map[int]float32{0: 3.5, 16: 0.5, 1: -4, 17: -3.5, 2: 0, 31: 0}},
		"Q5_0": {TypeQ5_0, q50, map[int]float32{0: 3.75, 16: 0.75, 1: -4, 17: -4, 31: -4}},
		"Q8_0": {TypeQ8_0, q80, map[int]float32{0: -6, 1: 0, 31: 254}},
		"Q4_K": {TypeQ4_K, q4k, map[int]float32{
			0: 1*2*10 - 0.5*4, 1: -0.5 * 4, // sub-block 0
			32: 1*3*7 - 0.5*1, 33: -0.5 * 1, // sub-block 1
			64: 0, 127: 0, // sub-blocks 2, 3: zero scale and min
			128: 1*5*3 - 0.5*33, 129: -0.5 * 33, // sub-block 4
			160: 0, 255: 0,
		}},
		"Q6_K": {TypeQ6_K, q6k, map[int]float32{
			0: 0.5 * 2 * 15, 1: 0.5 * 2 * -32, 16: 0, // sc[1] = 0
			32: 0.5 * -1 * -16, 64: 0.5 * 3 * 5, 96: 0.5 * 1 * 16,
			128: 0.5 * 4 * 17, 129: 0.5 * 4 * -32, 192: 0,
		}},
	}
}

func TestQuantHandBuiltBlocks(t *testing.T) {
	for name, c := range quantHandCases() {
		t.Run(name, func(t *testing.T) {
			out := make([]float32, c.typ.BlockSize())
			require.NoError(t, Dequantize(c.typ, c.block, out))
			for i, want := range c.want {
				require.Equal(t, want, out[i], "element %d", i)
			}
		})
	}
}

func TestQuantDequantizeChecksSizes(t *testing.T) {
	require.Error(t, Dequantize(TypeQ8_0, make([]byte, 33), make([]float32, 32)))
	require.Error(t, Dequantize(TypeQ8_0, make([]byte, 34), make([]float32, 31)))
	require.Error(t, Dequantize(TensorType(3), make([]byte, 20), make([]float32, 32)))
	require.NoError(t, Dequantize(TypeQ8_0, nil, nil))
	_, err := Quantize(TypeQ4_K, make([]float32, 255))
	require.Error(t, err)
}

// quantTolerance returns the largest error type t may make on a block
// whose largest magnitude is amax: half a quantization step, plus the
// rounding of the block scale to F16, plus a margin for clamping at the
// top of the range (Q4_0/Q5_0 map the block maximum to -8/-16 and clamp
// +8/+16 to 7/15: up to one step).
func quantTolerance(t TensorType, x float32, amax float32) float32 {
	switch t {
	case TypeF32:
		return 0
	case TypeF16:
		return float32(math.Abs(float64(x)))/2048 + 6e-8
	case TypeBF16:
		return float32(math.Abs(float64(x))) / 256
	case TypeQ8_0:
		return amax*(0.5/127) + amax/1024
	case TypeQ4_0:
		return amax/8 + amax/512
	case TypeQ5_0:
		return amax/16 + amax/512
	case TypeQ4_K:
		// step ≤ (max−min)/15 ≤ 2·amax/15 with a 6-bit scale rounded up,
		// offset off by up to half a dmin step.
		return amax * (2.0/15 + 2.0/63)
	case TypeQ6_K:
		// A sub-block holding ±amax clamps its scale from −128 to 127 and
		// its +32 to 31: just over amax/32.
		return amax*(1.0/32) + amax/64
	case TypeQ5_K:
		return amax * (2.0/31 + 2.0/63)
	case TypeQ2_K:
		// step ≤ 2·amax/3, scales rounded up in 4 bits, offset off by up
		// to half a dmin step (amax/15).
		return amax * (2.0/3 + 2.0/15)
	case TypeQ3_K:
		// A sub-block's largest magnitude maps to −4, so the other sign
		// can clamp from +4 to 3: one step, amax/4, plus the 6-bit scale
		// rounding.
		return amax*(1.0/4) + amax/16
	case TypeIQ4_NL, TypeIQ4_XS:
		// The block maximum maps to −127; +127 on the other side clamps
		// to the codebook's 113 (14/127); IQ4_XS's 6-bit sub-block scale
		// adds up to a 64th.
		return amax*(14.0/127) + amax/32
	}
	return 0
}

var quantAllTypes = []TensorType{TypeF32, TypeF16, TypeBF16, TypeQ4_0, TypeQ5_0, TypeQ8_0, TypeQ4_K, TypeQ6_K,
	TypeQ2_K, TypeQ3_K, TypeQ5_K, TypeIQ4_NL, TypeIQ4_XS}

func TestQuantRoundTripPrecision(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 4096
	in := make([]float32, n)
	for i := range in {
		in[i] = float32(rng.NormFloat64())
		if i%997 == 0 {
			in[i] *= 8 // outliers
		}
	}
	for i := 512; i < 768; i++ {
		in[i] = 0 // an all-zero K block
	}
	for i := 768; i < 1024; i++ {
		in[i] = 0.25 + 0.01*float32(i%7) // all positive
	}
	for _, typ := range quantAllTypes {
		t.Run(typ.String(), func(t *testing.T) {
			raw, err := Quantize(typ, in)
			require.NoError(t, err)
			want, _ := typ.RowBytes(n)
			require.Len(t, raw, want)
			out := make([]float32, n)
			require.NoError(t, Dequantize(typ, raw, out))
			quantRequireClose(t, typ, in, out)
		})
	}
}

// quantRequireClose checks got against want within typ's precision, block
// by block (sub-block for K types), and reports the relative RMS error.
func quantRequireClose(t *testing.T, typ TensorType, want, got []float32) {
	t.Helper()
	require.Len(t, got, len(want))
	blk := max(typ.BlockSize(), 1)
	var se, sx float64
	for b := 0; b < len(want); b += blk {
		var amax float32
		for _, v := range want[b : b+blk] {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		for i := b; i < b+blk; i++ {
			d := math.Abs(float64(got[i] - want[i]))
			tol := quantTolerance(typ, want[i], amax)
			if d > float64(tol)*1.0001 {
				t.Fatalf("%s: element %d: got %v, want %v (error %g > tolerance %g, block max %g)", typ, i, got[i], want[i], d, tol, amax)
			}
			se += d * d
			sx += float64(want[i]) * float64(want[i])
		}
	}
	t.Logf("%s: relative RMS error %.5f", typ, math.Sqrt(se/max(sx, 1e-30)))
}

// TestQuantRelativeRMS checks the average quality of each type on
// Gaussian data, which the worst-case bounds above do not.
func TestQuantRelativeRMS(t *testing.T) {
	limits := map[TensorType]float64{
		TypeF32: 0, TypeF16: 5e-4, TypeBF16: 4e-3, TypeQ8_0: 0.01,
		TypeQ6_K: 0.03, TypeQ5_0: 0.06, TypeQ4_0: 0.12, TypeQ4_K: 0.12,
		TypeQ5_K: 0.06, TypeQ3_K: 0.25, TypeQ2_K: 0.45, TypeIQ4_NL: 0.12, TypeIQ4_XS: 0.12,
	}
	rng := rand.New(rand.NewPCG(3, 4))
	in := make([]float32, 1<<14)
	for i := range in {
		in[i] = float32(rng.NormFloat64() * 0.02)
	}
	for typ, limit := range limits {
		raw, err := Quantize(typ, in)
		require.NoError(t, err)
		out := make([]float32, len(in))
		require.NoError(t, Dequantize(typ, raw, out))
		var se, sx float64
		for i := range in {
			d := float64(out[i] - in[i])
			se += d * d
			sx += float64(in[i]) * float64(in[i])
		}
		rel := math.Sqrt(se / sx)
		require.LessOrEqual(t, rel, limit, "%s relative RMS error", typ)
	}
}

func TestQuantHostileValuesDoNotPanic(t *testing.T) {
	special := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), math.MaxFloat32, -math.MaxFloat32, 1e-40, 0}
	in := make([]float32, 512)
	for i := range in {
		in[i] = special[i%len(special)]
	}
	for _, typ := range quantAllTypes {
		raw, err := Quantize(typ, in)
		require.NoError(t, err)
		require.NoError(t, Dequantize(typ, raw, make([]float32, len(in))))
	}
	// Random bytes dequantize without panicking.
	rng := rand.New(rand.NewPCG(5, 6))
	for _, typ := range quantAllTypes {
		n := 512
		size, _ := typ.RowBytes(n)
		raw := make([]byte, size)
		for i := range raw {
			raw[i] = byte(rng.Uint32())
		}
		require.NoError(t, Dequantize(typ, raw, make([]float32, n)))
	}
}

func BenchmarkQuantDequantize(b *testing.B) {
	in := make([]float32, 1<<16)
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range in {
		in[i] = float32(rng.NormFloat64())
	}
	out := make([]float32, len(in))
	for _, typ := range quantAllTypes {
		raw, _ := Quantize(typ, in)
		b.Run(typ.String(), func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				_ = Dequantize(typ, raw, out)
			}
		})
	}
}
