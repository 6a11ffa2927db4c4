package cpu

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/model/gguf"
)

var (
	kernFlag    = flag.String("kern", "", "kernel level for the benchmarks: go, avx2 or avx512 (default: the best this CPU has)")
	kernThreads = flag.Int("kern.threads", 2, "worker threads for the benchmarks")
)

// kernBenchLevel applies -kern for the length of a benchmark.
func kernBenchLevel(b *testing.B) {
	if *kernFlag == "" {
		return
	}
	for l := kernLevelGo; l <= kernLevelAVX512; l++ {
		if l.String() == *kernFlag {
			if l > kernBest {
				b.Skipf("this CPU has no %s", l)
			}
			old := kernUse
			kernUse = l
			b.Cleanup(func() { kernUse = old })
			return
		}
	}
	b.Fatalf("unknown -kern %q", *kernFlag)
}

// kernBenchSpan is how many bytes of weights a benchmark cycles through, so
// that each MatMul reads its weights from memory, not from the last level
// cache, as a model's layers do.
const kernBenchSpan = 256 << 20

// BenchmarkMatMul reports weight bandwidth: SetBytes is one matrix's bytes,
// so MB/s is how fast the weights stream through, whatever n is.
func BenchmarkMatMul(b *testing.B) {
	types := []gguf.TensorType{gguf.TypeF16, gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeQ4_K, gguf.TypeQ6_K,
		gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeQ5_K, gguf.TypeIQ4_NL, gguf.TypeIQ4_XS}
	shapes := [][2]int{{2048, 2048}, {896, 4864}, {4096, 4096}}
	for _, typ := range types {
		for _, shape := range shapes {
			rows, cols := shape[0], shape[1]
			for _, n := range []int{1, 8, 32} {
				name := fmt.Sprintf("type=%s/rows=%d/cols=%d/n=%d", strings.ToLower(typ.String()), rows, cols, n)
				b.Run(name, func(b *testing.B) {
					kernBenchLevel(b)
					ws := kernBenchWeights(b, typ, rows, cols)
					x := alignedMake[float32](n * cols)
					copy(x, kernRandFloats(rand.New(rand.NewPCG(1, 1)), n*cols, 1))
					out := make([]float32, n*rows)
					pool := NewPool(*kernThreads)
					defer pool.Close()
					b.SetBytes(int64(len(ws[0].Data)))
					i := 0
					for b.Loop() {
						MatMul(pool, out, ws[i%len(ws)], x, n)
						i++
					}
				})
			}
		}
	}
}

// kernBenchWeights returns copies of one random matrix spanning
// kernBenchSpan bytes in all.
func kernBenchWeights(b *testing.B, typ gguf.TensorType, rows, cols int) []Weight {
	w, _ := kernRandWeight(b, rand.New(rand.NewPCG(2, 2)), typ, rows, cols)
	ws := make([]Weight, max(1, kernBenchSpan/len(w.Data)))
	for i := range ws {
		data := make([]byte, len(w.Data))
		copy(data, w.Data)
		var err error
		ws[i], err = NewWeight(typ, rows, cols, data)
		require.NoError(b, err)
	}
	return ws
}

// BenchmarkMemoryRead is the reference for BenchmarkMatMul's MB/s: the
// pool's threads each stream through their share of kernBenchSpan bytes
// with the float dot kernel, as fast as the memory system delivers.
// streams=2 (cpu.ReadBandwidth's measure) dots the two halves of each 256
// KiB chunk, two sequential streams per thread; streams=1 dots each 16 KiB
// of the chunk with one vector in L1, one stream per thread, as a
// one-stream tile kernel reads its weights.
func BenchmarkMemoryRead(b *testing.B) {
	for _, streams := range []int{2, 1} {
		b.Run(fmt.Sprintf("threads=%d/streams=%d", *kernThreads, streams), func(b *testing.B) {
			kernBenchLevel(b)
			buf := make([]float32, kernBenchSpan/4)
			for i := range buf {
				buf[i] = float32(i & 7)
			}
			pool := NewPool(*kernThreads)
			defer pool.Close()
			ks := kernSetFor(kernUse)
			const chunk = 1 << 16 // floats per task: 256 KiB
			const piece = 1 << 12 // floats of one dot with one stream: 16 KiB
			y := buf[:piece:piece]
			sums := make([]float32, len(buf)/chunk)
			b.SetBytes(kernBenchSpan)
			for b.Loop() {
				pool.Run(len(sums), func(start, end int) {
					for i := start; i < end; i++ {
						c := buf[i*chunk : (i+1)*chunk]
						if streams == 2 {
							sums[i] = ks.dotF32(c[:chunk/2], c[chunk/2:])
							continue
						}
						var s float32
						for p := 0; p < chunk; p += piece {
							s += ks.dotF32(c[p:p+piece], y)
						}
						sums[i] = s
					}
				})
			}
		})
	}
}

// BenchmarkKernDot measures one token's dot product with one weight row of
// 4096 values, in L1: the kernels' compute speed. MB/s is weight bytes.
func BenchmarkKernDot(b *testing.B) {
	const cols = 4096
	rng := rand.New(rand.NewPCG(3, 3))
	x := kernRandFloats(rng, 8*cols, 1)
	xq, xd, xs := kernQuantized(x, 8, cols)
	for _, typ := range kernTestTypes[3:] {
		w := kernRandBlocks(rng, typ, cols/typ.BlockSize())
		for _, level := range kernLevels() {
			ks := kernSetFor(level)
			b.Run(fmt.Sprintf("type=%s/kern=%s/n=1", strings.ToLower(typ.String()), level), func(b *testing.B) {
				b.SetBytes(int64(len(w)))
				dot := ks.dotQ[typ]
				for b.Loop() {
					dot(w, xq[:cols], xd[:cols/kernQK], xs[:cols/kernQK])
				}
			})
			if dot4 := ks.dotQ4[typ]; dot4 != nil {
				b.Run(fmt.Sprintf("type=%s/kern=%s/n=4", strings.ToLower(typ.String()), level), func(b *testing.B) {
					b.SetBytes(int64(len(w)))
					var res [4]float32
					for b.Loop() {
						dot4(&res, w, xq[:4*cols], xd[:4*cols/kernQK], xs[:4*cols/kernQK])
					}
				})
			}
			if dot8 := ks.dotQ8[typ]; dot8 != nil {
				b.Run(fmt.Sprintf("type=%s/kern=%s/n=8", strings.ToLower(typ.String()), level), func(b *testing.B) {
					b.SetBytes(int64(len(w)))
					var res [8]float32
					for b.Loop() {
						dot8(&res, w, xq, xd, xs)
					}
				})
			}
		}
	}
	wf := kernRandFloats(rng, cols, 1)
	float := map[gguf.TensorType][]byte{gguf.TypeF32: make([]byte, 4*cols), gguf.TypeF16: make([]byte, 2*cols)}
	for i, v := range wf {
		binary.LittleEndian.PutUint32(float[gguf.TypeF32][4*i:], math.Float32bits(v))
		binary.LittleEndian.PutUint16(float[gguf.TypeF16][2*i:], gguf.Float32ToHalf(v))
	}
	for _, typ := range []gguf.TensorType{gguf.TypeF32, gguf.TypeF16} {
		w := float[typ]
		for _, level := range kernLevels() {
			ks := kernSetFor(level)
			b.Run(fmt.Sprintf("type=%s/kern=%s/n=1", strings.ToLower(typ.String()), level), func(b *testing.B) {
				b.SetBytes(int64(len(w)))
				for b.Loop() {
					if typ == gguf.TypeF32 {
						ks.dotF32(wf, x[:cols])
					} else {
						ks.dotF16(w, x[:cols])
					}
				}
			})
			if dot4 := ks.dotFloat4[typ]; dot4 != nil {
				b.Run(fmt.Sprintf("type=%s/kern=%s/n=4", strings.ToLower(typ.String()), level), func(b *testing.B) {
					b.SetBytes(int64(len(w)))
					var res [4]float32
					for b.Loop() {
						dot4(&res, w, x, cols)
					}
				})
			}
		}
	}
}
