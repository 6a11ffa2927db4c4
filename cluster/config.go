package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"
	"unicode"

	"github.com/hashicorp/memberlist"
)

// Profiles name the memberlist timing presets.
const (
	// ProfileLAN is memberlist.DefaultLANConfig: 1 s probes, 200 ms gossip,
	// 30 s push/pull.
	ProfileLAN = "lan"
	// ProfileLocal shrinks the intervals for in-process tests (memberlist's
	// integration-test shape): 20 ms probe and gossip, 100 ms probe
	// timeout, 200 ms push/pull, 2 s TCP timeout, and no compression.
	ProfileLocal = "local"
)

// Defaults, documented on the Config fields they fill.
const (
	DefaultBindAddr      = "127.0.0.1:7946"
	DefaultStateInterval = 500 * time.Millisecond
	localStateInterval   = 50 * time.Millisecond
	// Reconnect defaults (see Config.ReconnectInterval and
	// ReconnectTimeout).
	DefaultReconnectInterval = 10 * time.Second
	DefaultReconnectTimeout  = 24 * time.Hour
	localReconnectInterval   = 500 * time.Millisecond
	localReconnectTimeout    = time.Minute
	// DefaultLeaveTimeout bounds Run's graceful leave (see
	// Config.LeaveTimeout).
	DefaultLeaveTimeout = 5 * time.Second
	// suspectIntervals is SuspectAfter's default in StateIntervals.
	suspectIntervals = 20
	// heartbeatIntervals: an unchanged local state is still republished
	// every this many StateIntervals, so receivers can tell it is alive.
	heartbeatIntervals = 4
	// maxNodeIDBytes bounds Config.NodeID (it is also the memberlist name).
	maxNodeIDBytes = 128
	// maxModelNameBytes bounds a model name, here and on the wire.
	maxModelNameBytes = 128
)

var (
	// ErrNoKey is returned by New and Validate when Config.Key is empty
	// and Config.InsecureGossip is not set (SE-6).
	ErrNoKey = errors.New("cluster: gossip key required (set Key, or InsecureGossip to run unencrypted)")
	// ErrMetaTooLarge is returned when the node metadata (id, API address,
	// models, version) does not fit memberlist's 512-byte limit.
	ErrMetaTooLarge = errors.New("cluster: node metadata exceeds 512 bytes")
	// ErrClosed is returned by Cluster.Run when Run was already called: a
	// Cluster runs once.
	ErrClosed = errors.New("cluster: closed")
	// ErrJoin is returned when no Join address could be joined: by New
	// with a negative RetryJoinMax, by Run once RetryJoinMax attempts
	// failed.
	ErrJoin = errors.New("cluster: could not join")
)

// Config configures a cluster node. The zero value of every field but Key
// (or InsecureGossip) has a usable default; see DefaultConfig.
type Config struct {
	// NodeID names this node uniquely in the cluster (and in memberlist).
	// Default: the hostname, a dash and 6 random hex digits. At most 128
	// bytes of printable characters.
	NodeID string
	// BindAddr is the gossip host:port (UDP and TCP). Default
	// 127.0.0.1:7946: loopback unless told otherwise (SE-6). Port 0 picks a
	// free port; see Cluster.Addr.
	BindAddr string
	// AdvertiseAddr is the host:port other nodes reach this one at.
	// Default: BindAddr (memberlist resolves an unspecified host).
	AdvertiseAddr string
	// Join lists host:port of existing members. When none of them can be
	// joined, New starts the node alone and Run keeps trying them with
	// backoff (from ReconnectInterval/4 up to 8 x ReconnectInterval) until
	// one answers or another node joins this one, so nodes started
	// together in any order find each other.
	Join []string
	// RetryJoinMax bounds those attempts: past it Run returns an error
	// wrapping ErrJoin. 0 retries until Run's ctx ends; negative makes New
	// fail at once when no Join address answers.
	RetryJoinMax int
	// Key is the gossip encryption key (AES-GCM): 16, 24 or 32 bytes. A node
	// without the same key can neither join nor read the cluster (SE-7).
	Key []byte
	// InsecureGossip allows starting without Key; otherwise New refuses.
	InsecureGossip bool
	// APIAddr is this node's HTTP API address, for peers forwarding to it.
	APIAddr string
	// Models lists the models this node serves.
	Models []string
	// Version is the build version, gossiped in the metadata.
	Version string
	// Zone labels this node's zone or region ("eu-west-1a"); routing
	// prefers members of the entry node's zone (see RouteRequest.Zone).
	// "" for none.
	Zone string
	// Role is this node's part in disaggregated prefill and decode
	// (RoleBoth by default); gossiped in the metadata.
	Role Role
	// Profile picks memberlist timings: ProfileLAN (default) or
	// ProfileLocal.
	Profile string
	// StateInterval is how often LocalState is sampled. A changed state is
	// gossiped at once, an unchanged one every 4 intervals. Default 500 ms
	// (50 ms with ProfileLocal).
	StateInterval time.Duration
	// SuspectAfter marks a member "suspect" (and skips it in Route) when no
	// newer state of it has arrived for this long. Default 20 x
	// StateInterval (10 s, or 1 s with ProfileLocal).
	SuspectAfter time.Duration
	// ReconnectInterval is how often this node tries to join again the
	// members it lost (memberlist declared them dead, not left) and, while
	// fewer members are alive than at the peak, the Join addresses that are
	// not alive members; see the package doc. memberlist alone never
	// contacts a dead node again, so without this the two halves of a
	// healed partition stay apart. Default 10 s (500 ms with
	// ProfileLocal); negative turns reconnecting off.
	ReconnectInterval time.Duration
	// ReconnectTimeout is how long a lost member is retried after it was
	// declared dead. Default 24 h (1 min with ProfileLocal).
	ReconnectTimeout time.Duration
	// LeaveTimeout bounds the graceful leave Run does when its ctx ends:
	// at most half of it waiting for the final (leaving, draining) state to
	// be gossiped, the rest for memberlist's leave to be broadcast. Default
	// 5 s (DefaultLeaveTimeout); negative is invalid.
	LeaveTimeout time.Duration
	// LocalState returns this node's current state. It is called once by
	// New, then every StateInterval from Run's goroutine, and must not
	// block. The cluster copies what it keeps; nil publishes
	// an empty state.
	LocalState func() State
	// Control, when set, is this node's replicated control state (keys,
	// tenants, quotas): its records are gossiped when they change
	// (Cluster.PublishControl), exchanged in every push/pull, applied
	// when received, and read again every 10 StateIntervals. Nil
	// replicates nothing.
	Control ControlStore
	// Logger receives the cluster's logs and memberlist's (at Debug, with
	// memberlist's own [WARN]/[ERR] tags). Nil discards them.
	Logger *slog.Logger

	// epoch, when non-zero, replaces the start time as the first half of
	// this node's state version. Tests use it to restart a node "in the
	// past".
	epoch uint64
	// tune, when set, adjusts the memberlist configuration last, before
	// the transport is made (tests: slower timings under the race
	// detector).
	tune func(*memberlist.Config)
}

// LogValue redacts the key, so a Config can be logged.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("node", c.NodeID),
		slog.String("bind_addr", c.BindAddr),
		slog.String("advertise_addr", c.AdvertiseAddr),
		slog.Any("join", c.Join),
		slog.Bool("key_set", len(c.Key) > 0),
		slog.Bool("insecure_gossip", c.InsecureGossip),
		slog.String("api_addr", c.APIAddr),
		slog.Any("models", c.Models),
		slog.String("version", c.Version),
		slog.String("profile", c.Profile),
		slog.Duration("state_interval", c.StateInterval),
		slog.Duration("reconnect_interval", c.ReconnectInterval),
		slog.Duration("leave_timeout", c.LeaveTimeout),
	)
}

// DefaultConfig returns a Config with every default filled in except Key:
// a generated NodeID, BindAddr 127.0.0.1:7946, ProfileLAN, StateInterval
// 500 ms, SuspectAfter 10 s, ReconnectInterval 10 s, ReconnectTimeout
// 24 h and LeaveTimeout 5 s.
func DefaultConfig() Config {
	var c Config
	c.setDefaults()
	return c
}

// setDefaults fills the zero fields.
func (c *Config) setDefaults() {
	if c.NodeID == "" {
		c.NodeID = defaultNodeID()
	}
	if c.BindAddr == "" {
		c.BindAddr = DefaultBindAddr
	}
	if c.Profile == "" {
		c.Profile = ProfileLAN
	}
	if c.StateInterval == 0 {
		c.StateInterval = DefaultStateInterval
		if c.Profile == ProfileLocal {
			c.StateInterval = localStateInterval
		}
	}
	if c.SuspectAfter == 0 {
		c.SuspectAfter = suspectIntervals * c.StateInterval
	}
	if c.ReconnectInterval == 0 {
		c.ReconnectInterval = DefaultReconnectInterval
		if c.Profile == ProfileLocal {
			c.ReconnectInterval = localReconnectInterval
		}
	}
	if c.ReconnectTimeout == 0 {
		c.ReconnectTimeout = DefaultReconnectTimeout
		if c.Profile == ProfileLocal {
			c.ReconnectTimeout = localReconnectTimeout
		}
	}
	if c.LeaveTimeout == 0 {
		c.LeaveTimeout = DefaultLeaveTimeout
	}
}

func defaultNodeID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "llmd"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// Validate reports the first problem with c as New would see it, after
// defaults: ErrNoKey without Key or InsecureGossip, a key that is not 16,
// 24 or 32 bytes, a bad address, an unknown profile, a negative interval
// (but ReconnectInterval), ReconnectTimeout or LeaveTimeout, or
// ErrMetaTooLarge when the metadata does not fit 512 bytes.
func (c Config) Validate() error {
	c.setDefaults()
	_, err := c.validate()
	return err
}

// validate checks a Config whose defaults are set and returns its encoded
// node metadata.
func (c *Config) validate() ([]byte, error) {
	if err := validName("node id", c.NodeID, maxNodeIDBytes); err != nil {
		return nil, err
	}
	switch len(c.Key) {
	case 0:
		if !c.InsecureGossip {
			return nil, ErrNoKey
		}
	case 16, 24, 32:
	default:
		return nil, fmt.Errorf("cluster: gossip key is %d bytes, want 16, 24 or 32", len(c.Key))
	}
	if _, _, err := splitHostPort(c.BindAddr); err != nil {
		return nil, fmt.Errorf("cluster: bind address: %w", err)
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := splitHostPort(c.AdvertiseAddr); err != nil {
			return nil, fmt.Errorf("cluster: advertise address: %w", err)
		}
	}
	switch c.Profile {
	case ProfileLAN, ProfileLocal:
	default:
		return nil, fmt.Errorf("cluster: unknown profile %q (want %q or %q)", c.Profile, ProfileLAN, ProfileLocal)
	}
	if c.StateInterval < 0 || c.SuspectAfter < 0 || c.ReconnectTimeout < 0 || c.LeaveTimeout < 0 {
		return nil, errors.New("cluster: negative StateInterval, SuspectAfter, ReconnectTimeout or LeaveTimeout")
	}
	if len(c.Models) > maxModels {
		return nil, fmt.Errorf("cluster: %d models, at most %d", len(c.Models), maxModels)
	}
	for _, m := range c.Models {
		if err := validName("model", m, maxModelNameBytes); err != nil {
			return nil, err
		}
	}
	if c.Zone != "" {
		if err := validName("zone", c.Zone, maxNodeIDBytes); err != nil {
			return nil, err
		}
	}
	if _, ok := roleBytes[c.Role]; !ok {
		return nil, fmt.Errorf("cluster: role %q is not prefill, decode or both", c.Role)
	}
	meta := nodeMeta{ID: c.NodeID, APIAddr: c.APIAddr, Version: c.Version, Models: c.Models, Zone: c.Zone, Role: c.Role}
	b := meta.encode()
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("%w: %d bytes for node %q with %d models", ErrMetaTooLarge, len(b), c.NodeID, len(c.Models))
	}
	return b, nil
}

func validName(what, s string, maxBytes int) error {
	if s == "" {
		return fmt.Errorf("cluster: empty %s", what)
	}
	if len(s) > maxBytes {
		return fmt.Errorf("cluster: %s is %d bytes, at most %d", what, len(s), maxBytes)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("cluster: %s %q has a non-printable character", what, s)
		}
	}
	return nil
}

func splitHostPort(addr string) (string, int, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", ps, err)
	}
	return host, int(port), nil
}

// memberlistConfig builds the memberlist configuration for a validated c.
func (c *Config) memberlistConfig(logger *slog.Logger) (*memberlist.Config, error) {
	mc := memberlist.DefaultLANConfig()
	if c.Profile == ProfileLocal {
		mc.ProbeInterval = 20 * time.Millisecond
		mc.ProbeTimeout = 100 * time.Millisecond
		mc.GossipInterval = 20 * time.Millisecond
		mc.PushPullInterval = 200 * time.Millisecond
		mc.TCPTimeout = 2 * time.Second
		mc.GossipToTheDeadTime = 2 * time.Second
		// Loopback needs no compression; it costs CPU on every packet.
		mc.EnableCompression = false
	}
	mc.Name = c.NodeID
	host, port, _ := splitHostPort(c.BindAddr)
	mc.BindAddr = host
	mc.BindPort = port
	mc.AdvertiseAddr = ""
	mc.AdvertisePort = port
	if c.AdvertiseAddr != "" {
		host, port, _ := splitHostPort(c.AdvertiseAddr)
		mc.AdvertiseAddr = host
		mc.AdvertisePort = port
	}
	if len(c.Key) > 0 {
		kr, err := memberlist.NewKeyring(nil, c.Key)
		if err != nil {
			return nil, fmt.Errorf("cluster: keyring: %w", err)
		}
		mc.Keyring = kr
		mc.GossipVerifyIncoming = true
		mc.GossipVerifyOutgoing = true
	}
	mc.Logger = slog.NewLogLogger(logger.Handler(), slog.LevelDebug)
	return mc, nil
}
