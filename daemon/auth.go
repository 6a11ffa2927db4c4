package daemon

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/llmd/llmd/store"
)

// policy says who may call a route. Every route in the table names one;
// the zero value is refused (fail closed) and fails the route-table test.
type policy uint8

const (
	policyUnset policy = iota
	// policyPublic: anyone, no key read (/healthz, /readyz).
	policyPublic
	// policyUser: any valid key, or the local tenant while anonymous use is
	// allowed.
	policyUser
	// policyAdmin: an admin key, or an anonymous loopback client while
	// anonymous use is allowed (that is how the first admin key is made).
	policyAdmin
)

func (p policy) String() string {
	switch p {
	case policyPublic:
		return "public"
	case policyUser:
		return "user"
	case policyAdmin:
		return "admin"
	}
	return "unset"
}

// principal is who a request acts for.
type principal struct {
	tenant string
	// keyID is the API key's id; "" for anonymous (local) requests.
	keyID string
	admin bool
	// peer is the id of the node that forwarded the request ("" for a
	// client's own request); tier and requestID are what that node
	// decided (see peerAuth).
	peer, tier, requestID string
}

type principalKey struct{}

// principalFrom returns the request's principal; requests that passed the
// auth check always have one (public routes get the local tenant).
func principalFrom(ctx context.Context) principal {
	if p, ok := ctx.Value(principalKey{}).(principal); ok {
		return p
	}
	return principal{tenant: store.LocalTenant}
}

var (
	errNoKey      = errors.New("daemon: no API key")
	errBadKey     = errors.New("daemon: invalid API key")
	errNotAdmin   = errors.New("daemon: admin key required")
	errUnsetRoute = errors.New("daemon: route has no access policy")
)

// authError is the client-facing form of an authentication failure, or
// nil when err is not one (a store failure: a 500).
func authError(err error) *requestError {
	switch {
	case errors.Is(err, errNotAdmin):
		return &requestError{Status: http.StatusForbidden, Type: typeInvalidRequest, Code: "permission_denied",
			Message: "this route needs an admin API key; create one with `llmctl keys create --admin`"}
	case errors.Is(err, errNoKey):
		return &requestError{Status: http.StatusUnauthorized, Type: typeInvalidRequest, Code: "invalid_api_key",
			Message: "you must provide an API key: send `Authorization: Bearer <key>` (llmctl: --api-key or LLMD_API_KEY)"}
	case errors.Is(err, errUnsetRoute):
		return &requestError{Status: http.StatusForbidden, Type: typeInvalidRequest, Code: "permission_denied",
			Message: "this route is not open to any caller"}
	case errors.Is(err, errPeerAuth), errors.Is(err, errPeerReplay):
		return &requestError{Status: http.StatusForbidden, Type: typeInvalidRequest, Code: "permission_denied",
			Message: "forwarded request refused: its peer signature is missing, wrong, replayed or too old"}
	case errors.Is(err, errBadKey):
		return &requestError{Status: http.StatusUnauthorized, Type: typeInvalidRequest, Code: "invalid_api_key",
			Message: "the API key is not valid (it may have been revoked)"}
	}
	return nil
}

// authenticate decides whether r may call a route of policy pol and returns
// the principal it acts for. It reads the key from the Authorization header
// only; the key is never logged or echoed.
func (s *Server) authenticate(r *http.Request, pol policy) (principal, error) {
	switch pol {
	case policyPublic:
		return principal{tenant: store.LocalTenant}, nil
	case policyUser, policyAdmin:
	default:
		return principal{}, errUnsetRoute
	}
	p, err := s.principal(r)
	if err != nil {
		return principal{}, err
	}
	if pol == policyAdmin && !p.admin {
		return principal{}, errNotAdmin
	}
	return p, nil
}

// principal identifies the caller: the key's tenant; or, while no key
// exists, the local tenant, whatever key is sent (the official SDKs insist
// on sending one, "EMPTY" or "ollama", as with vLLM and Ollama). A valid key
// costs one lookup; only a missing or refused key asks whether any exists.
func (s *Server) principal(r *http.Request) (principal, error) {
	if isForwarded(r) {
		if s.peers == nil {
			return principal{}, errPeerAuth
		}
		id, err := s.peers.verify(r, s.cfg.MaxBodyBytes, time.Now())
		if err != nil {
			s.log.Warn("refused a forwarded request", "remote", r.RemoteAddr, "peer", capHeader(r.Header.Get(hdrPeer), 64),
				"path", r.URL.Path, "err", err)
			return principal{}, err
		}
		return principal{tenant: id.tenant, keyID: id.keyID, admin: id.admin, peer: id.node, tier: id.tier,
			requestID: id.requestID}, nil
	}
	if secret, present := bearer(r); present && s.store != nil {
		k, err := s.store.Authenticate(r.Context(), secret)
		if err == nil {
			return principal{tenant: k.Tenant, keyID: k.ID, admin: k.Admin}, nil
		}
		if !errors.Is(err, store.ErrBadKey) {
			return principal{}, err
		}
	}
	open, err := s.anonymousAllowed(r.Context())
	switch {
	case err != nil:
		return principal{}, err
	case !open && r.Header.Get("Authorization") != "":
		return principal{}, errBadKey
	case !open:
		return principal{}, errNoKey
	}
	// Anonymous callers act as the local tenant; they administer only from
	// loopback (with --insecure the listener may not be).
	return principal{tenant: store.LocalTenant, admin: loopbackRemote(r)}, nil
}

// anonymousAllowed reports whether requests without a key are served (as
// the local tenant): while no API key exists. It asks the store each time,
// so a key created offline (llmctl keys create --data-dir) closes the door
// at once.
func (s *Server) anonymousAllowed(ctx context.Context) (bool, error) {
	if s.store == nil {
		return true, nil
	}
	n, _, err := s.store.ActiveKeys(ctx)
	if err != nil {
		return false, err
	}
	return n == 0, nil
}

// bearer returns the token of an "Authorization: Bearer" header and whether
// an Authorization header was sent at all (a malformed one is a bad key).
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", false
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", true
	}
	return strings.TrimSpace(tok), true
}

// loopbackRemote reports whether r came from a loopback address.
func loopbackRemote(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
