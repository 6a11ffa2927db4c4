package cluster

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

var _ memberlist.NodeAwareTransport = (*transport)(nil)

// transport is memberlist's NetTransport with two changes: a dial ends
// when the transport shuts down, so stopping the node (the end of Run,
// Kill) never waits out a TCP timeout on an unreachable peer (the reconnect loop dials such peers), and a test can
// cut this node off from chosen addresses.
type transport struct {
	*memberlist.NetTransport
	ctx    context.Context // cancelled by Shutdown
	cancel context.CancelFunc
	// blocked, when set (tests only), holds the addresses this node
	// neither sends packets to nor dials: packets vanish and a dial waits
	// out its timeout, as behind a firewall that drops. Blocking both ways
	// is the caller's business.
	blocked atomic.Pointer[map[string]bool]
}

// newTransport binds mc's address, as memberlist does when it makes its own
// transport (retrying when port 0 collides), and sets mc.BindPort and
// mc.AdvertisePort to the picked port when BindPort was 0.
func newTransport(mc *memberlist.Config) (*transport, error) {
	nc := &memberlist.NetTransportConfig{BindAddrs: []string{mc.BindAddr}, BindPort: mc.BindPort, Logger: mc.Logger}
	tries := 1
	if mc.BindPort == 0 {
		// TCP and UDP must get the same free port; another process may
		// take the UDP one between the two binds.
		tries = 10
	}
	var (
		nt  *memberlist.NetTransport
		err error
	)
	for range tries {
		nt, err = memberlist.NewNetTransport(nc)
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	if mc.BindPort == 0 {
		mc.BindPort = nt.GetAutoBindPort()
		mc.AdvertisePort = mc.BindPort
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &transport{NetTransport: nt, ctx: ctx, cancel: cancel}, nil
}

func (t *transport) isBlocked(addr string) bool {
	b := t.blocked.Load()
	return b != nil && (*b)[addr]
}

// block replaces the set of blocked addresses (tests); none unblocks.
func (t *transport) block(addrs ...string) {
	m := make(map[string]bool, len(addrs))
	for _, a := range addrs {
		m[a] = true
	}
	t.blocked.Store(&m)
}

// WriteToAddress sends a packet, or drops it when addr is blocked.
func (t *transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if t.isBlocked(a.Addr) {
		return time.Now(), nil
	}
	return t.NetTransport.WriteToAddress(b, a)
}

// WriteTo is WriteToAddress without a node name.
func (t *transport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// DialAddressTimeout dials TCP, giving up at timeout or when the transport
// shuts down.
func (t *transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(t.ctx, timeout)
	defer cancel()
	if t.isBlocked(a.Addr) {
		<-ctx.Done()
		return nil, fmt.Errorf("dial tcp %s: blocked: %w", a.Addr, ctx.Err())
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", a.Addr)
}

// DialTimeout is DialAddressTimeout without a node name.
func (t *transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// Shutdown ends pending dials, then closes the listeners.
func (t *transport) Shutdown() error {
	t.cancel()
	return t.NetTransport.Shutdown()
}
