package redistest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a loopback TCP proxy in front of a Redis server whose replies can
// be delayed, to make Redis slow rather than down. Requests pass at once;
// every chunk of reply bytes is held for the delay in force when it arrived
// from Redis, and chunks keep their order. It is stopped in t.Cleanup (or
// by Close), closing every connection and waiting for its goroutines.
type Proxy struct {
	target string
	ln     net.Listener
	delay  atomic.Int64 // time.Duration

	done chan struct{}
	wg   sync.WaitGroup

	mu    sync.Mutex
	pairs map[*pair]struct{}
	close sync.Once
}

// NewDelayProxy starts a proxy on a free 127.0.0.1 port that forwards to
// target (host:port), with no delay until SetDelay.
func NewDelayProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy listen: %v", err)
	}
	p := &Proxy{target: target, ln: ln, done: make(chan struct{}), pairs: map[*pair]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is the proxy's redis:// URL, database 0.
func (p *Proxy) URL() string { return "redis://" + p.Addr() + "/0" }

// SetDelay delays every reply chunk that arrives from Redis from now on by d
// (0 removes the delay). Chunks already held keep their old delay.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Close stops accepting, closes every connection and waits for the proxy's
// goroutines. It is safe to call more than once.
func (p *Proxy) Close() {
	p.close.Do(func() {
		close(p.done)
		_ = p.ln.Close()
		p.mu.Lock()
		for pr := range p.pairs {
			pr.shut()
		}
		p.mu.Unlock()
	})
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		server, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			_ = client.Close() // Redis is down: the client sees a closed connection
			continue
		}
		pr := &pair{client: client, server: server, closed: make(chan struct{})}
		if !p.track(pr) {
			return
		}
		held := make(chan chunk, 64)
		p.wg.Add(3)
		go p.forward(pr)
		go p.readReplies(pr, held)
		go p.writeReplies(pr, held)
	}
}

// pair is one proxied connection: the client's side and Redis's side.
type pair struct {
	client, server net.Conn
	once           sync.Once
	closed         chan struct{}
}

// shut closes both sides once and wakes the pair's goroutines.
func (pr *pair) shut() {
	pr.once.Do(func() {
		_ = pr.client.Close()
		_ = pr.server.Close()
		close(pr.closed)
	})
}

// track registers a pair, or shuts it when the proxy is closing.
func (p *Proxy) track(pr *pair) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		pr.shut()
		return false
	default:
	}
	p.pairs[pr] = struct{}{}
	return true
}

func (p *Proxy) untrack(pr *pair) {
	pr.shut()
	p.mu.Lock()
	delete(p.pairs, pr)
	p.mu.Unlock()
}

// forward copies requests from the client to Redis without delay.
func (p *Proxy) forward(pr *pair) {
	defer p.wg.Done()
	defer p.untrack(pr)
	_, _ = io.Copy(pr.server, pr.client)
}

type chunk struct {
	b   []byte
	due time.Time
}

// readReplies reads reply bytes from Redis and stamps each chunk with the
// time it may be passed on.
func (p *Proxy) readReplies(pr *pair, held chan<- chunk) {
	defer p.wg.Done()
	defer close(held)
	for {
		buf := make([]byte, 32<<10)
		n, err := pr.server.Read(buf)
		if n > 0 {
			c := chunk{b: buf[:n], due: time.Now().Add(time.Duration(p.delay.Load()))}
			select {
			case held <- c:
			case <-pr.closed:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// writeReplies passes each chunk to the client once it is due.
func (p *Proxy) writeReplies(pr *pair, held <-chan chunk) {
	defer p.wg.Done()
	defer p.untrack(pr)
	for c := range held {
		if wait := time.Until(c.due); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-pr.closed:
				timer.Stop()
				return
			}
		}
		if _, err := pr.client.Write(c.b); err != nil {
			return
		}
	}
}
