package relay

import (
	"context"
	"sync"
	"time"
)

// Registry finds live and recently ended requests by id (resume, cancel,
// the snapshot), and cancels or forgets them in time (Run).
//
// Locking: mu guards streams.
type Registry struct {
	// grace is how long a resumable stream keeps generating with no
	// reader; ttl how long an ended one stays readable.
	grace, ttl time.Duration

	mu      sync.Mutex
	streams map[string]*Stream
}

// NewRegistry returns an empty registry whose Run cancels streams that
// have had no reader for grace and forgets those that ended ttl ago.
func NewRegistry(grace, ttl time.Duration) *Registry {
	return &Registry{grace: grace, ttl: ttl, streams: map[string]*Stream{}}
}

// Add registers s under its id.
func (r *Registry) Add(s *Stream) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.streams[s.ID] = s
}

// Get returns the stream of request id if tenant owns it; nil otherwise,
// so a request of another tenant looks exactly like a missing one.
func (r *Registry) Get(id, tenant string) *Stream {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.streams[id]
	if s == nil || s.Tenant != tenant {
		return nil
	}
	return s
}

// Lookup returns the stream of request id whoever owns it (an admin view).
func (r *Registry) Lookup(id string) *Stream {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.streams[id]
}

// Remove forgets request id.
func (r *Registry) Remove(id string) {
	r.mu.Lock()
	delete(r.streams, id)
	r.mu.Unlock()
}

// Range calls f for each registered stream until f returns false. f must
// not call the registry.
func (r *Registry) Range(f func(*Stream) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.streams {
		if !f(s) {
			return
		}
	}
}

// Len is the number of registered streams.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.streams)
}

// Sweep cancels live streams without a reader since before orphanCutoff
// and forgets ended ones that ended before expireCutoff.
func (r *Registry) Sweep(orphanCutoff, expireCutoff time.Time) {
	r.mu.Lock()
	var cancel []*Stream
	for id, s := range r.streams {
		switch {
		case s.expired(expireCutoff):
			delete(r.streams, id)
		case s.orphaned(orphanCutoff):
			cancel = append(cancel, s)
		}
	}
	r.mu.Unlock()
	for _, s := range cancel {
		s.Cancel()
	}
}

// Run sweeps the registry once a second until ctx ends.
func (r *Registry) Run(ctx context.Context) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			r.Sweep(now.Add(-r.grace), now.Add(-r.ttl))
		}
	}
}
