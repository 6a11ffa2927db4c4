package upstream

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine"
)

// TestQueueOrder: the highest class goes first; within a class the
// tenants take turns, each tenant's requests in order; a removed request
// leaves the turns intact.
func TestQueueOrder(t *testing.T) {
	var q queue
	push := func(id, tenant string, p engine.Priority) *waiter {
		w := &waiter{id: id, tenant: tenant, prio: p, ready: make(chan *replica, 1)}
		q.push(w)
		return w
	}
	push("a1", "a", engine.PriorityFree)
	push("a2", "a", engine.PriorityFree)
	push("a3", "a", engine.PriorityFree)
	push("b1", "b", engine.PriorityFree)
	c1 := push("c1", "c", engine.PriorityFree)
	push("c2", "c", engine.PriorityFree)
	push("e1", "e", engine.PriorityEnterprise)
	push("s1", "s", engine.PriorityShadow)
	require.Equal(t, 8, q.n)
	require.Equal(t, 1, q.byPriority()[engine.PriorityEnterprise])
	require.True(t, q.remove(c1))
	require.False(t, q.remove(c1))
	var order []string
	for q.n > 0 {
		order = append(order, q.pop().id)
	}
	require.Equal(t, []string{"e1", "a1", "b1", "c2", "a2", "a3", "s1"}, order)
}

// TestQueueFailAll: every waiter gets the error.
func TestQueueFailAll(t *testing.T) {
	var q queue
	ws := []*waiter{{id: "1", tenant: "a", ready: make(chan *replica, 1)}, {id: "2", tenant: "b", ready: make(chan *replica, 1)}}
	for _, w := range ws {
		q.push(w)
	}
	q.failAll(errNoReplica)
	for _, w := range ws {
		require.Nil(t, <-w.ready)
		require.ErrorIs(t, w.err, errNoReplica)
	}
	require.Zero(t, q.n)
}
