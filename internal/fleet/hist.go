package fleet

import (
	"encoding/json"
	"math"
	"math/bits"
	"time"
)

// subBits is the number of mantissa bits a hist keeps below each power of
// two: 128 buckets an octave, each 1/128 (0.8%) wide, so a percentile read
// from the middle of its bucket is within 0.4% of the true value.
const subBits = 7

// histBuckets covers every non-negative int64 nanosecond count.
const histBuckets = (64 - subBits + 1) << subBits

// hist is a latency histogram with log-linear buckets (as HdrHistogram):
// constant memory and a few instructions per sample, however many samples
// an hour of traffic brings.
type hist struct {
	counts   [histBuckets]uint64
	n        uint64
	sum      float64 // seconds
	min, max time.Duration
}

// bucket returns the bucket of v nanoseconds: values below 2^subBits have
// a bucket each; above, the power of two and the next subBits bits.
func bucket(v uint64) int {
	if v < 1<<subBits {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1
	return (shift+1)<<subBits + int(v>>shift) - 1<<subBits
}

// lower returns the smallest value of bucket i and its width.
func lower(i int) (lo, width uint64) {
	if i < 1<<subBits {
		return uint64(i), 1
	}
	shift := i>>subBits - 1
	return uint64(i&(1<<subBits-1)+1<<subBits) << shift, 1 << shift
}

func (h *hist) add(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucket(uint64(d))]++
	if h.n == 0 || d < h.min {
		h.min = d
	}
	if d > h.max {
		h.max = d
	}
	h.n++
	h.sum += d.Seconds()
}

func (h *hist) merge(o *hist) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// quantile returns the q-quantile (0..1): the middle of the bucket holding
// it, clamped to the exact minimum and maximum.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen < rank {
			continue
		}
		lo, width := lower(i)
		mid := time.Duration(lo + width/2)
		return min(max(mid, h.min), h.max)
	}
	return h.max
}

func (h *hist) percentiles() Percentiles {
	p := Percentiles{Count: h.n, Max: h.max}
	if h.n > 0 {
		p.Mean = time.Duration(h.sum / float64(h.n) * float64(time.Second))
		p.P50, p.P90, p.P95, p.P99 = h.quantile(0.50), h.quantile(0.90), h.quantile(0.95), h.quantile(0.99)
	}
	return p
}

// Percentiles summarises a latency: the 50th, 90th, 95th and 99th
// percentiles (within 0.4%), the mean and the maximum of Count samples.
type Percentiles struct {
	P50, P90, P95, P99 time.Duration
	Mean, Max          time.Duration
	Count              uint64
}

// MarshalJSON writes milliseconds: {"p50_ms": 12.3, ...}.
func (p Percentiles) MarshalJSON() ([]byte, error) {
	ms := func(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }
	return json.Marshal(struct {
		P50   float64 `json:"p50_ms"`
		P90   float64 `json:"p90_ms"`
		P95   float64 `json:"p95_ms"`
		P99   float64 `json:"p99_ms"`
		Mean  float64 `json:"mean_ms"`
		Max   float64 `json:"max_ms"`
		Count uint64  `json:"count"`
	}{ms(p.P50), ms(p.P90), ms(p.P95), ms(p.P99), ms(p.Mean), ms(p.Max), p.Count})
}
