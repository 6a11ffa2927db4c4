package fleet

import (
	"time"

	"github.com/llmd/llmd/internal/workload"
)

// queued is an entry of a time-ordered queue.
type queued[T any] struct {
	at  time.Time
	seq uint64 // ties: first pushed, first out
	v   T
}

// timeQueue is a min-heap by time, then by push order.
type timeQueue[T any] []queued[T]

type (
	turnQueue   = timeQueue[workload.Item]
	finishQueue = timeQueue[finish]
)

func (q timeQueue[T]) Len() int { return len(q) }
func (q timeQueue[T]) Less(i, j int) bool {
	if c := q[i].at.Compare(q[j].at); c != 0 {
		return c < 0
	}
	return q[i].seq < q[j].seq
}
func (q timeQueue[T]) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *timeQueue[T]) Push(x any)   { *q = append(*q, x.(queued[T])) }
func (q *timeQueue[T]) Pop() any {
	old := *q
	x := old[len(old)-1]
	old[len(old)-1] = queued[T]{}
	*q = old[:len(old)-1]
	return x
}
