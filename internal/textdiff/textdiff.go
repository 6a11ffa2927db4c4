// Package textdiff compares token sequences: the edit distance between two
// answers, as shadow traffic reports it. It imports nothing of llmd's.
package textdiff

// EditDistance returns the Levenshtein distance between a and b: the
// fewest insertions, deletions and substitutions of one token that turn a
// into b. It takes O(len(a)*len(b)) time and O(min(len(a), len(b)))
// memory; see [EditDistanceMax] to bound the work.
func EditDistance(a, b []int32) int {
	return EditDistanceMax(a, b, -1)
}

// EditDistanceMax is [EditDistance] bounded by limit: it returns the
// distance when it is at most limit, else limit+1 (a result above limit
// means "more than limit"). A negative limit is no bound. It computes only
// the cells within limit of the diagonal and stops once every cell of a
// row exceeds limit, so it takes O((2*limit+1)*min(len(a), len(b))) time;
// memory is O(min(len(a), len(b))).
func EditDistanceMax(a, b []int32, limit int) int {
	// Common prefix and suffix cost nothing.
	for len(a) > 0 && len(b) > 0 && a[0] == b[0] {
		a, b = a[1:], b[1:]
	}
	for len(a) > 0 && len(b) > 0 && a[len(a)-1] == b[len(b)-1] {
		a, b = a[:len(a)-1], b[:len(b)-1]
	}
	if len(a) < len(b) {
		a, b = b, a // b, the shorter, indexes the row buffers
	}
	n, m := len(a), len(b)
	// The distance is at most n: substitute b's tokens, insert the rest.
	bound := n
	if limit >= 0 && limit < n {
		bound = limit
	}
	inf := bound + 1 // "more than bound"; cells are capped at it
	if n-m > bound {
		return inf
	}
	if m == 0 {
		return n // n <= bound here
	}

	// prev and cur are rows i-1 and i of the distance matrix: cell j is
	// the distance between a[:i] and b[:j]. In row i only the cells j in
	// [i-bound, i+bound] can be at most bound; the cell just past each
	// end of that band is set to inf, so that the next row reads no stale
	// value.
	prev, cur := make([]int, m+1), make([]int, m+1)
	for j := range prev {
		prev[j] = min(j, inf)
	}
	for i := 1; i <= n; i++ {
		lo, hi := max(i-bound, 1), min(i+bound, m)
		if lo == 1 {
			cur[0] = min(i, inf)
		} else {
			cur[lo-1] = inf
		}
		rowMin := cur[lo-1]
		ai := a[i-1]
		for j := lo; j <= hi; j++ {
			v := prev[j-1] // substitute, or keep an equal token
			if ai != b[j-1] {
				v++
			}
			v = min(v, prev[j]+1, cur[j-1]+1, inf) // delete a[i-1], insert b[j-1]
			cur[j] = v
			rowMin = min(rowMin, v)
		}
		if hi < m {
			cur[hi+1] = inf
		}
		if rowMin > bound {
			// Distances never fall along a path through the matrix.
			return inf
		}
		prev, cur = cur, prev
	}
	return prev[m]
}
