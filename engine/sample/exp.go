package sample

import "math"

// Constants for fastExp: 64*log2(e), and ln(2)/64 split into a part that
// is exact in few bits and the rest (Cody and Waite).
const (
	log2e64 = 92.332482616893657
	ln2Hi64 = 0.693359375 / 64
	ln2Lo64 = -2.12194440e-4 / 64
	// roundMagic is 1.5 * 2^23: adding it to a float32 of magnitude below
	// 2^22 rounds that to an integer, held in the low bits of the sum.
	roundMagic     = 0x1.8p23
	roundMagicBits = 0x4B400000
)

// exp2Table holds the float32 bits of 2^(j/64) for j in [0, 64).
var exp2Table = func() (t [64]uint32) {
	for j := range t {
		t[j] = math.Float32bits(float32(math.Exp2(float64(j) / 64)))
	}
	return t
}()

// fastExp returns e^x for x <= 0 in float32, within 3e-7 relative error.
// It returns 0 below -87 (where float32 underflows), for -Inf and for NaN,
// so callers need not screen their input. It writes x = (64n+j) ln2/64 + r
// with |r| <= ln2/128, so e^x = 2^n 2^(j/64) e^r: 2^n goes into the
// exponent bits, 2^(j/64) comes from a table and e^r from 1 + r + r^2/2.
// The explicit float32 conversions keep the compiler from fusing
// operations, so the result is the same on every CPU.
func fastExp(x float32) float32 {
	if !(x >= -87) {
		return 0
	}
	x = min(x, 0)
	t := float32(x*log2e64) + roundMagic // round(64 x log2 e) in the low bits
	k := int32(math.Float32bits(t) - roundMagicBits)
	fk := float32(t - roundMagic)
	r := float32(float32(x-float32(fk*ln2Hi64)) - float32(fk*ln2Lo64))
	p := float32(float32(float32(r*0.5)+1)*r) + 1
	return math.Float32frombits(exp2Table[uint32(k)&63]+uint32(k>>6)<<23) * p
}

// expConsts are fastExp's float32 constants, in the order the AVX-512
// kernel loads them (simd_amd64.s), so that both use the same bits.
var expConsts = [...]float32{log2e64, roundMagic, ln2Hi64, ln2Lo64, 0.5, 1, -87}

// blockLen is the number of weights in a block: expShifted sums the
// weights of each block, and a draw walks the block sums before it scans
// the one block where the drawn point lies.
const blockLen = 256

// numBlocks returns the number of blocks of n weights, the last one
// possibly short.
func numBlocks(n int) int {
	return (n + blockLen - 1) / blockLen
}

// blockOf returns block b of w.
func blockOf(w []float32, b int) []float32 {
	return w[b*blockLen : min((b+1)*blockLen, len(w))]
}

// expShifted sets dst[i] = fastExp((src[i]-m)*invT) for every i, sets
// sums[b] to the sum of block b of dst (entries b*blockLen up to the next
// block) and returns the sum of the block sums, added in order. m must be
// at least every src[i], and invT >= 0, so the exponent is never
// positive; sums must hold numBlocks(len(src)) entries.
//
// A block's sum is taken in float64 in a fixed order, the same with and
// without SIMD (see laneSums), so the sums and therefore the draws are the
// same on every CPU.
func expShifted(dst, src []float32, m, invT float32, sums []float64) float64 {
	sums = sums[:numBlocks(len(src))]
	expBlocks(dst[:len(src)], src, m, invT, sums)
	var z float64
	for _, b := range sums {
		z += b
	}
	return z
}

// expBlocksGo is expShifted's kernel in Go: the weights and the block
// sums, without the total; len(dst) is len(src). It is fastExp inlined by hand into the loop,
// since the vocabulary-wide passes spend most of their time here; a test
// checks that the two agree bit for bit.
func expBlocksGo(dst, src []float32, m, invT float32, sums []float64) {
	for b := range sums {
		in, out := blockOf(src, b), blockOf(dst, b)
		var lanes laneSums
		for i, l := range in {
			x := float32(l-m) * invT
			var w float32
			if x >= -87 {
				t := float32(x*log2e64) + roundMagic
				k := int32(math.Float32bits(t) - roundMagicBits)
				fk := float32(t - roundMagic)
				r := float32(float32(x-float32(fk*ln2Hi64)) - float32(fk*ln2Lo64))
				p := float32(float32(float32(r*0.5)+1)*r) + 1
				w = math.Float32frombits(exp2Table[uint32(k)&63]+uint32(k>>6)<<23) * p
			}
			out[i] = w
			lanes[i%numLanes] += float64(w)
		}
		sums[b] = lanes.fold()
	}
}

// numLanes is the number of partial sums of a block's sum: the float32
// lanes of one AVX-512 register.
const numLanes = 16

// laneSums are the partial sums of a block: weight i of the block is added
// to lane i%16, each lane in order. The AVX-512 kernel keeps the same
// lanes and folds them in the same order, so both give the same bits.
type laneSums [numLanes]float64

// fold returns the sum of the lanes: lane j+8 is added to lane j, then
// lane j+4, j+2 and j+1 (j below the distance), and the sum is lane 0.
func (l *laneSums) fold() float64 {
	for d := numLanes / 2; d > 0; d /= 2 {
		for j := range d {
			l[j] += l[j+d]
		}
	}
	return l[0]
}

// laneSum returns the sum of w in float64 in the order of a block's sum
// (see laneSums).
func laneSum(w []float32) float64 {
	var lanes laneSums
	for i, x := range w {
		lanes[i%numLanes] += float64(x)
	}
	return lanes.fold()
}
