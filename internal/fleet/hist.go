package fleet

import (
	"encoding/json"
	"math"
	"time"
)

// histGrowth is the ratio between consecutive bucket bounds of a hist: a
// percentile read from it is within half of 1% of the true value.
const histGrowth = 1.01

var logGrowth = math.Log(histGrowth)

// histBuckets covers 1 µs to about 2.7 hours.
const histBuckets = 2300

// hist is a latency histogram with logarithmic buckets: constant memory
// and time per sample however many samples an hour of traffic brings.
// Bucket 0 holds everything under 1 µs.
type hist struct {
	counts   [histBuckets]uint64
	n        uint64
	sum      float64 // seconds
	min, max time.Duration
}

func (h *hist) add(d time.Duration) {
	if d < 0 {
		d = 0
	}
	i := 0
	if d >= time.Microsecond {
		i = min(1+int(math.Log(float64(d)/float64(time.Microsecond))/logGrowth), histBuckets-1)
	}
	h.counts[i]++
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

// quantile returns the q-quantile (0..1): the geometric middle of the
// bucket holding it, clamped to the exact minimum and maximum.
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
		if i == 0 {
			return h.min
		}
		lo := float64(time.Microsecond) * math.Exp(float64(i-1)*logGrowth)
		mid := time.Duration(math.Round(lo * math.Sqrt(histGrowth)))
		return min(max(mid, h.min), h.max)
	}
	return h.max
}

func (h *hist) percentiles() Percentiles {
	p := Percentiles{Count: h.n, Max: h.max}
	if h.n > 0 {
		p.Mean = time.Duration(h.sum / float64(h.n) * float64(time.Second))
		p.P50, p.P90, p.P99 = h.quantile(0.50), h.quantile(0.90), h.quantile(0.99)
	}
	return p
}

// Percentiles summarises a latency: the 50th, 90th and 99th percentiles
// (within 0.5%), the mean and the maximum of Count samples.
type Percentiles struct {
	P50, P90, P99 time.Duration
	Mean, Max     time.Duration
	Count         uint64
}

// MarshalJSON writes milliseconds: {"p50_ms": 12.3, ...}.
func (p Percentiles) MarshalJSON() ([]byte, error) {
	ms := func(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }
	return json.Marshal(struct {
		P50   float64 `json:"p50_ms"`
		P90   float64 `json:"p90_ms"`
		P99   float64 `json:"p99_ms"`
		Mean  float64 `json:"mean_ms"`
		Max   float64 `json:"max_ms"`
		Count uint64  `json:"count"`
	}{ms(p.P50), ms(p.P90), ms(p.P99), ms(p.Mean), ms(p.Max), p.Count})
}
