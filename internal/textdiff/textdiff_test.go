package textdiff

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// naive is the textbook Levenshtein distance over the full matrix.
func naive(a, b []int32) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			sub := d[i-1][j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			d[i][j] = min(sub, d[i-1][j]+1, d[i][j-1]+1)
		}
	}
	return d[len(a)][len(b)]
}

func tokens(s string) []int32 {
	out := make([]int32, 0, len(s))
	for _, r := range s {
		out = append(out, r)
	}
	return out
}

func TestEditDistance(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		a, b string
		want int
	}{
		"both empty":         {"", "", 0},
		"one empty":          {"", "abc", 3},
		"other empty":        {"abcd", "", 4},
		"equal":              {"abc", "abc", 0},
		"one substitution":   {"abc", "axc", 1},
		"one insertion":      {"abc", "abxc", 1},
		"one deletion":       {"abc", "ac", 1},
		"kitten sitting":     {"kitten", "sitting", 3},
		"reversed":           {"abcdef", "fedcba", 6},
		"shared affixes":     {"xxabcyy", "xxcbayy", 2},
		"no token in common": {"aaaa", "bbb", 4},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a, b := tokens(tc.a), tokens(tc.b)
			require.Equal(t, tc.want, EditDistance(a, b))
			require.Equal(t, tc.want, EditDistance(b, a), "symmetric")
		})
	}
}

func TestEditDistanceMax(t *testing.T) {
	t.Parallel()
	a, b := tokens("kitten"), tokens("sitting") // distance 3
	for limit, want := range map[int]int{-1: 3, 0: 1, 1: 2, 2: 3, 3: 3, 4: 3, 100: 3} {
		require.Equal(t, want, EditDistanceMax(a, b, limit), "limit %d", limit)
	}
	// The lengths alone exceed the limit.
	require.Equal(t, 3, EditDistanceMax(tokens("a"), tokens("abcdef"), 2))
	require.Equal(t, 0, EditDistanceMax(nil, nil, 0))
}

// TestEditDistanceProperty checks both functions against the full-matrix
// distance on random sequences over a small alphabet (so that tokens
// often match).
func TestEditDistanceProperty(t *testing.T) {
	t.Parallel()
	seq := rapid.SliceOfN(rapid.Int32Range(0, 3), 0, 40)
	rapid.Check(t, func(t *rapid.T) {
		a, b := seq.Draw(t, "a"), seq.Draw(t, "b")
		want := naive(a, b)
		if got := EditDistance(a, b); got != want {
			t.Fatalf("EditDistance = %d, want %d", got, want)
		}
		limit := rapid.IntRange(-1, 45).Draw(t, "limit")
		wantMax := want
		if limit >= 0 && want > limit {
			wantMax = limit + 1
		}
		if got := EditDistanceMax(a, b, limit); got != wantMax {
			t.Fatalf("EditDistanceMax(limit %d) = %d, want %d (distance %d)", limit, got, wantMax, want)
		}
	})
}

func BenchmarkEditDistance(b *testing.B) {
	for _, n := range []int{256, 2048} {
		x, y := make([]int32, n), make([]int32, n)
		for i := range x {
			x[i] = int32(i % 97)
			y[i] = int32(i % 89)
		}
		b.Run(fmt.Sprintf("tokens=%d/limit=none", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				EditDistance(x, y)
			}
		})
		b.Run(fmt.Sprintf("tokens=%d/limit=64", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				EditDistanceMax(x, y, 64)
			}
		})
	}
}
