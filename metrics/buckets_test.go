package metrics

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestBuckets125(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		max  int
		want []float64
	}{
		"one":        {1, []float64{1}},
		"four":       {4, []float64{1, 2}},
		"hundred":    {100, []float64{1, 2, 5, 10, 20, 50, 100}},
		"4096":       {4096, []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000}},
		"unknown":    {0, buckets125(defaultMaxModelLen)},
		"negative":   {-5, buckets125(defaultMaxModelLen)},
		"max int":    {math.MaxInt, buckets125(maxBucket)},
		"capped max": {maxBucket, buckets125(maxBucket)},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, c.want, buckets125(c.max))
		})
	}
	assert.Len(t, buckets125(defaultMaxModelLen), 19)
	assert.Equal(t, 1e6, buckets125(defaultMaxModelLen)[18])
	assert.Equal(t, 1e12, buckets125(maxBucket)[36])
}
