package daemon

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

	"github.com/llmd/llmd/store"
)

// Peer forwarding is authenticated with an HMAC-SHA256 over the request and
// the identity it acts for, keyed by a key derived from the cluster's
// gossip key, with a timestamp window and a nonce that is accepted once
// (SE-8). Gossip encryption protects the gossip; this protects the
// forwarding channel, which is plain HTTP between the nodes' API ports.
const (
	hdrPeer        = "X-Llmd-Peer"            // the forwarding node's id
	hdrPeerTime    = "X-Llmd-Peer-Time"       // unix milliseconds
	hdrPeerNonce   = "X-Llmd-Peer-Nonce"      // 16 random bytes, hex
	hdrPeerTenant  = "X-Llmd-Peer-Tenant"     // the tenant the request acts for
	hdrPeerTier    = "X-Llmd-Peer-Tier"       // the tenant's tier on the entry node
	hdrPeerKey     = "X-Llmd-Peer-Key-Id"     // the client's API key id, "" if anonymous
	hdrPeerAdmin   = "X-Llmd-Peer-Admin"      // "1" for an admin key
	hdrPeerRequest = "X-Llmd-Peer-Request-Id" // the entry node's request id, kept by the peer
	hdrPeerSig     = "X-Llmd-Peer-Signature"  // hex HMAC of all the above, the method, path and body

	// trailerUsage carries a forwarded request's usage back to the entry
	// node (an HTTP trailer, after the body), so that the entry node
	// settles the quota and writes the one usage row.
	trailerUsage = "Llmd-Usage"

	// peerWindow is how far a forwarded request's timestamp may be from
	// the receiver's clock; a nonce is remembered for twice as long.
	peerWindow = 30 * time.Second
	// maxNonces bounds the replay cache; beyond it forwarded requests are
	// refused until old nonces expire.
	maxNonces = 1 << 20
)

var (
	errPeerAuth   = errors.New("daemon: forwarded request refused: bad or missing peer signature")
	errPeerReplay = errors.New("daemon: forwarded request refused: replayed or outside the time window")
)

// peerAuth signs and verifies forwarded requests.
type peerAuth struct {
	key []byte

	mu     sync.Mutex
	nonces map[string]time.Time // nonce -> when it may be forgotten
	sweep  time.Time
}

// newPeerAuth derives the forwarding key from the gossip key. An empty
// gossip key (--insecure-gossip) gives a key anyone can compute: forwarded
// requests are then as unauthenticated as the gossip.
func newPeerAuth(gossipKey []byte) *peerAuth {
	m := hmac.New(sha256.New, gossipKey)
	m.Write([]byte("llmd peer forwarding v1"))
	return &peerAuth{key: m.Sum(nil), nonces: map[string]time.Time{}}
}

// peerIdentity is what a forwarded request acts for.
type peerIdentity struct {
	node, tenant, tier, keyID, requestID string
	admin                                bool
}

// mac is the signature of a request with these headers and body.
func (a *peerAuth) mac(method, uri string, h http.Header, body []byte) []byte {
	sum := sha256.Sum256(body)
	m := hmac.New(sha256.New, a.key)
	for _, part := range []string{method, uri, h.Get(hdrPeerTime), h.Get(hdrPeerNonce), h.Get(hdrPeer),
		h.Get(hdrPeerTenant), h.Get(hdrPeerTier), h.Get(hdrPeerKey), h.Get(hdrPeerAdmin), h.Get(hdrPeerRequest),
		hex.EncodeToString(sum[:])} {
		m.Write([]byte(strconv.Itoa(len(part))))
		m.Write([]byte{':'})
		m.Write([]byte(part))
	}
	return m.Sum(nil)
}

// sign adds the peer headers and the signature to req, whose body is body.
func (a *peerAuth) sign(req *http.Request, id peerIdentity, body []byte, now time.Time) {
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	h := req.Header
	h.Set(hdrPeer, id.node)
	h.Set(hdrPeerTime, strconv.FormatInt(now.UnixMilli(), 10))
	h.Set(hdrPeerNonce, hex.EncodeToString(nonce[:]))
	h.Set(hdrPeerTenant, id.tenant)
	h.Set(hdrPeerTier, id.tier)
	h.Set(hdrPeerKey, id.keyID)
	h.Set(hdrPeerAdmin, map[bool]string{true: "1", false: "0"}[id.admin])
	h.Set(hdrPeerRequest, id.requestID)
	h.Set(hdrPeerSig, hex.EncodeToString(a.mac(req.Method, req.URL.RequestURI(), h, body)))
}

// isForwarded reports whether r claims to come from a peer.
func isForwarded(r *http.Request) bool {
	return r.Header.Get(hdrPeerSig) != "" || r.Header.Get(hdrPeer) != ""
}

// verify checks a forwarded request: the signature over its headers and
// body (read here, up to maxBody bytes, and put back), the time window and
// the nonce. It returns the identity the request acts for.
func (a *peerAuth) verify(r *http.Request, maxBody int64, now time.Time) (peerIdentity, error) {
	h := r.Header
	sig, err := hex.DecodeString(h.Get(hdrPeerSig))
	if err != nil || len(sig) != sha256.Size {
		return peerIdentity{}, errPeerAuth
	}
	var body []byte
	if r.Body != nil {
		body, err = io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil {
			return peerIdentity{}, fmt.Errorf("%w: reading the body: %v", errPeerAuth, err)
		}
		if int64(len(body)) > maxBody {
			return peerIdentity{}, fmt.Errorf("%w: body over %d bytes", errPeerAuth, maxBody)
		}
		_ = r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	if !hmac.Equal(sig, a.mac(r.Method, r.URL.RequestURI(), h, body)) {
		return peerIdentity{}, errPeerAuth
	}
	ms, err := strconv.ParseInt(h.Get(hdrPeerTime), 10, 64)
	if err != nil {
		return peerIdentity{}, errPeerAuth
	}
	if d := now.Sub(time.UnixMilli(ms)); d > peerWindow || d < -peerWindow {
		return peerIdentity{}, errPeerReplay
	}
	if !a.remember(h.Get(hdrPeerNonce), now) {
		return peerIdentity{}, errPeerReplay
	}
	id := peerIdentity{node: h.Get(hdrPeer), tenant: h.Get(hdrPeerTenant), tier: h.Get(hdrPeerTier),
		keyID: h.Get(hdrPeerKey), admin: h.Get(hdrPeerAdmin) == "1", requestID: h.Get(hdrPeerRequest)}
	if id.node == "" || id.tenant == "" || !validPeerRequestID(id.requestID) {
		return peerIdentity{}, errPeerAuth
	}
	if _, ok := tierPriority[store.Tier(id.tier)]; !ok {
		return peerIdentity{}, errPeerAuth
	}
	return id, nil
}

// remember records a nonce; false if it was seen within the window (a
// replay) or the cache is full.
func (a *peerAuth) remember(nonce string, now time.Time) bool {
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
