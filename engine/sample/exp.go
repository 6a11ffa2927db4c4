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

// expShifted sets dst[i] = fastExp((src[i]-m)*invT) for every i and
// returns the sum; it also adds each weight above floor to
// hist[distance(w)>>19] (a floor of 1 leaves hist alone). It is fastExp
// inlined by hand into the loop, since the vocabulary-wide passes spend
// most of their time here; a test checks that the two agree bit for bit.
// m must be at least every src[i], and invT >= 0, so the exponent is never
// positive.
func expShifted(dst, src []float32, m, invT float32, hist *[numBuckets]float64, floor float32) float64 {
	dst = dst[:len(src)]
	var z float64
	for i, l := range src {
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
		dst[i] = w
		z += float64(w)
		if w > floor {
			hist[distance(w)>>19] += float64(w)
		}
	}
	return z
}
