package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"
)

// spoolName is the default spool's name in the data directory.
const spoolName = "usage-spool.jsonl"

// spoolLine is one usage event as a line of the spool: JSON, durations in
// nanoseconds, times in RFC 3339 with nanoseconds. The field names are the
// file format: do not rename them; a field added later must be optional
// (omitempty, zero when absent), so that older spools still parse.
type spoolLine struct {
	RequestID    string        `json:"request_id"`
	Tenant       string        `json:"tenant,omitempty"`
	KeyID        string        `json:"key_id,omitempty"`
	Model        string        `json:"model,omitempty"`
	Tier         string        `json:"tier,omitempty"`
	Node         string        `json:"node,omitempty"`
	Endpoint     string        `json:"endpoint,omitempty"`
	Status       UsageStatus   `json:"status"`
	FinishReason string        `json:"finish_reason,omitempty"`
	Reason       string        `json:"reason,omitempty"`
	InputTokens  int64         `json:"input_tokens"`
	CachedTokens int64         `json:"cached_tokens"`
	OutputTokens int64         `json:"output_tokens"`
	QueueTime    time.Duration `json:"queue_ns"`
	TTFT         time.Duration `json:"ttft_ns"`
	MeanITL      time.Duration `json:"mean_itl_ns"`
	Duration     time.Duration `json:"duration_ns"`
	Route        string        `json:"route,omitempty"`
	Decision     string        `json:"decision,omitempty"`
	Safety       string        `json:"safety,omitempty"`
	User         string        `json:"user,omitempty"`
	Started      time.Time     `json:"started"`
	Ended        *time.Time    `json:"ended,omitempty"`
}

// appendSpoolLine appends ev as one line of the spool to buf.
func appendSpoolLine(buf []byte, ev UsageEvent) ([]byte, error) {
	l := spoolLine{
		RequestID: ev.RequestID, Tenant: ev.Tenant, KeyID: ev.KeyID, Model: ev.Model,
		Tier: ev.Tier, Node: ev.Node, Endpoint: ev.Endpoint, Status: ev.Status,
		FinishReason: ev.FinishReason, Reason: ev.Reason,
		InputTokens: ev.InputTokens, CachedTokens: ev.CachedTokens, OutputTokens: ev.OutputTokens,
		QueueTime: ev.QueueTime, TTFT: ev.TTFT, MeanITL: ev.MeanITL, Duration: ev.Duration,
		Route: ev.Route, Decision: ev.Decision, Safety: ev.Safety, User: ev.User, Started: ev.Started,
	}
	if !ev.Ended.IsZero() {
		l.Ended = &ev.Ended
	}
	b, err := json.Marshal(l)
	if err != nil {
		return buf, err
	}
	buf = append(buf, b...)
	return append(buf, '\n'), nil
}

// parseSpool reads the events of a spool's contents. A last line without
// its newline is a write that was cut short (the process died in it), whose
// events were never acknowledged: it is ignored. Any other line that does
// not parse, or holds an event that fails [checkEvent], is an error naming
// the line.
func parseSpool(data []byte) ([]UsageEvent, error) {
	var evs []UsageEvent
	for n := 1; ; n++ {
		line, rest, ok := bytes.Cut(data, []byte{'\n'})
		if !ok {
			return evs, nil // empty, or a torn last line
		}
		data = rest
		var l spoolLine
		if err := json.Unmarshal(line, &l); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		ev := UsageEvent{
			RequestID: l.RequestID, Tenant: l.Tenant, KeyID: l.KeyID, Model: l.Model,
			Tier: l.Tier, Node: l.Node, Endpoint: l.Endpoint, Status: l.Status,
			FinishReason: l.FinishReason, Reason: l.Reason,
			InputTokens: l.InputTokens, CachedTokens: l.CachedTokens, OutputTokens: l.OutputTokens,
			QueueTime: l.QueueTime, TTFT: l.TTFT, MeanITL: l.MeanITL, Duration: l.Duration,
			Route: l.Route, Decision: l.Decision, Safety: l.Safety, User: l.User, Started: l.Started,
		}
		if l.Ended != nil {
			ev.Ended = *l.Ended
		}
		if err := checkEvent(ev, true); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		evs = append(evs, ev)
	}
}

// spool is the append-only file of usage events that could not be
// committed. Locking: only the usage writer's Run loop uses it.
//
// Appends write at size, the end of the last complete write, and a failed
// append truncates the file back to it, so that a short write (a full disk)
// never leaves half a line in front of the next one.
type spool struct {
	path string
	f    *os.File // nil until the first append or read
	size int64    // bytes of complete lines in f
}

// open opens (creating) the file, and drops a torn last line left by a
// process that died while appending.
func (sp *spool) open() error {
	if sp.f != nil {
		return nil
	}
	_, statErr := os.Stat(sp.path)
	f, err := os.OpenFile(sp.path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if errors.Is(statErr, os.ErrNotExist) {
		// Make the new file's name durable with its first lines.
		if err := syncDir(filepath.Dir(sp.path)); err != nil {
			f.Close()
			return err
		}
	}
	size, err := completeLines(f)
	if err != nil {
		f.Close()
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	sp.f, sp.size = f, size
	return nil
}

// completeLines returns the length of f up to and including its last
// newline.
func completeLines(f *os.File) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	end := fi.Size()
	buf := make([]byte, 64<<10)
	for end > 0 {
		n := min(end, int64(len(buf)))
		if _, err := f.ReadAt(buf[:n], end-n); err != nil && err != io.EOF {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return end - n + int64(i) + 1, nil
		}
		end -= n
	}
	return 0, nil
}

// append writes lines (complete lines) at the end and fsyncs the file; on
// error the file is cut back to what it held before.
func (sp *spool) append(lines []byte) error {
	if err := sp.open(); err != nil {
		return err
	}
	if _, err := sp.f.WriteAt(lines, sp.size); err != nil {
		sp.f.Truncate(sp.size)
		return err
	}
	if err := sp.f.Sync(); err != nil {
		// The lines may or may not be on disk: report them as not
		// recorded (the caller may record them again, idempotently).
		sp.f.Truncate(sp.size)
		return err
	}
	sp.size += int64(len(lines))
	return nil
}

// contents returns the complete lines in the spool, nil when it is empty or
// missing.
func (sp *spool) contents() ([]byte, error) {
	if sp.f == nil {
		if _, err := os.Stat(sp.path); errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		if err := sp.open(); err != nil {
			return nil, err
		}
	}
	if sp.size == 0 {
		return nil, nil
	}
	data := make([]byte, sp.size)
	if _, err := sp.f.ReadAt(data, 0); err != nil {
		return nil, err
	}
	return data, nil
}

// clear empties the spool once its events are in the database.
func (sp *spool) clear() error {
	if err := sp.f.Truncate(0); err != nil {
		return err
	}
	sp.size = 0
	return sp.f.Sync()
}

// close closes the file.
func (sp *spool) close() error {
	if sp.f == nil {
		return nil
	}
	err := sp.f.Close()
	sp.f = nil
	return err
}

// syncDir fsyncs directory dir, so that a file created or removed in it
// stays so after a power loss. Windows cannot sync a directory (and does not
// need to).
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// spoolsInUse holds the absolute paths of the spools of running usage
// writers in this process, so that a second writer, or a replay, does not
// use a spool that a writer is appending to.
var spoolsInUse sync.Map // string -> struct{}

// errSpoolInUse is returned for a spool that a running writer owns.
var errSpoolInUse = errors.New("store: usage spool in use by a running usage writer")

// claimSpool marks path as in use; the caller must releaseSpool it.
func claimSpool(path string) error {
	if _, taken := spoolsInUse.LoadOrStore(path, struct{}{}); taken {
		return fmt.Errorf("%w: %s", errSpoolInUse, path)
	}
	return nil
}

// releaseSpool undoes claimSpool.
func releaseSpool(path string) { spoolsInUse.Delete(path) }
