package daemon

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// sseWriter formats a request's Server-Sent Events into its eventLog; the
// client's connection (sseConn) copies them from there. Events that carry
// JSON data get an "id:" line with their number in the log when ids is
// set (native streams always, OpenAI streams when resumable); "[DONE]"
// never does, since the official SDKs choke on an id without JSON.
//
// Locking: used by the request's relay goroutine only.
type sseWriter struct {
	log *eventLog
	ids bool
	buf bytes.Buffer
	// terminated is set once a terminal event (end or error) is written.
	terminated bool
}

func newSSEWriter(l *eventLog, ids bool) *sseWriter {
	return &sseWriter{log: l, ids: ids}
}

// start is a no-op: the status and headers are the connection's.
func (s *sseWriter) start() error { return nil }

// data writes one event: an optional "event:" line, then the data line. v
// is JSON-encoded unless it is a []byte, which is written as is (and gets
// no id).
func (s *sseWriter) data(event string, v any) error {
	s.buf.Reset()
	raw, isRaw := v.([]byte)
	if s.ids && !isRaw {
		s.buf.WriteString("id: ")
		s.buf.WriteString(strconv.Itoa(s.log.next()))
		s.buf.WriteByte('\n')
	}
	if event != "" {
		s.buf.WriteString("event: ")
		s.buf.WriteString(event)
		s.buf.WriteByte('\n')
	}
	s.buf.WriteString("data: ")
	if isRaw {
		s.buf.Write(raw)
	} else {
		// json.Encoder never emits a raw newline inside a value, so the
		// event stays one data line; Encode appends a newline itself.
		enc := json.NewEncoder(&s.buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return err
		}
		s.buf.Truncate(s.buf.Len() - 1)
	}
	s.buf.WriteString("\n\n")
	s.log.push(bytes.Clone(s.buf.Bytes()))
	return nil
}

// final writes a terminal event.
func (s *sseWriter) final(event string, v any) error {
	s.terminated = true
	return s.data(event, v)
}

// sseConn writes Server-Sent Events to one client. Every write has its own
// deadline and is flushed at once, so a client that stops reading is
// dropped (it can resume) instead of holding anything up.
//
// Locking: used by one handler goroutine.
type sseConn struct {
	w            http.ResponseWriter
	rc           *http.ResponseController
	writeTimeout time.Duration
	// lastWrite is when the last event or comment was written.
	lastWrite time.Time
}

func newSSEConn(w http.ResponseWriter, writeTimeout time.Duration) *sseConn {
	return &sseConn{w: w, rc: http.NewResponseController(w), writeTimeout: writeTimeout}
}

// start sends the status and the stream headers.
func (c *sseConn) start() error {
	h := c.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	c.w.WriteHeader(http.StatusOK)
	return c.flush()
}

// write writes formatted events.
func (c *sseConn) write(evs [][]byte) error {
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
	}
	return c.flush()
}

// comment writes an SSE comment line (": text"), which clients ignore.
func (c *sseConn) comment(text string) error {
	_ = c.rc.SetWriteDeadline(time.Now().Add(c.writeTimeout))
	if _, err := c.w.Write([]byte(": " + text + "\n\n")); err != nil {
		return err
	}
	return c.flush()
}

func (c *sseConn) flush() error {
	_ = c.rc.SetWriteDeadline(time.Now().Add(c.writeTimeout))
	err := c.rc.Flush()
	c.lastWrite = time.Now()
	return err
}
