package api

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"time"
)

// MaxSSEEventBytes bounds one line and the data of one event read by
// SSEReader. llmd's events are small JSON objects; the bound keeps a broken or
// hostile stream from growing memory without limit.
const MaxSSEEventBytes = 1 << 20

// ErrSSEEventTooLarge is returned by SSEReader.Next when a line or an event's
// data exceeds MaxSSEEventBytes.
var ErrSSEEventTooLarge = errors.New("api: sse event too large")

// SSEEvent is one dispatched server-sent event.
type SSEEvent struct {
	// Event is the event type: the last "event:" field of the event, or
	// "message" when it has none.
	Event string
	// Data is the event's "data:" lines joined with "\n".
	Data string
	// ID is the last event ID seen on the stream so far (the spec's
	// last-event-ID buffer: it carries over events without an "id:" field
	// and an empty "id:" resets it). It is what a client would send as
	// Last-Event-ID to resume.
	ID string
}

// SSEReader reads server-sent events (text/event-stream) as the WHATWG HTML
// standard (§9.2) specifies: lines end in CRLF, LF or CR; lines starting
// with ':' are comments (heartbeats) and are skipped; a field name is
// followed by ':' and one optional space; "data" lines accumulate joined
// with "\n"; a blank line dispatches the event unless it has no data; a
// leading UTF-8 BOM is skipped; "retry" and unknown fields are ignored.
//
// An SSEReader is not safe for concurrent use.
type SSEReader struct {
	br      *bufio.Reader
	line    []byte
	lastID  string
	started bool // the first line (and its possible BOM) has been read
	skipLF  bool // the previous line ended in CR, so a leading LF belongs to it
}

// NewSSEReader returns a reader of the events in r.
func NewSSEReader(r io.Reader) *SSEReader {
	return &SSEReader{br: bufio.NewReader(r)}
}

// Next blocks until the next event is dispatched and returns it. At the end
// of the input it returns io.EOF; an event not terminated by a blank line
// before the end is discarded, as the standard requires. Other read errors
// are returned as they are.
func (r *SSEReader) Next() (SSEEvent, error) {
	var (
		event   string
		data    []byte
		hasData bool
	)
	for {
		line, err := r.readLine()
		if err != nil {
			return SSEEvent{}, err
		}
		if len(line) == 0 {
			if !hasData {
				event = ""
				continue
			}
			if event == "" {
				event = "message"
			}
			return SSEEvent{Event: event, Data: string(data), ID: r.lastID}, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "event":
			event = string(value)
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, value...)
			hasData = true
			if len(data) > MaxSSEEventBytes {
				return SSEEvent{}, ErrSSEEventTooLarge
			}
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				r.lastID = string(value)
			}
		}
	}
}

// readLine returns the next line without its terminator. The returned slice
// is valid until the next call. A final line without a terminator is
// discarded: readLine returns io.EOF instead.
func (r *SSEReader) readLine() ([]byte, error) {
	if r.skipLF {
		r.skipLF = false
		b, err := r.br.ReadByte()
		if err != nil {
			return nil, err
		}
		if b != '\n' {
			if err := r.br.UnreadByte(); err != nil {
				return nil, err
			}
		}
	}
	r.line = r.line[:0]
	for {
		if r.br.Buffered() == 0 {
			// Peek blocks until at least one byte is buffered.
			if _, err := r.br.Peek(1); err != nil {
				return nil, err
			}
		}
		buf, err := r.br.Peek(r.br.Buffered())
		if err != nil {
			return nil, err
		}
		i := bytes.IndexAny(buf, "\r\n")
		if i < 0 {
			r.line = append(r.line, buf...)
			if _, err := r.br.Discard(len(buf)); err != nil {
				return nil, err
			}
			if len(r.line) > MaxSSEEventBytes {
				return nil, ErrSSEEventTooLarge
			}
			continue
		}
		r.line = append(r.line, buf[:i]...)
		r.skipLF = buf[i] == '\r'
		if _, err := r.br.Discard(i + 1); err != nil {
			return nil, err
		}
		if len(r.line) > MaxSSEEventBytes {
			return nil, ErrSSEEventTooLarge
		}
		line := r.line
		if !r.started {
			r.started = true
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
		}
		return line, nil
	}
}

// AppendSSEEvent appends one server-sent event to dst and returns the
// extended slice: an "id:" line when id is not empty, an "event:" line when
// event is not empty, one "data:" line per line of data (none when data is
// empty: such an event is not dispatched), and the blank line that ends
// the event. id and event must not hold a line break. In the OpenAI format
// an id may only go with JSON data: the official SDKs fail on an event
// whose id comes without it.
func AppendSSEEvent(dst []byte, id, event string, data []byte) []byte {
	if id != "" {
		dst = append(dst, "id: "...)
		dst = append(dst, id...)
		dst = append(dst, '\n')
	}
	if event != "" {
		dst = append(dst, "event: "...)
		dst = append(dst, event...)
		dst = append(dst, '\n')
	}
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		dst = append(dst, "data: "...)
		dst = append(dst, line...)
		dst = append(dst, '\n')
	}
	return append(dst, '\n')
}

// AppendSSEComment appends a comment (": text" and a blank line), which
// readers skip: a heartbeat.
func AppendSSEComment(dst []byte, text string) []byte {
	dst = append(dst, ": "...)
	dst = append(dst, text...)
	return append(dst, '\n', '\n')
}

// DrainAfterDone reads what follows a stream's "[DONE]" (the end of the
// chunked body) so that the connection goes back to the client's pool:
// closing a body before its EOF discards the connection, and a request on
// a new connection is not retried if the server closes it unanswered. A
// server that holds the stream open after [DONE] is cut off after a
// second.
func DrainAfterDone(body io.ReadCloser) {
	t := time.AfterFunc(time.Second, func() { _ = body.Close() })
	defer t.Stop()
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
}
