package server

import (
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// ConnLimits bound the connections a listener holds, against clients that
// open many and hold them (slow or idle).
type ConnLimits struct {
	// Max is the most open connections; PerClient the most from one IP
	// address. 0 means no bound. A connection past either is answered 503
	// (plain HTTP) or closed (TLS) at once.
	Max, PerClient int
	// SendBuffer is each connection's socket send buffer in bytes, so that
	// a client that reads slowly holds writes back (and is cut) after this
	// much rather than after the system's buffer of several MiB; 0 leaves
	// the system's.
	SendBuffer int
	// TLS says the listener will be wrapped in TLS: a refused connection
	// is closed without an HTTP answer.
	TLS bool
}

// LimitListener applies lim to ln's connections.
func LimitListener(ln net.Listener, lim ConnLimits, log *slog.Logger) net.Listener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &limitListener{Listener: ln, lim: lim, log: log, perIP: map[string]int{}}
}

type limitListener struct {
	net.Listener
	lim ConnLimits
	log *slog.Logger

	mu      sync.Mutex
	total   int
	perIP   map[string]int
	refused uint64
}

// busy is the answer to a connection past the limits.
var busy = func() []byte {
	body := `{"error":{"message":"too many open connections; retry later","type":"server_error","param":null,` +
		`"code":"too_many_connections"}}`
	return []byte(fmt.Sprintf("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"+
		"Connection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
}()

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c.RemoteAddr())
		if !l.take(ip) {
			if !l.lim.TLS {
				_ = c.SetWriteDeadline(time.Now().Add(time.Second))
				_, _ = c.Write(busy)
			}
			_ = c.Close()
			continue
		}
		if tc, ok := c.(*net.TCPConn); ok && l.lim.SendBuffer > 0 {
			_ = tc.SetWriteBuffer(l.lim.SendBuffer)
		}
		return &limitConn{Conn: c, release: func() { l.release(ip) }}, nil
	}
}

// take counts a new connection from ip, or reports that it is past a limit.
func (l *limitListener) take(ip string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if (l.lim.Max > 0 && l.total >= l.lim.Max) || (l.lim.PerClient > 0 && l.perIP[ip] >= l.lim.PerClient) {
		l.refused++
		if l.refused == 1 || l.refused%1000 == 0 {
			l.log.Warn("refusing connections past the limits", "component", "server", "open", l.total,
				"from_client", l.perIP[ip], "client", ip, "refused", l.refused)
		}
		return false
	}
	l.total++
	l.perIP[ip]++
	return true
}

func (l *limitListener) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.perIP[ip]--; l.perIP[ip] <= 0 {
		delete(l.perIP, ip)
	}
}

// limitConn releases its place when closed (once).
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// remoteIP is the IP address of a connection's remote end.
func remoteIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}
