package peer

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/store"
)

// Peer forwarding is authenticated with an HMAC-SHA256 over the request and
// the identity it acts for, keyed by a key derived from the cluster's
// gossip key, with a timestamp window and a nonce that is accepted once
// (SE-8). Gossip encryption protects the gossip; this protects the
// forwarding channel, which is plain HTTP between the nodes' API ports.
const (
	HeaderNode      = "X-Llmd-Peer"            // the forwarding node's id
	HeaderTime      = "X-Llmd-Peer-Time"       // unix milliseconds
	HeaderNonce     = "X-Llmd-Peer-Nonce"      // 16 random bytes, hex
	HeaderTenant    = "X-Llmd-Peer-Tenant"     // the tenant the request acts for
	HeaderTier      = "X-Llmd-Peer-Tier"       // the tenant's tier on the entry node
	HeaderKeyID     = "X-Llmd-Peer-Key-Id"     // the client's API key id, "" if anonymous
	HeaderRequest   = "X-Llmd-Peer-Request-Id" // the entry node's request id, kept by the peer
	HeaderSignature = "X-Llmd-Peer-Signature"  // hex HMAC of all the above, the method, path and body

	// TrailerUsage carries a forwarded request's usage back to the entry
	// node (an HTTP trailer, after the body), so that the entry node
	// settles the quota and writes the one usage row.
	TrailerUsage = "Llmd-Usage"

	// peerWindow is how far a forwarded request's timestamp may be from
	// the receiver's clock; a nonce is remembered for twice as long.
	peerWindow = 30 * time.Second
	// maxNonces bounds the replay cache; beyond it forwarded requests are
	// refused until old nonces expire.
	maxNonces = 1 << 20
)

var (
	// ErrAuth refuses a forwarded request whose signature is missing or
	// wrong, or whose identity is malformed.
	ErrAuth = errors.New("peer: forwarded request refused: bad or missing peer signature")
	// ErrReplay refuses a forwarded request seen before, or outside the
	// time window.
	ErrReplay = errors.New("peer: forwarded request refused: replayed or outside the time window")
)

// Auth signs and verifies forwarded requests.
type Auth struct {
	key []byte

	mu     sync.Mutex
	nonces map[string]time.Time // nonce -> when it may be forgotten
	sweep  time.Time
}

// ErrNoKey refuses to make an Auth without a cluster key: a key derived
// from nothing is one anyone can compute, so a cluster without one
// (--insecure-gossip) does not forward requests at all.
var ErrNoKey = errors.New("peer: forwarding needs the cluster's gossip key")

// NewAuth derives the forwarding key from the cluster's gossip key (16,
// 24 or 32 bytes), never empty.
func NewAuth(gossipKey []byte) (*Auth, error) {
	if len(gossipKey) < 16 {
		return nil, ErrNoKey
	}
	m := hmac.New(sha256.New, gossipKey)
	m.Write([]byte("llmd peer forwarding v2"))
	return &Auth{key: m.Sum(nil), nonces: map[string]time.Time{}}, nil
}

// Identity is what a forwarded request acts for. It carries no admin
// right: a peer reaches the generation routes only, whatever key the
// client used on the entry node.
type Identity struct {
	Node, Tenant, Tier, KeyID, RequestID string
}

// mac is the signature of a request with these headers and body.
func (a *Auth) mac(method, uri string, h http.Header, body []byte) []byte {
	sum := sha256.Sum256(body)
	m := hmac.New(sha256.New, a.key)
	for _, part := range []string{method, uri, h.Get(HeaderTime), h.Get(HeaderNonce), h.Get(HeaderNode),
		h.Get(HeaderTenant), h.Get(HeaderTier), h.Get(HeaderKeyID), h.Get(HeaderRequest),
		hex.EncodeToString(sum[:])} {
		m.Write([]byte(strconv.Itoa(len(part))))
		m.Write([]byte{':'})
		m.Write([]byte(part))
	}
	return m.Sum(nil)
}

// Sign adds the peer headers and the signature to req, whose body is body.
func (a *Auth) Sign(req *http.Request, id Identity, body []byte, now time.Time) {
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	h := req.Header
	h.Set(HeaderNode, id.Node)
	h.Set(HeaderTime, strconv.FormatInt(now.UnixMilli(), 10))
	h.Set(HeaderNonce, hex.EncodeToString(nonce[:]))
	h.Set(HeaderTenant, id.Tenant)
	h.Set(HeaderTier, id.Tier)
	h.Set(HeaderKeyID, id.KeyID)
	h.Set(HeaderRequest, id.RequestID)
	h.Set(HeaderSignature, hex.EncodeToString(a.mac(req.Method, req.URL.RequestURI(), h, body)))
}

// IsForwarded reports whether r claims to come from a peer.
func IsForwarded(r *http.Request) bool {
	return r.Header.Get(HeaderSignature) != "" || r.Header.Get(HeaderNode) != ""
}

// Verify checks a forwarded request: the signature over its headers and
// body (read here, up to maxBody bytes, and put back), the time window and
// the nonce. It returns the identity the request acts for, or an error
// wrapping ErrAuth or ErrReplay.
func (a *Auth) Verify(r *http.Request, maxBody int64, now time.Time) (Identity, error) {
	h := r.Header
	sig, err := hex.DecodeString(h.Get(HeaderSignature))
	if err != nil || len(sig) != sha256.Size {
		return Identity{}, ErrAuth
	}
	var body []byte
	if r.Body != nil {
		body, err = io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil {
			return Identity{}, fmt.Errorf("%w: reading the body: %v", ErrAuth, err)
		}
		if int64(len(body)) > maxBody {
			return Identity{}, fmt.Errorf("%w: body over %d bytes", ErrAuth, maxBody)
		}
		_ = r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	if !hmac.Equal(sig, a.mac(r.Method, r.URL.RequestURI(), h, body)) {
		return Identity{}, ErrAuth
	}
	ms, err := strconv.ParseInt(h.Get(HeaderTime), 10, 64)
	if err != nil {
		return Identity{}, ErrAuth
	}
	if d := now.Sub(time.UnixMilli(ms)); d > peerWindow || d < -peerWindow {
		return Identity{}, ErrReplay
	}
	if !a.remember(h.Get(HeaderNonce), now) {
		return Identity{}, ErrReplay
	}
	id := Identity{Node: h.Get(HeaderNode), Tenant: h.Get(HeaderTenant), Tier: h.Get(HeaderTier),
		KeyID: h.Get(HeaderKeyID), RequestID: h.Get(HeaderRequest)}
	if id.Node == "" || id.Tenant == "" || !validPeerRequestID(id.RequestID) {
		return Identity{}, ErrAuth
	}
	if _, ok := pipeline.TierPriority[store.Tier(id.Tier)]; !ok {
		return Identity{}, ErrAuth
	}
	return id, nil
}

// remember records a nonce; false if it was seen within the window (a
// replay) or the cache is full.
func (a *Auth) remember(nonce string, now time.Time) bool {
	if len(nonce) != 32 {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if now.Sub(a.sweep) > peerWindow || len(a.nonces) >= maxNonces {
		for n, until := range a.nonces {
			if now.After(until) {
				delete(a.nonces, n)
			}
		}
		a.sweep = now
	}
	if until, seen := a.nonces[nonce]; seen && !now.After(until) {
		return false
	}
	if len(a.nonces) >= maxNonces {
		return false
	}
	a.nonces[nonce] = now.Add(2 * peerWindow)
	return true
}

// validPeerRequestID accepts the ids llmd makes ("chatcmpl-" and a hex
// suffix and the like): printable, short, no separators.
func validPeerRequestID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	return !strings.ContainsFunc(id, func(r rune) bool {
		return !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	})
}
