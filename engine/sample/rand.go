package sample

// golden is 2^64 divided by the golden ratio, splitmix64's increment.
const golden = 0x9e3779b97f4a7c15

// mix64 is splitmix64's output function, a bijection that scrambles every
// input bit into every output bit.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// uniform returns a number in [0, 1) that depends only on seed and step:
// output step of a splitmix64 stream whose start is the scrambled seed.
func uniform(seed uint64, step int) float64 {
	x := mix64(mix64(seed) + golden*(uint64(step)+1))
	return float64(x>>11) * 0x1p-53
}
