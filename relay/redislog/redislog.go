// Package redislog keeps a copy of resumable streams' events in Redis
// streams, so that a stream can be resumed through any node after the
// node that served it is gone: its finished events, or those recorded
// before it died. Each request's events are a Redis stream
// llmd:ev:{id} (entry ids n+1 for event n, capped at MaxEvents) beside a
// hash llmd:evm:{id} (tenant, style, done), both expiring TTL after the
// last write, as the in-memory log does.
//
// Writing never blocks the stream: events go through a bounded queue to
// one writer goroutine that sends them in pipelined batches. An event
// lost on the way (a full queue, Redis down) leaves a gap that a reader
// sees: a recording ends at its first gap.
package redislog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/llmd/llmd/relay"
)

// ErrNotFound is returned by Read for a request Redis has no events of.
var ErrNotFound = errors.New("redislog: no recorded events")

// Config configures a Log.
type Config struct {
	// URL is the Redis URL (redis://host:6379/0).
	URL string
	// TTL is how long a stream's events stay after its last one; MaxEvents
	// how many of the latest it keeps (approximately, as MAXLEN ~ trims).
	TTL       time.Duration
	MaxEvents int
	// Queue bounds the events waiting for the writer (default 65536).
	Queue  int
	Logger *slog.Logger
}

// Log writes and reads the recorded streams. Its methods are safe for
// concurrent use; Run writes.
type Log struct {
	cfg     Config
	rdb     *redis.Client
	ops     chan op
	dropped atomic.Int64
	log     *slog.Logger
}

// op is one write: the stream's metadata, an event, or its end.
type op struct {
	kind          byte // 'm', 'e', 'x'
	id            string
	n             int
	ev            []byte
	tenant, style string
}

// New connects to Redis (a PING must answer within 5 s).
func New(cfg Config) (*Log, error) {
	opt, err := redis.ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("redislog: %w", err)
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 1 << 16
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 5 * time.Minute
	}
	if cfg.MaxEvents <= 0 {
		cfg.MaxEvents = 1 << 16
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Log{cfg: cfg, rdb: redis.NewClient(opt), ops: make(chan op, cfg.Queue), log: log.With("component", "redislog")}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.rdb.Ping(ctx).Err(); err != nil {
		_ = l.rdb.Close()
		return nil, fmt.Errorf("redislog: %s: %w", cfg.URL, err)
	}
	return l, nil
}

// Close closes the connection (after Run has returned).
func (l *Log) Close() error { return l.rdb.Close() }

func evKey(id string) string   { return "llmd:ev:{" + id + "}" }
func metaKey(id string) string { return "llmd:evm:{" + id + "}" }

// Mirror returns the relay.Mirror of request id's stream.
func (l *Log) Mirror(id, tenant, style string) relay.Mirror {
	l.enqueue(op{kind: 'm', id: id, tenant: tenant, style: style})
	return mirror{l: l, id: id}
}

type mirror struct {
	l  *Log
	id string
}

func (m mirror) Append(n int, ev []byte) { m.l.enqueue(op{kind: 'e', id: m.id, n: n, ev: ev}) }
func (m mirror) End()                    { m.l.enqueue(op{kind: 'x', id: m.id}) }

// enqueue hands o to the writer, or drops it when the queue is full.
func (l *Log) enqueue(o op) {
	select {
	case l.ops <- o:
	default:
		if l.dropped.Add(1)%1000 == 1 {
			l.log.Warn("redis event log queue full: events dropped (resumes through other nodes end at the gap)",
				"dropped", l.dropped.Load())
		}
	}
}

// maxBatch bounds the writes sent in one pipeline.
const maxBatch = 512

// Run writes queued events until ctx ends, then what is left (for at most
// 2 s).
func (l *Log) Run(ctx context.Context) error {
	batch := make([]op, 0, maxBatch)
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			for {
				batch = l.drain(batch[:0])
				if len(batch) == 0 {
					return nil
				}
				if err := l.write(fctx, batch); err != nil {
					return nil
				}
			}
		case o := <-l.ops:
			batch = l.drain(append(batch[:0], o))
			// Not ctx: a batch taken as ctx ends is still written.
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			if err := l.write(wctx, batch); err != nil {
				l.log.Warn("redis event log write failed", "events", len(batch), "err", err)
			}
			cancel()
		}
	}
}

// drain adds queued ops to batch, up to maxBatch, without waiting.
func (l *Log) drain(batch []op) []op {
	for len(batch) < maxBatch {
		select {
		case o := <-l.ops:
			batch = append(batch, o)
		default:
			return batch
		}
	}
	return batch
}

// write sends batch in one pipeline, refreshing each stream's expiry.
func (l *Log) write(ctx context.Context, batch []op) error {
	p := l.rdb.Pipeline()
	touched := map[string]bool{}
	for _, o := range batch {
		switch o.kind {
		case 'm':
			p.HSet(ctx, metaKey(o.id), "tenant", o.tenant, "style", o.style, "done", "0")
		case 'e':
			p.XAdd(ctx, &redis.XAddArgs{Stream: evKey(o.id), MaxLen: int64(l.cfg.MaxEvents), Approx: true,
				ID: strconv.Itoa(o.n+1) + "-1", Values: []any{"e", o.ev}})
		case 'x':
			p.HSet(ctx, metaKey(o.id), "done", "1")
		}
		touched[o.id] = true
	}
	for id := range touched {
		p.Expire(ctx, evKey(id), l.cfg.TTL)
		p.Expire(ctx, metaKey(id), l.cfg.TTL)
	}
	_, err := p.Exec(ctx)
	return err
}

// Read returns what Redis holds of request id: its events from the
// oldest kept up to the first gap, and whether it ended (false when it
// ended after a gap).
func (l *Log) Read(ctx context.Context, id string) (relay.Recording, error) {
	meta, err := l.rdb.HGetAll(ctx, metaKey(id)).Result()
	if err != nil {
		return relay.Recording{}, fmt.Errorf("redislog: %w", err)
	}
	if len(meta) == 0 {
		return relay.Recording{}, ErrNotFound
	}
	rec := relay.Recording{Tenant: meta["tenant"], Style: meta["style"], Done: meta["done"] == "1"}
	entries, err := l.rdb.XRange(ctx, evKey(id), "-", "+").Result()
	if err != nil {
		return relay.Recording{}, fmt.Errorf("redislog: %w", err)
	}
	next := -1
	for _, e := range entries {
		ms, _, _ := strings.Cut(e.ID, "-")
		n, err := strconv.Atoi(ms)
		if err != nil || n < 1 {
			return relay.Recording{}, fmt.Errorf("redislog: %s: bad entry id %q", evKey(id), e.ID)
		}
		n--
		if next >= 0 && n != next {
			rec.Done = false // a gap: what follows it is not the stream
			break
		}
		if next < 0 {
			rec.First = n
		}
		ev, ok := e.Values["e"].(string)
		if !ok {
			return relay.Recording{}, fmt.Errorf("redislog: %s: entry %s has no event", evKey(id), e.ID)
		}
		rec.Events = append(rec.Events, []byte(ev))
		next = n + 1
	}
	return rec, nil
}
