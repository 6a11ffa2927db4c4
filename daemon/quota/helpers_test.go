package quota

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeClock is a clock tests move by hand. It is safe for concurrent use.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock(t time.Time) *fakeClock { return &fakeClock{t: t} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// t0 is a fixed instant in the middle of a UTC day.
var t0 = time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)

func newTestMemory(t testing.TB, clock *fakeClock) *Memory {
	m := NewMemory(MemoryConfig{Now: clock.Now})
	t.Cleanup(func() { _ = m.Close() })
	return m
}

var idSeq atomic.Uint64

// newID returns a unique reservation id.
func newID() string { return fmt.Sprintf("req-%d", idSeq.Add(1)) }

// tenantName returns a tenant unique to the test, so tests can share a Redis.
func tenantName(t testing.TB) string { return fmt.Sprintf("t%d-%s", idSeq.Add(1), t.Name()) }

func reserve(t testing.TB, l Limiter, tenant string, lim Limits, tokens int64) (Decision, string) {
	t.Helper()
	id := newID()
	d, err := l.Reserve(context.Background(), Request{ID: id, Tenant: tenant, Limits: lim, Tokens: tokens})
	require.NoError(t, err)
	return d, id
}
