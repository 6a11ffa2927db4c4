package daemon

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRoundRate: a gossiped prefill rate keeps two significant digits, so
// that it changes the published state only when it moves.
func TestRoundRate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want float64 }{
		{0, 0}, {-3, 0}, {math.NaN(), 0}, {math.Inf(1), 0},
		{7.26, 7.3}, {6543.4, 6500}, {6551, 6600}, {12_345, 12_000}, {98_765, 99_000},
	} {
		assert.InDelta(t, c.want, roundRate(c.in), 1e-9, "%v", c.in)
	}
}
