package workload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// distKind is the shape of a [Dist].
type distKind uint8

const (
	distFixed distKind = iota
	distUniform
	distNormal
)

// Dist is a distribution of positive integers (token counts, turns). The
// zero Dist always samples 0; [ParseDist] returns only distributions whose
// samples are at least 1.
type Dist struct {
	kind distKind
	// a and b are the value (fixed), the bounds lo and hi inclusive
	// (uniform), or the mean and the standard deviation (normal).
	a, b float64
}

// Fixed returns the distribution that always samples n.
func Fixed(n int) Dist { return Dist{kind: distFixed, a: float64(n)} }

// Uniform returns the uniform distribution over lo..hi, both inclusive.
func Uniform(lo, hi int) Dist { return Dist{kind: distUniform, a: float64(lo), b: float64(hi)} }

// Normal returns the normal distribution of mean and stddev, rounded to
// the nearest integer and clamped to at least 1.
func Normal(mean, stddev float64) Dist { return Dist{kind: distNormal, a: mean, b: stddev} }

// ParseDist parses a distribution: "128" (always 128), "uniform:64-512"
// (64 to 512 inclusive, equally likely) or "normal:512,128" (mean 512,
// standard deviation 128, rounded, clamped to at least 1). Every sample
// is at least 1.
func ParseDist(s string) (Dist, error) {
	s = strings.TrimSpace(s)
	kind, args, ok := strings.Cut(s, ":")
	if !ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return Dist{}, fmt.Errorf("invalid distribution %q: want a count >= 1, uniform:LO-HI or normal:MEAN,STDDEV", s)
		}
		return Fixed(n), nil
	}
	switch kind {
	case "uniform":
		l, h, ok := strings.Cut(args, "-")
		lo, err1 := strconv.Atoi(strings.TrimSpace(l))
		hi, err2 := strconv.Atoi(strings.TrimSpace(h))
		if !ok || err1 != nil || err2 != nil {
			return Dist{}, fmt.Errorf("invalid distribution %q: want uniform:LO-HI, e.g. uniform:64-512", s)
		}
		if lo < 1 || hi < lo {
			return Dist{}, fmt.Errorf("invalid distribution %q: want 1 <= LO <= HI", s)
		}
		return Uniform(lo, hi), nil
	case "normal":
		m, d, ok := strings.Cut(args, ",")
		mean, err1 := strconv.ParseFloat(strings.TrimSpace(m), 64)
		sd, err2 := strconv.ParseFloat(strings.TrimSpace(d), 64)
		if !ok || err1 != nil || err2 != nil {
			return Dist{}, fmt.Errorf("invalid distribution %q: want normal:MEAN,STDDEV, e.g. normal:512,128", s)
		}
		if !(mean >= 1) || !(sd >= 0) || math.IsInf(mean, 0) || math.IsInf(sd, 0) {
			return Dist{}, fmt.Errorf("invalid distribution %q: want MEAN >= 1 and STDDEV >= 0", s)
		}
		return Normal(mean, sd), nil
	default:
		return Dist{}, fmt.Errorf("invalid distribution %q: unknown kind %q (want uniform or normal)", s, kind)
	}
}

// Sample draws one value from r.
func (d Dist) Sample(r *rand.Rand) int {
	switch d.kind {
	case distUniform:
		lo, hi := int(d.a), int(d.b)
		return lo + r.IntN(hi-lo+1)
	case distNormal:
		v := math.Round(d.a + d.b*r.NormFloat64())
		return int(max(v, 1))
	default:
		return int(d.a)
	}
}

// Mean returns the distribution's nominal mean (for normal, before
// rounding and clamping).
func (d Dist) Mean() float64 {
	switch d.kind {
	case distUniform:
		return (d.a + d.b) / 2
	default:
		return d.a
	}
}

// Min returns the smallest value d can sample.
func (d Dist) Min() int {
	switch d.kind {
	case distUniform:
		return int(d.a)
	case distNormal:
		if d.b == 0 {
			return int(max(math.Round(d.a), 1))
		}
		return 1
	default:
		return int(d.a)
	}
}

// String returns d in the syntax ParseDist accepts.
func (d Dist) String() string {
	switch d.kind {
	case distUniform:
		return fmt.Sprintf("uniform:%d-%d", int(d.a), int(d.b))
	case distNormal:
		return "normal:" + strconv.FormatFloat(d.a, 'g', -1, 64) + "," + strconv.FormatFloat(d.b, 'g', -1, 64)
	default:
		return strconv.Itoa(int(d.a))
	}
}

// Set parses s into d, so that a Dist is a pflag.Value.
func (d *Dist) Set(s string) error {
	v, err := ParseDist(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// Type names the flag's value type in help.
func (d *Dist) Type() string { return "dist" }

// MarshalText writes d as String does.
func (d Dist) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText parses what MarshalText wrote.
func (d *Dist) UnmarshalText(b []byte) error { return d.Set(string(b)) }

// errZeroDist is returned by Spec.Validate for a distribution left at its
// zero value where samples must be positive.
var errZeroDist = errors.New("is not set")
