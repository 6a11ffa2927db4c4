package cpu

import "time"

// ReadBandwidth measures the memory's read bandwidth in GB/s as the
// kernels see it: threads threads of a Pool take the dot product of the
// two halves of each 256 KiB chunk of a 1 GiB buffer with MatMul's kernel
// level's vector code, for about d after one pass that faults the pages
// in. A decode only reads its weights, so this is the bound its rate is
// set against (the roofline). The buffer is larger than the last-level
// caches these VMs report (up to 480 MiB), and the loads are vector ones:
// a scalar loop of 8-byte loads measured 19 GB/s on the Intel VMs where
// this measures 30, one load per word keeping too few cache misses in
// flight.
func ReadBandwidth(threads int, d time.Duration) float64 {
	const (
		span  = 1 << 30
		chunk = 1 << 16 // floats per task
	)
	buf := alignedMake[float32](span / 4)
	for i := range buf {
		buf[i] = float32(i & 7)
	}
	pool := NewPool(threads)
	defer pool.Close()
	dot := kernSetFor(kernUse).dotF32
	sums := make([]float32, len(buf)/chunk)
	pass := func() {
		pool.Run(len(sums), func(start, end int) {
			for i := start; i < end; i++ {
				c := buf[i*chunk : (i+1)*chunk]
				sums[i] = dot(c[:chunk/2], c[chunk/2:])
			}
		})
	}
	pass()
	start := time.Now()
	n := 0
	for n == 0 || time.Since(start) < d {
		pass()
		n++
	}
	return float64(n) * span / time.Since(start).Seconds() / 1e9
}
