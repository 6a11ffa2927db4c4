// Package hashmix holds the small integer hash that the simulated executor,
// the workload generators and the fleet simulator share. It imports nothing.
package hashmix

// Mix64 is the splitmix64 finalizer: a fast, well-mixed bijection of 64-bit
// integers (Steele, Lea and Flood, "Fast splittable pseudorandom number
// generators", 2014).
func Mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
