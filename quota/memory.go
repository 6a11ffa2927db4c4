package quota

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultTTL is the reservation TTL when a config leaves it 0.
const DefaultTTL = 10 * time.Minute

// MemoryConfig configures [NewMemory].
type MemoryConfig struct {
	// Now is the clock; nil means time.Now. Tests pass a fake.
	Now func() time.Time
	// TTL is how long a reservation may stay unsettled before it expires
	// (its slot freed, its tokens charged as reserved); 0 means DefaultTTL.
	// It is counted in whole milliseconds, at least 1.
	TTL time.Duration
}

// Memory is the in-process [Limiter], for a single node. It is safe for
// concurrent use: tenants are spread over shards, and each tenant has its
// own lock, so different tenants do not contend. Reserve and Reconcile do
// not allocate once a tenant's state exists and its reservation table has
// reached its working size.
//
// Memory keeps one small state per tenant ever seen, and per tenant only
// the reservations made within the last TTL.
type Memory struct {
	now    func() time.Time
	ttlMs  int64
	seed   maphash.Seed
	shards [shardCount]shard

	allow, deny atomic.Uint64
	closed      atomic.Bool
}

const shardCount = 64

type shard struct {
	mu      sync.RWMutex
	tenants map[string]*memTenant
	_       [64]byte // keep shards' locks on separate cache lines
}

// memTenant is one tenant's state and its unsettled reservations; add and
// remove keep the state's held overage (over) the sum of theirs.
//
// Locking: mu guards every field.
type memTenant struct {
	mu sync.Mutex
	tenantState
	byID  map[string]int32 // reservation id -> index in slots
	slots []reservation
	free  int32 // head of the free slot list, linked by next; -1 when empty
	// head and tail are the oldest and newest live reservations, linked by
	// prev/next. The tenant's clock never goes backward and every
	// reservation has the same TTL, so this order is also expiry order.
	head, tail int32
}

// reservation is one unsettled reservation.
type reservation struct {
	id         string
	tokens     int64
	tpm        int64 // the TPM limit it was taken under; 0: not from the bucket
	over       int64 // MaxTokens - Tokens when taken from the bucket, else 0
	day        int64 // the UTC day it was counted in
	expires    int64 // ms
	prev, next int32
}

// NewMemory returns an in-process limiter.
func NewMemory(cfg MemoryConfig) *Memory {
	m := &Memory{now: cfg.Now, ttlMs: ttlMillis(cfg.TTL), seed: maphash.MakeSeed()}
	if m.now == nil {
		m.now = time.Now
	}
	for i := range m.shards {
		m.shards[i].tenants = make(map[string]*memTenant)
	}
	return m
}

func ttlMillis(ttl time.Duration) int64 {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return max(1, ttl.Milliseconds())
}

// Reserve implements [Limiter.Reserve].
func (m *Memory) Reserve(_ context.Context, r Request) (Decision, error) {
	if err := r.validate(); err != nil {
		return Decision{}, err
	}
	if m.closed.Load() {
		return Decision{}, ErrClosed
	}
	o, err := m.reserve(&r)
	if err != nil {
		return Decision{}, err
	}
	d := o.decision(&r)
	if d.Allowed {
		m.allow.Add(1)
	} else {
		m.deny.Add(1)
	}
	return d, nil
}

func (m *Memory) reserve(r *Request) (outcome, error) {
	t := m.tenant(r.Tenant, true)
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock(m.now().UnixMilli())
	t.expire(now)
	if _, dup := t.byID[r.ID]; dup {
		return outcome{}, ErrDuplicateID
	}
	o := t.decide(r, now, int64(len(t.byID)))
	if o.code == codeAllowed {
		res := reservation{id: r.ID, tokens: r.Tokens, tpm: r.Limits.TPM, day: t.day, expires: now + m.ttlMs}
		if res.tpm > 0 {
			res.over = r.most() - r.Tokens
		}
		t.add(res)
	}
	return o, nil
}

// Reconcile implements [Limiter.Reconcile].
func (m *Memory) Reconcile(_ context.Context, tenant, id string, actual int64) error {
	if err := validateReconcile(tenant, id, actual); err != nil {
		return err
	}
	if m.closed.Load() {
		return ErrClosed
	}
	m.settle(tenant, id, actual)
	return nil
}

// settle reconciles a reservation and reports whether it was held.
func (m *Memory) settle(tenant, id string, actual int64) bool {
	t := m.tenant(tenant, false)
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock(m.now().UnixMilli())
	t.expire(now)
	i, ok := t.byID[id]
	if !ok {
		return false
	}
	res := t.slots[i]
	t.remove(i)
	t.tenantState.settle(res.tokens, res.tokens+res.over, res.tpm, res.day, actual, now)
	return true
}

// Usage implements [Limiter.Usage].
func (m *Memory) Usage(_ context.Context, tenant string, l Limits) (Usage, error) {
	if err := validKey("tenant", tenant, MaxTenantLen); err != nil {
		return Usage{}, err
	}
	if err := l.validate(); err != nil {
		return Usage{}, err
	}
	if m.closed.Load() {
		return Usage{}, ErrClosed
	}
	now := m.now().UnixMilli()
	t := m.tenant(tenant, false)
	if t == nil {
		return tenantState{}.usage(l, now, 0), nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now = max(t.last, now) // usage.lua does not move the tenant's clock either
	t.expire(now)
	return t.usage(l, now, int64(len(t.byID))), nil
}

// Counters implements [Limiter.Counters].
func (m *Memory) Counters() Counters {
	return Counters{Allow: m.allow.Load(), Deny: m.deny.Load()}
}

// Close implements [Limiter.Close]. Memory holds no goroutines; Close only
// makes later calls fail.
func (m *Memory) Close() error {
	m.closed.Store(true)
	return nil
}

// tenant returns the tenant's state, creating it when create is set; nil
// when it does not exist and create is not set.
func (m *Memory) tenant(name string, create bool) *memTenant {
	s := &m.shards[maphash.String(m.seed, name)%shardCount]
	s.mu.RLock()
	t := s.tenants[name]
	s.mu.RUnlock()
	if t != nil || !create {
		return t
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t = s.tenants[name]; t == nil {
		t = &memTenant{byID: make(map[string]int32), free: -1, head: -1, tail: -1}
		s.tenants[name] = t
	}
	return t
}

// add records a reservation as the newest.
func (t *memTenant) add(res reservation) {
	t.over += res.over
	var i int32
	if t.free >= 0 {
		i = t.free
		t.free = t.slots[i].next
	} else {
		i = int32(len(t.slots))
		t.slots = append(t.slots, reservation{})
	}
	res.prev, res.next = t.tail, -1
	t.slots[i] = res
	if t.tail >= 0 {
		t.slots[t.tail].next = i
	} else {
		t.head = i
	}
	t.tail = i
	t.byID[res.id] = i
}

// remove unlinks reservation i and frees its slot.
func (t *memTenant) remove(i int32) {
	res := &t.slots[i]
	delete(t.byID, res.id)
	t.over -= res.over
	if res.prev >= 0 {
		t.slots[res.prev].next = res.next
	} else {
		t.head = res.next
	}
	if res.next >= 0 {
		t.slots[res.next].prev = res.prev
	} else {
		t.tail = res.prev
	}
	*res = reservation{next: t.free}
	t.free = i
}

// expire drops the reservations whose expiry is at or before now: their
// slots free, their tokens stay charged as reserved.
func (t *memTenant) expire(now int64) {
	for t.head >= 0 && t.slots[t.head].expires <= now {
		t.remove(t.head)
	}
}
