package daemon

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// sseWriter writes Server-Sent Events to one client. Every event is written
// under its own write deadline and flushed at once, so a client that stops
// reading is dropped instead of holding the handler (the engine never waits
// on it anyway).
//
// Locking: used by the request's handler goroutine only.
type sseWriter struct {
	w            http.ResponseWriter
	rc           *http.ResponseController
	writeTimeout time.Duration
	buf          bytes.Buffer
	// lastWrite is when the last event or comment was written.
	lastWrite time.Time
	// started is set once the 200 and the headers are out.
	started bool
}

func newSSEWriter(w http.ResponseWriter, writeTimeout time.Duration) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w), writeTimeout: writeTimeout}
}

// start sends the status and the stream headers.
func (s *sseWriter) start() error {
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
	s.started = true
	return s.flush()
}

// data writes one event: optional "id:" and "event:" lines, then the data
// line. v is JSON-encoded unless it is a []byte.
func (s *sseWriter) data(id int, event string, v any) error {
	s.buf.Reset()
	if id >= 0 {
		s.buf.WriteString("id: ")
		s.buf.WriteString(strconv.Itoa(id))
		s.buf.WriteByte('\n')
	}
	if event != "" {
		s.buf.WriteString("event: ")
		s.buf.WriteString(event)
		s.buf.WriteByte('\n')
	}
	s.buf.WriteString("data: ")
	if b, ok := v.([]byte); ok {
		s.buf.Write(b)
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
	return s.write()
}

// comment writes an SSE comment line (": text"), which clients ignore.
func (s *sseWriter) comment(text string) error {
	s.buf.Reset()
	s.buf.WriteString(": ")
	s.buf.WriteString(text)
	s.buf.WriteString("\n\n")
	return s.write()
}

func (s *sseWriter) write() error {
	// Not every ResponseWriter supports deadlines (httptest's recorder does
	// not); the stream still works without them.
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.writeTimeout))
	if _, err := s.w.Write(s.buf.Bytes()); err != nil {
		return err
	}
	return s.flush()
}

func (s *sseWriter) flush() error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.writeTimeout))
	err := s.rc.Flush()
	s.lastWrite = time.Now()
	return err
}
