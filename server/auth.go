package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/llmd/llmd/peer"
	"github.com/llmd/llmd/pipeline"
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

type principalKey struct{}

// principalFrom returns the request's principal; requests that passed the
// auth check always have one (public routes get the local tenant).
func principalFrom(ctx context.Context) pipeline.Principal {
	if p, ok := ctx.Value(principalKey{}).(pipeline.Principal); ok {
		return p
	}
	return pipeline.Principal{Tenant: store.LocalTenant}
}

// authenticate decides whether r may call a route of policy pol and returns
// the principal it acts for. It reads the key from the Authorization header
// or the X-Api-Key header; the key is never logged or echoed.
func (s *Server) authenticate(r *http.Request, pol policy) (pipeline.Principal, error) {
	switch pol {
	case policyPublic:
		return pipeline.Principal{Tenant: store.LocalTenant}, nil
	case policyUser, policyAdmin:
	default:
		return pipeline.Principal{}, errUnsetRoute
	}
	p, err := s.principal(r)
	if err != nil {
		return pipeline.Principal{}, err
	}
	if pol == policyAdmin && !p.Admin {
		return pipeline.Principal{}, errNotAdmin
	}
	return p, nil
}

// principal identifies the caller: the key's tenant; or, while no key
// exists, the local tenant, whatever key is sent (the official SDKs insist
// on sending one, "EMPTY" or "ollama", as with vLLM and Ollama). A valid key
// costs one lookup; only a missing or refused key asks whether any exists.
// A request signed by a peer acts for the identity it carries.
func (s *Server) principal(r *http.Request) (pipeline.Principal, error) {
	if peer.IsForwarded(r) {
		if s.peerAuth == nil {
			return pipeline.Principal{}, peer.ErrAuth
		}
		id, err := s.peerAuth.Verify(r, s.cfg.MaxBodyBytes, time.Now())
		if err != nil {
			s.log.Warn("refused a forwarded request", "remote", r.RemoteAddr,
				"peer", capText(r.Header.Get(peer.HeaderNode), 64), "path", r.URL.Path, "err", err)
			return pipeline.Principal{}, err
		}
		return pipeline.Principal{Tenant: id.Tenant, KeyID: id.KeyID, Peer: id.Node, Tier: id.Tier,
			RequestID: id.RequestID}, nil
	}
	secret, present := apiKey(r)
	if present && s.store != nil {
		k, err := s.store.Authenticate(r.Context(), secret)
		if err == nil {
			return pipeline.Principal{Tenant: k.Tenant, KeyID: k.ID, Admin: k.Admin}, nil
		}
		if !errors.Is(err, store.ErrBadKey) {
			return pipeline.Principal{}, err
		}
	}
	open, err := s.anonymousAllowed(r.Context())
	switch {
	case err != nil:
		return pipeline.Principal{}, err
	case !open && present:
		return pipeline.Principal{}, errBadKey
	case !open:
		return pipeline.Principal{}, errNoKey
	}
	// Anonymous callers act as the local tenant; they administer only from
	// loopback (with --insecure the listener may not be). A page whose host
	// name points at this machine (DNS rebinding) is not one of them.
	if !s.hostAllowed(r.Host) {
		return pipeline.Principal{}, errMisdirected
	}
	return pipeline.Principal{Tenant: store.LocalTenant, Admin: loopbackRemote(r)}, nil
}

// anonymousAllowed reports whether requests without a key are served (as
// the local tenant): on a node whose store has never had an API key, or
// with Config.Anonymous. It fails closed: revoking every key leaves the
// node closed. It asks the store each time, so a key created offline
// (llmctl keys create --data-dir) closes the door at once.
func (s *Server) anonymousAllowed(ctx context.Context) (bool, error) {
	if s.store == nil || s.cfg.Anonymous {
		return true, nil
	}
	made, err := s.store.KeysEverMade(ctx)
	if err != nil {
		return false, err
	}
	return !made, nil
}

// apiKey returns the key r sends, in an "Authorization: Bearer" header or
// (Anthropic's clients) an X-Api-Key header, and whether either was sent
// at all (a malformed one is a bad key).
func apiKey(r *http.Request) (string, bool) {
	if r.Header.Get("Authorization") == "" {
		if k := r.Header.Values("X-Api-Key"); len(k) > 0 {
			return strings.TrimSpace(k[0]), true
		}
	}
	return bearer(r)
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

// capText trims a client-supplied value for logging.
func capText(v string, n int) string {
	v = strings.TrimSpace(v)
	if len(v) > n {
		v = v[:n]
	}
	return v
}
