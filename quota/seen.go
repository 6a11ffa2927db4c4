package quota

import (
	"sync"
	"time"
)

// seenSet remembers when this limiter last found each tenant's state in
// Redis, to tell a new tenant from a Redis that lost one. It holds at most
// max tenants; when full it forgets one at random, which can only miss a
// reset, never report a false one.
//
// Locking: mu guards at.
type seenSet struct {
	max int
	mu  sync.Mutex
	at  map[string]time.Time
}

func newSeenSet(max int) *seenSet {
	return &seenSet{max: max, at: make(map[string]time.Time)}
}

// observe records that Redis answered for tenant at now; created reports
// that Redis had no state for it. It returns true when the state was lost:
// created, yet seen within seenFor (the state lives stateTTL after its last
// use, twice as long, so an idle expiry is not taken for a loss).
func (s *seenSet) observe(tenant string, created bool, now time.Time) (lost bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	last, ok := s.at[tenant]
	lost = created && ok && now.Sub(last) < seenFor
	if !ok && len(s.at) >= s.max {
		for k := range s.at {
			delete(s.at, k)
			break
		}
	}
	s.at[tenant] = now
	return lost
}
