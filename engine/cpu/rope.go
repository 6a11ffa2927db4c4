package cpu

import (
	"fmt"
	"math"

	"github.com/llmd/llmd/model"
)

// YaRN's correction range, in rotations over the original context, as
// llama.cpp sets them for llama and qwen2 (yarn_beta_fast, yarn_beta_slow).
const (
	yarnBetaFast = 32
	yarnBetaSlow = 1
)

// rope rotates query and key heads by their position, as ggml_rope_ext does
// for llama (adjacent pairs, "NORM") and qwen2 (halves, "NEOX").
//
// Pair i (i < dims/2) turns by pos*freq[i] radians, and both cosine and sine
// are scaled by mscale. freq folds in everything that does not depend on
// the position: base^(-2i/dims), the rope_freqs factors (divided out), and
// linear or YaRN context scaling.
type rope struct {
	dims   int // rotated values per head (rope.dimension_count)
	neox   bool
	freq   []float64
	mscale float64
}

// newRope derives the rotation of spec. factors are rope_freqs.weight's
// values (nil when the model has none), one per pair.
func newRope(spec model.Spec, factors []float32) (*rope, error) {
	n := spec.RopeDims
	if n < 2 || n%2 != 0 || n > spec.HeadDim {
		return nil, fmt.Errorf("cpu: RoPE dimension count %d must be even, at least 2 and at most the head dimension %d", n, spec.HeadDim)
	}
	if factors != nil && len(factors) != n/2 {
		return nil, fmt.Errorf("cpu: rope_freqs has %d values, want %d", len(factors), n/2)
	}
	r := &rope{dims: n, neox: spec.RopeNeox, freq: make([]float64, n/2), mscale: 1}
	freqScale, ext := 1.0, 0.0
	sc := spec.RopeScaling
	switch sc.Type {
	case "", "none":
	case "linear":
		freqScale = 1 / sc.Factor
	case "yarn":
		freqScale, ext = 1/sc.Factor, 1
	default:
		return nil, fmt.Errorf("cpu: RoPE scaling type %q is not supported (supported: linear, yarn)", sc.Type)
	}
	if !(freqScale > 0) || math.IsInf(freqScale, 0) {
		return nil, fmt.Errorf("cpu: RoPE scaling factor %v is invalid", sc.Factor)
	}
	// YaRN (ggml_rope_yarn_corr_dims): pairs below lo keep their trained
	// frequency (extrapolation), pairs above hi are interpolated, and
	// those between ramp linearly; magnitudes grow by 0.1·ln(factor).
	var lo, hi float64
	if ext != 0 {
		orig := sc.OriginalContext
		if orig <= 0 {
			orig = spec.ContextLength
		}
		corr := func(rot float64) float64 {
			return float64(n) * math.Log(float64(orig)/(rot*2*math.Pi)) / (2 * math.Log(spec.RopeBase))
		}
		lo = max(0, math.Floor(corr(yarnBetaFast)))
		hi = min(float64(n-1), math.Ceil(corr(yarnBetaSlow)))
		r.mscale = 1 + 0.1*math.Log(1/freqScale)
	}
	for i := range r.freq {
		theta := math.Pow(spec.RopeBase, -2*float64(i)/float64(n))
		if factors != nil {
			if !(factors[i] > 0) {
				return nil, fmt.Errorf("cpu: rope_freqs value %d is %v, want a positive number", i, factors[i])
			}
			theta /= float64(factors[i])
		}
		scale := freqScale
		if ext != 0 {
			y := (float64(i) - lo) / max(0.001, hi-lo)
			mix := (1 - min(1, max(0, y))) * ext
			scale = freqScale*(1-mix) + mix
		}
		r.freq[i] = theta * scale
	}
	return r, nil
}

// angles fills cos and sin (dims/2 values each) for position pos.
func (r *rope) angles(pos int, cos, sin []float32) {
	p := float64(pos)
	for i, f := range r.freq {
		s, c := math.Sincos(p * f)
		cos[i], sin[i] = float32(c*r.mscale), float32(s*r.mscale)
	}
}

// apply rotates the first dims values of each of heads heads of length
// headDim in x by the angles from [rope.angles].
func (r *rope) apply(x []float32, heads, headDim int, cos, sin []float32) {
	half := r.dims / 2
	for h := range heads {
		v := x[h*headDim : h*headDim+r.dims]
		if r.neox {
			a, b := v[:half], v[half:]
			for i := range half {
				x0, x1 := a[i], b[i]
				a[i] = x0*cos[i] - x1*sin[i]
				b[i] = x0*sin[i] + x1*cos[i]
			}
			continue
		}
		for i := range half {
			x0, x1 := v[2*i], v[2*i+1]
			v[2*i] = x0*cos[i] - x1*sin[i]
			v[2*i+1] = x0*sin[i] + x1*cos[i]
		}
	}
}
