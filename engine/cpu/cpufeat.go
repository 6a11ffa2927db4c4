package cpu

// kernLevel names the instruction set the matrix kernels use.
type kernLevel int

const (
	kernLevelGo     kernLevel = iota // portable Go, on every CPU
	kernLevelAVX2                    // amd64 AVX2 with FMA and F16C
	kernLevelAVX512                  // amd64 AVX-512 F/BW/VL with VNNI, on top of AVX2
)

func (l kernLevel) String() string {
	switch l {
	case kernLevelAVX2:
		return "avx2"
	case kernLevelAVX512:
		return "avx512"
	}
	return "go"
}

// kernBest is the best level this CPU (and build) supports; kernUse is the
// level MatMul uses, kernBest unless a test lowers it to compare kernels.
var (
	kernBest = kernDetect()
	kernUse  = kernBest
)
