package relay

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/llmd/llmd/api"
)

// FollowConfig bounds how a connection reads a stream.
type FollowConfig struct {
	// Heartbeat is how long the connection may stay silent before a
	// comment (": ping") is written.
	Heartbeat time.Duration
	// WriteTimeout bounds each write and flush; a client that does not
	// take an event within it is dropped.
	WriteTimeout time.Duration
	// MaxLag is how many bytes of events a client may fall behind, and
	// MaxLagTime how long, before its connection is closed (it can
	// resume); 0 means no bound in time.
	MaxLag     int
	MaxLagTime time.Duration
}

// Follow copies s's events from number from to w until the stream ends,
// ctx ends (the client left), or the client falls more than MaxLag bytes
// or MaxLagTime behind (then its connection is closed: it can resume). It sends the
// status and the stream's headers first, and a heartbeat comment whenever
// the connection has been silent for the heartbeat interval. It never
// blocks the producer.
func Follow(ctx context.Context, w http.ResponseWriter, s *Stream, from int, cfg FollowConfig, log *slog.Logger) {
	conn := newConn(w, cfg.WriteTimeout)
	s.attach()
	defer func() { s.detach(time.Now()) }() // the time of leaving, not of arriving
	if err := conn.start(); err != nil {
		return
	}
	ping := time.NewTimer(cfg.Heartbeat)
	defer ping.Stop()
	for {
		evs, next, done, gone, wait := s.Read(from)
		if gone {
			return // evicted while this client lagged: it can resume no further back than the log
		}
		// What piles up during the write counts, not a resumed backlog:
		// events written while this client took its time, by their size
		// (checked between events too, so a client that reads slowly but
		// steadily cannot stretch one long write past the limit) and by
		// their age.
		lagged := func() bool { return s.Lag(next) > cfg.MaxLag }
		if err := conn.write(evs, lagged); err != nil {
			if errors.Is(err, errLagged) {
				log.Info("closing a client that fell behind", "request_id", s.ID, "lag_bytes", s.Lag(next))
			}
			return
		}
		from = next
		if lagged() {
			log.Info("closing a client that fell behind", "request_id", s.ID, "lag_bytes", s.Lag(from))
			return
		}
		if behind := s.Behind(from, time.Now()); cfg.MaxLagTime > 0 && behind > cfg.MaxLagTime {
			log.Info("closing a client that fell behind", "request_id", s.ID, "behind", behind.String())
			return
		}
		if done && len(evs) == 0 {
			return
		}
		if len(evs) > 0 {
			continue // read again: done is only final once nothing is left
		}
		ping.Reset(time.Until(conn.lastWrite.Add(cfg.Heartbeat)))
		select {
		case <-ctx.Done():
			return
		case <-wait:
		case <-ping.C:
			if err := conn.comment("ping"); err != nil {
				return
			}
		}
	}
}

// conn writes Server-Sent Events to one client. Every write has its own
// deadline and is flushed at once, so a client that stops reading is
// dropped (it can resume) instead of holding anything up.
//
// Locking: used by one handler goroutine.
type conn struct {
	w            http.ResponseWriter
	rc           *http.ResponseController
	writeTimeout time.Duration
	// lastWrite is when the last event or comment was written.
	lastWrite time.Time
}

func newConn(w http.ResponseWriter, writeTimeout time.Duration) *conn {
	return &conn{w: w, rc: http.NewResponseController(w), writeTimeout: writeTimeout}
}

// start sends the status and the stream headers.
func (c *conn) start() error {
	h := c.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	c.w.WriteHeader(http.StatusOK)
	return c.flush()
}

// errLagged ends a write whose client fell too far behind.
var errLagged = errors.New("relay: client fell behind")

// write writes formatted events, giving up with errLagged when lagged
// reports true after one of them.
func (c *conn) write(evs [][]byte, lagged func() bool) error {
	if len(evs) == 0 {
		return nil
	}
	for _, b := range evs {
		// Not every ResponseWriter supports deadlines (httptest's recorder
		// does not); the stream still works without them.
		_ = c.rc.SetWriteDeadline(time.Now().Add(c.writeTimeout))
		if _, err := c.w.Write(b); err != nil {
			return err
		}
		if lagged() {
			return errLagged
		}
	}
	return c.flush()
}

// comment writes an SSE comment line (": text"), which clients ignore.
func (c *conn) comment(text string) error {
	_ = c.rc.SetWriteDeadline(time.Now().Add(c.writeTimeout))
	if _, err := c.w.Write(api.AppendSSEComment(nil, text)); err != nil {
		return err
	}
	return c.flush()
}

func (c *conn) flush() error {
	_ = c.rc.SetWriteDeadline(time.Now().Add(c.writeTimeout))
	err := c.rc.Flush()
	c.lastWrite = time.Now()
	return err
}
