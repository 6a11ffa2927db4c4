package cluster

import (
	"sort"

	"github.com/zeebo/xxh3"
)

// VirtualNodes is the number of points each member has on the ring.
const VirtualNodes = 64

// ring is a consistent-hash ring over member ids: each id owns VirtualNodes
// points xxh3(id, seed i); a key belongs to the first point at or after it,
// wrapping. It is immutable once built, so readers need no lock.
type ring struct {
	ids    []string
	points []uint64 // sorted
	owners []int32  // owners[i] indexes ids for points[i]
}

// newRing builds the ring of ids (duplicates ignored).
func newRing(ids []string) *ring {
	ids = append([]string(nil), ids...)
	sort.Strings(ids)
	uniq := ids[:0]
	for i, id := range ids {
		if i == 0 || id != ids[i-1] {
			uniq = append(uniq, id)
		}
	}
	r := &ring{ids: uniq}
	type point struct {
		h     uint64
		owner int32
	}
	pts := make([]point, 0, len(uniq)*VirtualNodes)
	for o, id := range uniq {
		for v := range VirtualNodes {
			pts = append(pts, point{xxh3.HashStringSeed(id, uint64(v)), int32(o)})
		}
	}
	// Ties (vanishingly rare) are broken by owner so the order is
	// deterministic.
	sort.Slice(pts, func(i, j int) bool {
		if pts[i].h != pts[j].h {
			return pts[i].h < pts[j].h
		}
		return pts[i].owner < pts[j].owner
	})
	r.points = make([]uint64, len(pts))
	r.owners = make([]int32, len(pts))
	for i, p := range pts {
		r.points[i], r.owners[i] = p.h, p.owner
	}
	return r
}

// walk calls fn with each distinct id in ring order starting at the owner
// of key, until fn returns false or every id was visited.
func (r *ring) walk(key uint64, fn func(id string) bool) {
	if r == nil || len(r.points) == 0 {
		return
	}
	start := sort.Search(len(r.points), func(i int) bool { return r.points[i] >= key })
	seen := make([]bool, len(r.ids))
	left := len(r.ids)
	for i := 0; i < len(r.points) && left > 0; i++ {
		o := r.owners[(start+i)%len(r.points)]
		if seen[o] {
			continue
		}
		seen[o] = true
		left--
		if !fn(r.ids[o]) {
			return
		}
	}
}

// owner returns the id owning key, or "" on an empty ring.
func (r *ring) owner(key uint64) string {
	var id string
	r.walk(key, func(s string) bool { id = s; return false })
	return id
}
