package gguf

import (
	"encoding/binary"
	"math"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDequantizeMatchesGGML checks the K-quant and IQ4 decoders bit for bit
// against llama.cpp's own: testdata/ggml_dequant_ref.bin holds, per type,
// {u32 type, u32 n}, n values of random blocks (random bytes, moderate f16
// scales) and the float32 values that ggml-quants.c's dequantize_row_*
// (built without FMA contraction) made of them.
func TestDequantizeMatchesGGML(t *testing.T) {
	data, err := os.ReadFile("testdata/ggml_dequant_ref.bin")
	require.NoError(t, err)
	seen := map[TensorType]bool{}
	for len(data) > 0 {
		require.GreaterOrEqual(t, len(data), 8)
		typ := TensorType(binary.LittleEndian.Uint32(data))
		n := int(binary.LittleEndian.Uint32(data[4:]))
		size, err := typ.RowBytes(n)
		require.NoError(t, err)
		blocks, want := data[8:8+size], data[8+size:8+size+4*n]
		data = data[8+size+4*n:]
		got := make([]float32, n)
		require.NoError(t, Dequantize(typ, blocks, got))
		for i, v := range got {
			require.Equal(t, binary.LittleEndian.Uint32(want[4*i:]), math.Float32bits(v), "%s value %d", typ, i)
		}
		seen[typ] = true
	}
	require.Equal(t, map[TensorType]bool{TypeQ2_K: true, TypeQ3_K: true, TypeQ5_K: true, TypeIQ4_NL: true, TypeIQ4_XS: true}, seen)
}

func TestKQuantHandBuiltBlocks(t *testing.T) {
	le := binary.LittleEndian
	// Q2_K: d = 1, dmin = 0.5; sub-block 0: sc 3, m 2; sub-block 9 (n 1,
	// j 0, h 1): sc 1, m 4. qs[0] = 0b11_10_01_00: value 0 is 0, value 32
	// (j 1) is 1, value 64 is 2, value 96 is 3.
	q2 := make([]byte, 84)
	le.PutUint16(q2[80:], 0x3c00)
	le.PutUint16(q2[82:], 0x3800)
	q2[0], q2[2], q2[4], q2[6] = 3|2<<4, 1, 1, 1
	q2[9] = 1 | 4<<4
	q2[16] = 0b11_10_01_00
	q2[16+32+16] = 0b11 // value 144 (n 1, h 1, l 0, j 0) is 3

	// Q3_K: d = 0.5; scale 0 = 34 (+2), scale 5 = 63 (+31), scale 12 = 0
	// (−32). Value 0: qs bits 01, hmask bit 0 set: 1. Value 1: 00, clear:
	// −4. Value 80 (n 0, j 2, h 1, l 0, sub-block 5): bits 11 at 4..5 of
	// qs[16], hmask bit 2 of hmask[16] set: 3. Value 192 (n 1, j 2,
	// sub-block 12): qs[32] bits 4..5 = 10, hmask bit 6 clear: −2.
	q3 := make([]byte, 110)
	le.PutUint16(q3[108:], 0x3800)
	sc := q3[96:108]
	sc[0] = 34 & 0xf
	sc[8] |= 34 >> 4
	sc[5] = 63 & 0xf
	sc[9] |= (63 >> 4) << 2
	for i := range 16 {
		if i != 0 && i != 5 && i != 12 { // the other scales: 32 (zero)
			sc[8+i%4] |= 2 << (2 * (i / 4))
		}
	}
	q3[32] = 0b01
	q3[64] = 0b10 << 4
	q3[0] = 1
	q3[32+16] = 0b11 << 4
	q3[16] = 1 << 2

	// IQ4_XS: d = 0.25; sub-block 0 scale 33 (+1), the others 0 (−32).
	// qs[0] = 0xf0: value 0 is code 0 (−127), value 16 code 15 (113).
	xs := make([]byte, 136)
	le.PutUint16(xs, 0x3400)
	xs[4] = 33 & 0xf
	le.PutUint16(xs[2:], 33>>4)
	xs[8] = 0xf0
	xs[8+48] = 0x08 // sub-block 3, value 96: code 8 (1)

	cases := map[string]quantHandCase{
		"Q2_K":   {TypeQ2_K, q2, map[int]float32{0: 3*0 - 0.5*2, 1: -1, 32: 1*1 - 0, 64: 2, 96: 3, 144: 1*3 - 0.5*4, 145: -2}},
		"Q3_K":   {TypeQ3_K, q3, map[int]float32{0: 0.5 * 2 * 1, 1: 0.5 * 2 * -4, 80: 0.5 * 31 * 3, 81: 0.5 * 31 * -4, 64: 0, 192: 0.5 * -32 * -2, 16: 0}},
		"IQ4_XS": {TypeIQ4_XS, xs, map[int]float32{0: 0.25 * -127, 16: 0.25 * 113, 1: 0.25 * -127, 96: 0.25 * -32 * 1, 32: 0.25 * -32 * -127}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			out := make([]float32, c.typ.BlockSize())
			require.NoError(t, Dequantize(c.typ, c.block, out))
			for i, want := range c.want {
				require.Equal(t, want, out[i], "element %d", i)
			}
		})
	}
}
