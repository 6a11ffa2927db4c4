package cpu

import (
	"fmt"
	"math/bits"
	"sync"
	"unsafe"

	"github.com/llmd/llmd/model/gguf"
)

// Weight is a 2-D weight matrix as stored in a GGUF file: Rows rows of Cols
// elements each, each row quantized independently in Type's blocks (row
// bytes = Type.RowBytes(Cols)). Data aliases the mapped file.
//
// The kernels read F32, F16 and BF16 data in place, as the host's words:
// like GGUF itself they assume a little-endian host.
//
// Where the CPU has tile kernels for the type (with AVX-512 VNNI: Q4_0,
// Q5_0, Q8_0, Q4_K, Q6_K and F16), NewWeight also keeps a copy of the rows
// repacked for them, in groups of sixteen rows (heap about the size of
// Data): MatMul reads that copy, Row and everything else read Data.
type Weight struct {
	Type       gguf.TensorType
	Rows, Cols int
	Data       []byte
	tiles      []byte // the rows repacked for the type's tile kernels; nil without
	// bf16 is set where tiles holds F16 or BF16 rows rounded to bfloat16
	// for the BF16 tile kernels (Config.F16MatMul "bf16"): MatMul then
	// rounds the activations to bfloat16 too.
	bf16 bool
}

// NewWeight checks that data holds exactly rows x cols of typ and returns the
// Weight (with its repacked copy, see Weight). It fails for a type model
// does not support, negative sizes, a cols that is not a whole number of
// typ's blocks, or the wrong number of bytes.
func NewWeight(typ gguf.TensorType, rows, cols int, data []byte) (Weight, error) {
	return newWeight(typ, rows, cols, data, packTiles)
}

// weightPack is how newWeight repacks a matrix.
type weightPack int

const (
	// packNone keeps no repacked copy: a matrix only ever read by rows
	// (Row), such as untied token embeddings, needs none.
	packNone weightPack = iota
	// packTiles repacks for the type's tile kernels, where there are any.
	packTiles
	// packBF16 is packTiles, but F16 and BF16 matrices whose columns are a
	// multiple of kernTileF16Cols are rounded to bfloat16 for the BF16
	// tile kernels (Config.F16MatMul "bf16").
	packBF16
)

// newWeight is NewWeight with the repacked copy that pack says.
func newWeight(typ gguf.TensorType, rows, cols int, data []byte, pack weightPack) (Weight, error) {
	if rows < 0 || cols < 0 {
		return Weight{}, fmt.Errorf("cpu: weight of %d x %d: negative size", rows, cols)
	}
	rb, err := typ.RowBytes(cols)
	if err != nil {
		return Weight{}, fmt.Errorf("cpu: weight of %d x %d %s: %w", rows, cols, typ, err)
	}
	hi, need := bits.Mul64(uint64(rows), uint64(rb))
	if hi != 0 || need != uint64(len(data)) {
		return Weight{}, fmt.Errorf("cpu: weight of %d x %d %s needs %d x %d bytes, got %d", rows, cols, typ, rows, rb, len(data))
	}
	w := Weight{Type: typ, Rows: rows, Cols: cols, Data: data}
	switch {
	case pack == packBF16 && (typ == gguf.TypeF16 || typ == gguf.TypeBF16) && cols%kernTileF16Cols == 0 && rows > 0:
		w.tiles, w.bf16 = kernPackAll(w, kernPackBF16, 32*cols), true
	case pack != packNone:
		w.tiles = kernTilePack(w)
	}
	return w, nil
}

// rowBytes returns the size of one row, checking that w is well formed (as
// NewWeight makes it); a malformed Weight is a programming error and panics.
func (w Weight) rowBytes() int {
	rb, err := w.Type.RowBytes(w.Cols)
	if err != nil || w.Rows < 0 || (w.Rows > 0 && len(w.Data)/w.Rows != rb) || len(w.Data) != w.Rows*rb {
		panic(fmt.Sprintf("cpu: malformed weight: %d x %d %s in %d bytes", w.Rows, w.Cols, w.Type, len(w.Data)))
	}
	return rb
}

// Row dequantizes row r of w into dst (len w.Cols) — for embedding lookups.
// It panics if r is out of range or dst is shorter than w.Cols; only
// dst[:w.Cols] is written.
func (w Weight) Row(dst []float32, r int) {
	rb := w.rowBytes()
	if r < 0 || r >= w.Rows {
		panic(fmt.Sprintf("cpu: row %d of a %d-row weight", r, w.Rows))
	}
	if len(dst) < w.Cols {
		panic(fmt.Sprintf("cpu: row of %d values into %d", w.Cols, len(dst)))
	}
	if err := gguf.Dequantize(w.Type, w.Data[r*rb:(r+1)*rb], dst[:w.Cols]); err != nil {
		panic(err) // unreachable: rowBytes checked the sizes
	}
}

// kernQK is the activation block size: activations are quantized to int8
// per 32 values for the quantized weight types, whose blocks (32) and
// sub-blocks (16 or 32 values) line up with it.
const kernQK = 32

// kernQKK is the values of a K-quant super-block (Q2_K .. Q6_K, IQ4_XS).
const kernQKK = 256

// kernTileBytes bounds the weight bytes of a row tile: the rows that every
// group of four tokens sweeps in turn, so that they come from memory once
// and from L2 after that (tests shrink it).
var kernTileBytes = 256 << 10

// MatMul computes out[t*w.Rows + r] = sum_c W[r][c] * x[t*w.Cols + c] for t
// in [0, n): x is n rows of w.Cols activations (row-major), out is n rows of
// w.Rows outputs. Each weight row is read once for all n tokens
// (matrix-matrix), and rows are split across the pool's workers (p may be
// nil: one thread). Supports every type model supports (F32, F16, BF16,
// Q4_0, Q5_0, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS).
//
// For the quantized types the activations are first quantized per 32
// values, as llama.cpp's Q8 activations: xq = x·(127/m) rounded half to
// even (in float32; m = max|x| of the block), with the float32 scale m/127,
// and a block whose m is below 1e-30 all zeros. Each weight block is then
// dotted in integers and scaled by the two block scales. That rounding
// dominates the error: for Gaussian activations the output is off by about
// 0.5% (relative, as a vector) from float64 products with the dequantized
// weights. F32, F16 and BF16 weights are dotted in float32 (about 1e-7),
// unless the Weight was packed for the BF16 tile kernels (Config.F16MatMul
// "bf16"): then F16 and BF16 weights and the activations are rounded to
// bfloat16 and the products added in float32 (about 3e-3).
//
// MatMul is batch-invariant: a token's outputs have the same bits whatever
// n is and wherever the token sits in x (on a given CPU), so batching,
// chunked prefill and recomputation never change what a sequence
// generates. x and out may be longer than needed; only their first n rows
// are used. MatMul panics if they are shorter or w is malformed.
func MatMul(p *Pool, out []float32, w Weight, x []float32, n int) {
	kernMatMul(p, kernSetFor(kernUse), out, w, x, n)
}

// MatOut is one product of MatMuls: Out = W times the activations.
type MatOut struct {
	Out []float32
	W   Weight
}

// MatMuls computes several products of the same n rows of activations x,
// each as MatMul computes it (the same bits), in one pass over the pool
// where their weights have tile kernels: the activations are quantized (or
// rounded to bfloat16) once, and the threads share one set of chunks of
// every matrix's groups. A layer's Q, K and V, or gate and up, then pay
// one hand-off and one barrier between them instead of one each. All the
// weights must have the same Cols.
func MatMuls(p *Pool, x []float32, n int, ms ...MatOut) {
	kernMatMuls(p, kernSetFor(kernUse), x, n, ms)
}

// kernMatMul is MatMul with the kernels of ks.
func kernMatMul(p *Pool, ks *kernSet, out []float32, w Weight, x []float32, n int) {
	kernMatMuls(p, ks, x, n, []MatOut{{Out: out, W: w}})
}

// kernMatMuls is MatMuls with the kernels of ks: the weights with tile
// kernels through one tile loop, the others one by one through the rows
// kernels.
func kernMatMuls(p *Pool, ks *kernSet, x []float32, n int, ms []MatOut) {
	if n <= 0 {
		return
	}
	lp := kernGetTileLoop(ks, x, n)
	defer lp.put()
	for _, m := range ms {
		w, out := m.W, m.Out
		rb := w.rowBytes() // panics on a malformed w
		if w.Rows == 0 {
			continue
		}
		if len(x) < n*w.Cols || len(out) < n*w.Rows || w.Cols != ms[0].W.Cols {
			panic(fmt.Sprintf("cpu: matmul of %d x %d with %d tokens: len(x) %d, len(out) %d, first cols %d",
				w.Rows, w.Cols, n, len(x), len(out), ms[0].W.Cols))
		}
		if lp.add(out, w) {
			continue
		}
		switch w.Type {
		case gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16:
			kernMatMulFloat(p, ks, out, w, rb, x, n)
		default:
			kernMatMulQuant(p, ks, out, w, rb, x, n)
		}
	}
	lp.exec(p)
}

// kernScratch holds a MatMul's quantized activations: n rows of cols int8
// values, and per 32-value block the scale d and d times the block's sum.
type kernScratch struct {
	xq     []int8
	xd, xs []float32
	xc     []int32 // the tile kernels' per-block words (kernTile.dc), or the kernLaneSums of the tokens a rows kernel takes
}

var kernScratchPool = sync.Pool{New: func() any { return new(kernScratch) }}

func kernGetScratch(values, blocks int) *kernScratch {
	s := kernScratchPool.Get().(*kernScratch)
	if cap(s.xq) < values {
		s.xq = alignedMake[int8](values)
	}
	if cap(s.xd) < blocks {
		s.xd = make([]float32, blocks)
		s.xs = make([]float32, blocks)
	}
	s.xq, s.xd, s.xs = s.xq[:values], s.xd[:blocks], s.xs[:blocks]
	return s
}

// lanes returns room for n int32s.
func (s *kernScratch) lanes(n int) []int32 {
	if cap(s.xc) < n {
		s.xc = make([]int32, n)
	}
	return s.xc[:n]
}

// kernMatMulQuant is MatMul for the block-quantized types without tile
// kernels.
func kernMatMulQuant(p *Pool, ks *kernSet, out []float32, w Weight, rb int, x []float32, n int) {
	cols, rows := w.Cols, w.Rows
	nb := cols / kernQK
	dot, dot4, dot8 := ks.dotQ[w.Type], ks.dotQ4[w.Type], ks.dotQ8[w.Type]
	sc := kernGetScratch(n*cols, n*nb)
	defer kernScratchPool.Put(sc)
	xq, xd, xs := sc.xq, sc.xd, sc.xs

	quantize := func(t0, t1 int) {
		for t := t0; t < t1; t++ {
			ks.quantize(xq[t*cols:(t+1)*cols], xd[t*nb:(t+1)*nb], xs[t*nb:(t+1)*nb], x[t*cols:(t+1)*cols])
		}
	}
	if n*cols >= 1<<15 {
		p.Run(n, quantize)
	} else {
		quantize(0, n)
	}

	// The tokens left after the groups of eight and four go one at a
	// time, through the rows kernel where there is one.
	one := 0
	if dot8 != nil {
		one = n / 8 * 8
	}
	if dot4 != nil {
		one += (n - one) / 4 * 4
	}
	rowsDot := ks.dotQRows[w.Type]
	var xc []int32
	if rowsDot != nil && ks.rowsSums[w.Type] {
		xc = sc.lanes((n - one) * cols / 4)
		for t := one; t < n; t++ {
			kernLaneSums(xc[(t-one)*cols/4:(t-one+1)*cols/4], xq[t*cols:(t+1)*cols])
		}
	}

	// Within a tile of rows (which stays in cache), eight tokens at a time
	// (then four, then one) sweep the rows: their activations stay in L1
	// while the weights come from L2, and from memory only for the first
	// eight. The kernels give a token the same bits.
	rowTile := max(1, kernTileBytes/max(rb, 1))
	p.Share(rows, kernGrain(p, rows, rowTile), func(r0, r1 int) {
		var res [4]float32
		var res8 [8]float32
		for rt := r0; rt < r1; rt += rowTile {
			re := min(r1, rt+rowTile)
			t := 0
			if dot8 != nil {
				for ; t+8 <= n; t += 8 {
					q, d, s := xq[t*cols:(t+8)*cols], xd[t*nb:(t+8)*nb], xs[t*nb:(t+8)*nb]
					for r := rt; r < re; r++ {
						dot8(&res8, w.Data[r*rb:(r+1)*rb], q, d, s)
						for i, v := range res8 {
							out[(t+i)*rows+r] = v
						}
					}
				}
			}
			if dot4 != nil {
				for ; t+4 <= n; t += 4 {
					q, d, s := xq[t*cols:(t+4)*cols], xd[t*nb:(t+4)*nb], xs[t*nb:(t+4)*nb]
					for r := rt; r < re; r++ {
						dot4(&res, w.Data[r*rb:(r+1)*rb], q, d, s)
						out[t*rows+r] = res[0]
						out[(t+1)*rows+r] = res[1]
						out[(t+2)*rows+r] = res[2]
						out[(t+3)*rows+r] = res[3]
					}
				}
			}
			for ; t < n; t++ {
				q, d, s := xq[t*cols:(t+1)*cols], xd[t*nb:(t+1)*nb], xs[t*nb:(t+1)*nb]
				if rowsDot != nil {
					var c []int32
					if xc != nil {
						c = xc[(t-one)*cols/4 : (t-one+1)*cols/4]
					}
					rowsDot(out[t*rows+rt:t*rows+re], w.Data[rt*rb:re*rb], rb, q, d, s, c)
					continue
				}
				for r := rt; r < re; r++ {
					out[t*rows+r] = dot(w.Data[r*rb:(r+1)*rb], q, d, s)
				}
			}
		}
	})
}

// kernMatMulFloat is MatMul for F32, F16 and BF16 weights, organised as
// kernMatMulQuant is, with F16 and BF16 converted to float32 in registers
// as the kernels go.
func kernMatMulFloat(p *Pool, ks *kernSet, out []float32, w Weight, rb int, x []float32, n int) {
	cols, rows := w.Cols, w.Rows
	var dot func(w []byte, x []float32) float32
	switch w.Type {
	case gguf.TypeF32:
		dot = func(w []byte, x []float32) float32 { return ks.dotF32(kernFloats(w), x) }
	case gguf.TypeF16:
		dot = ks.dotF16
	case gguf.TypeBF16:
		dot = ks.dotBF16
	}
	dot4, dot24 := ks.dotFloat4[w.Type], ks.dotFloat2x4[w.Type]
	rowTile := max(1, kernTileBytes/max(rb, 1))
	p.Share(rows, kernGrain(p, rows, rowTile), func(r0, r1 int) {
		var res [4]float32
		var res8 [8]float32
		for rt := r0; rt < r1; rt += rowTile {
			re := min(r1, rt+rowTile)
			t := 0
			if dot24 != nil && n >= 4 {
				// The first token reads the tile from memory, one row at a
				// time (the stream the prefetchers follow best); groups of
				// four tokens then find it in L2, two rows at a time. Of
				// the tokens left, three go as a group overlapping the one
				// before (a token's bits do not depend on the kernel that
				// computes them), one or two alone, below.
				xt := x[:cols]
				for r := rt; r < re; r++ {
					out[r] = dot(w.Data[r*rb:(r+1)*rb], xt)
				}
				for t = 1; n-t >= 3; t += 4 {
					s := min(t, n-4)
					xt := x[s*cols : (s+4)*cols]
					r := rt
					for ; r+2 <= re; r += 2 {
						dot24(&res8, w.Data[r*rb:(r+2)*rb], xt, cols)
						for i := range 4 {
							out[(s+i)*rows+r] = res8[i]
							out[(s+i)*rows+r+1] = res8[4+i]
						}
					}
					for ; r < re; r++ {
						dot4(&res, w.Data[r*rb:(r+1)*rb], xt, cols)
						for i := range 4 {
							out[(s+i)*rows+r] = res[i]
						}
					}
					t = s
				}
			}
			if dot4 != nil {
				for ; t+4 <= n; t += 4 {
					xt := x[t*cols : (t+4)*cols]
					for r := rt; r < re; r++ {
						dot4(&res, w.Data[r*rb:(r+1)*rb], xt, cols)
						out[t*rows+r] = res[0]
						out[(t+1)*rows+r] = res[1]
						out[(t+2)*rows+r] = res[2]
						out[(t+3)*rows+r] = res[3]
					}
				}
			}
			for ; t < n; t++ {
				xt := x[t*cols : (t+1)*cols]
				for r := rt; r < re; r++ {
					out[t*rows+r] = dot(w.Data[r*rb:(r+1)*rb], xt)
				}
			}
		}
	})
}

// kernGrain is the chunk MatMul shares n rows (or groups of rows) out in,
// tile of them fitting the cache: a tile, or less where that leaves fewer
// than four chunks per thread, so that a thread that starts late takes
// fewer.
func kernGrain(p *Pool, n, tile int) int {
	return max(1, min(tile, (n+4*p.Threads()-1)/(4*p.Threads())))
}

// kernFloats views little-endian float32 bytes as float32s.
func kernFloats(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// kernRowsFunc is a rows kernel (kernSet.dotQRows).
type kernRowsFunc func(out []float32, w []byte, rb int, xq []int8, xd, xs []float32, xc []int32)

// kernLaneSums sets xc[i] to -8 times the sum of xq[4i:4i+4], one int32 per
// VNNI lane of activations: the correction a rows kernel needs when it
// takes the weights' quants unsigned (Q6_K's q-32 becomes q, less 32·Σx:
// four times these).
func kernLaneSums(xc []int32, xq []int8) {
	for i := range xc {
		q := xq[4*i : 4*i+4 : 4*i+4]
		xc[i] = -8 * (int32(q[0]) + int32(q[1]) + int32(q[2]) + int32(q[3]))
	}
}

// kernSet is one implementation of the kernels. Every function takes
// exactly sized slices: a weight row and the matching activations.
type kernSet struct {
	// quantize turns one row of activations x into int8 values xq, with
	// per 32-value block the scale xd (x ≈ xd·xq) and xs = xd·Σxq.
	quantize func(xq []int8, xd, xs []float32, x []float32)
	// dotQ[t] returns the dot product of a weight row of type t with one
	// token's quantized activations.
	dotQ map[gguf.TensorType]func(w []byte, xq []int8, xd, xs []float32) float32
	// dotQ4[t], where present, does the same for four tokens at once (xq,
	// xd and xs hold four rows), reading the weight row once. It must give
	// each token exactly the bits dotQ[t] gives it (batch invariance).
	dotQ4 map[gguf.TensorType]func(res *[4]float32, w []byte, xq []int8, xd, xs []float32)
	// dotQ8[t], where present, does the same for eight tokens at once. It
	// too must give each token exactly the bits dotQ[t] gives it.
	dotQ8 map[gguf.TensorType]func(res *[8]float32, w []byte, xq []int8, xd, xs []float32)
	// dotQRows[t], where present, dots one token with each of len(out)
	// weight rows, rb bytes apart in w, giving each row exactly the bits
	// dotQ[t] gives it; xc is the token's kernLaneSums where rowsSums[t]
	// is set, else nil.
	dotQRows map[gguf.TensorType]kernRowsFunc
	rowsSums map[gguf.TensorType]bool
	// tile[t], where present, is how MatMul computes type t: the tile
	// kernels, over the weights repacked (kernel_tile.go). dotQ[t],
	// dotQ4[t] and dotQ8[t] then run them on one row, for the tests.
	tile map[gguf.TensorType]*kernTile
	// dotF32 returns Σ w[i]·x[i].
	dotF32 func(w, x []float32) float32
	// dotF16 and dotBF16 return the dot product of a row of half or bfloat16
	// values (as bytes) with x; f16ToF32 and bf16ToF32 convert such a row.
	dotF16, dotBF16     func(w []byte, x []float32) float32
	f16ToF32, bf16ToF32 func(dst []float32, w []byte)
	// f32ToF16 converts src to half floats in dst (two bytes each,
	// little-endian; len(dst) >= 2·len(src)), rounding to nearest even:
	// gguf.Float32ToHalf's bits at every level. An F16 KV cache stores
	// every key and value with it.
	f32ToF16 func(dst []byte, src []float32)
	// dotFloat4[t], where present, dots a row of F32, F16 or BF16 values
	// (as bytes) with the four rows of x that start stride values apart (x
	// holds at least 3·stride+len(w)/size values), giving each row the bits
	// dotF32, dotF16 or dotBF16 gives it.
	dotFloat4 map[gguf.TensorType]func(res *[4]float32, w []byte, x []float32, stride int)
	// tileF16, where set, is how MatMul computes F16 weights whose columns
	// are a multiple of kernTileF16Cols: the F16 tile kernels
	// (kernel_tilef16.go), tileF16[T] for T tokens.
	tileF16 *[kernTileF16Max + 1]kernTileF16Func
	// tileBF16, where set (CPUs with AVX512_BF16), is how MatMul computes
	// weights packed for the BF16 tile kernels (Weight.bf16); elsewhere
	// their Go models (kernTileBF16Gos) do, the same bits far slower.
	tileBF16 *[kernTileMax + 1]kernTileBF16Func
	// toBF16 sets dst[i] = kernBF16(src[i]) (len(dst) >= len(src)).
	toBF16 func(dst []uint16, src []float32)
	// dotFloat2x4[t], where present, is dotFloat4[t] for the two rows that
	// w holds (half its bytes each), res[0:4] the first's; each row gets
	// dotFloat4's bits.
	dotFloat2x4 map[gguf.TensorType]func(res *[8]float32, w []byte, x []float32, stride int)
}

// kernSets holds the implementation of each level that this build has;
// levels above kernLevelGo are filled in by the architecture's files, and
// any function they lack is taken from the level below.
var kernSets = [kernLevelAVX512 + 1]*kernSet{kernLevelGo: kernGoSet()}

func kernSetFor(l kernLevel) *kernSet {
	for ; l > kernLevelGo; l-- {
		if kernSets[l] != nil {
			return kernSets[l]
		}
	}
	return kernSets[kernLevelGo]
}

// kernRegister installs s as level l's implementation, completing it from the
// level below. A one-token dot and its four- and eight-token, rows and
// tile partners are taken together, never one from each level: they must
// add in the same order.
func kernRegister(l kernLevel, s *kernSet) {
	if l > kernLevelGo {
		below := kernSetFor(l - 1)
		if s.quantize == nil {
			s.quantize = below.quantize
		}
		if s.f16ToF32 == nil {
			s.f16ToF32 = below.f16ToF32
		}
		if s.bf16ToF32 == nil {
			s.bf16ToF32 = below.bf16ToF32
		}
		if s.f32ToF16 == nil {
			s.f32ToF16 = below.f32ToF16
		}
		if s.dotFloat4 == nil {
			s.dotFloat4 = map[gguf.TensorType]func(res *[4]float32, w []byte, x []float32, stride int){}
		}
		if s.dotF32 == nil {
			s.dotF32, s.dotFloat4[gguf.TypeF32] = below.dotF32, below.dotFloat4[gguf.TypeF32]
		}
		if s.dotFloat2x4 == nil {
			s.dotFloat2x4 = map[gguf.TensorType]func(res *[8]float32, w []byte, x []float32, stride int){}
		}
		if s.dotF16 == nil {
			s.dotF16, s.dotFloat4[gguf.TypeF16] = below.dotF16, below.dotFloat4[gguf.TypeF16]
			s.dotFloat2x4[gguf.TypeF16] = below.dotFloat2x4[gguf.TypeF16]
			s.tileF16 = below.tileF16
		}
		if s.tileBF16 == nil {
			s.tileBF16 = below.tileBF16
		}
		if s.toBF16 == nil {
			s.toBF16 = below.toBF16
		}
		if s.dotBF16 == nil {
			s.dotBF16, s.dotFloat4[gguf.TypeBF16] = below.dotBF16, below.dotFloat4[gguf.TypeBF16]
		}
		if s.dotQ == nil {
			s.dotQ = map[gguf.TensorType]func(w []byte, xq []int8, xd, xs []float32) float32{}
		}
		if s.dotQ4 == nil {
			s.dotQ4 = map[gguf.TensorType]func(res *[4]float32, w []byte, xq []int8, xd, xs []float32){}
		}
		if s.dotQ8 == nil {
			s.dotQ8 = map[gguf.TensorType]func(res *[8]float32, w []byte, xq []int8, xd, xs []float32){}
		}
		if s.dotQRows == nil {
			s.dotQRows = map[gguf.TensorType]kernRowsFunc{}
		}
		if s.rowsSums == nil {
			s.rowsSums = map[gguf.TensorType]bool{}
		}
		if s.tile == nil {
			s.tile = map[gguf.TensorType]*kernTile{}
		}
		for t, f := range below.dotQ {
			if s.dotQ[t] == nil {
				s.dotQ[t], s.dotQ4[t], s.dotQ8[t] = f, below.dotQ4[t], below.dotQ8[t]
				s.dotQRows[t], s.rowsSums[t], s.tile[t] = below.dotQRows[t], below.rowsSums[t], below.tile[t]
			}
		}
	}
	kernSets[l] = s
}
