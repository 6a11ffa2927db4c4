package server

import (
	"errors"
	"mime"
	"net"
	"net/http"
	"slices"
	"strings"
)

// Browser safety. llmd serves no web page, so a browser that talks to it
// on a user's machine does so from someone else's page: a cross-site
// "simple" request (a form post, text/plain) that needs no preflight, or a
// page whose host name an attacker points at 127.0.0.1 (DNS rebinding),
// which the browser then treats as same-origin. The guards below refuse
// both before anything else runs.

var (
	errCrossOrigin      = errors.New("server: a cross-origin request may not change state")
	errContentType      = errors.New("server: the body must be JSON")
	errMisdirected      = errors.New("server: unknown host for anonymous access")
	errPreflightRefused = errors.New("server: cross-origin preflight refused")
)

// changesState reports whether method changes state on llmd's routes.
func changesState(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch:
		return true
	}
	return false
}

// guard checks a request before authentication: an Origin that is not
// allowed may not change state (every route), a body must be JSON
// (Content-Type application/json, or none), and a CORS preflight is
// answered (204 for an allowed origin) or refused. It returns false when
// it has answered.
func (s *Server) guard(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	allowed := origin != "" && slices.Contains(s.cfg.CORSOrigins, origin)
	if allowed {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		h.Set("Access-Control-Expose-Headers", "X-Request-Id, Retry-After, X-Ratelimit-Remaining-Requests, "+
			"X-Ratelimit-Remaining-Tokens")
	}
	if r.Method == http.MethodOptions && origin != "" {
		if !allowed {
			writeError(w, "", errPreflightRefused)
			return false
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE")
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID, X-Request-Id, X-Resumable, "+
			"X-Conversation-Id, X-Session-Id")
		h.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return false
	}
	if origin != "" && !allowed && changesState(r.Method) {
		writeError(w, "", errCrossOrigin)
		return false
	}
	if r.Method == http.MethodPost || r.Method == http.MethodPut {
		if ct := r.Header.Get("Content-Type"); ct != "" {
			// The models config is YAML; like JSON it is no type a form can
			// send across origins without a preflight.
			mt, _, err := mime.ParseMediaType(ct)
			yaml := mt == "application/yaml" && r.URL.Path == "/v1/admin/models/config"
			if err != nil || (mt != "application/json" && !yaml) {
				writeError(w, "", errContentType)
				return false
			}
		}
	}
	return true
}

// hostAllowed reports whether anonymous access may come through host (a
// Host header): an IP address, a loopback name, the listen address's host
// or an allowed host (Config.AllowedHosts). A host name an attacker
// controls and points at this machine (DNS rebinding) is none of these.
func (s *Server) hostAllowed(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	switch {
	case host == "localhost" || strings.HasSuffix(host, ".localhost"):
		return true
	case net.ParseIP(host) != nil:
		return true
	case host == s.cfg.listenHost():
		return true
	}
	return slices.Contains(s.cfg.AllowedHosts, host)
}

// listenHost is the host of the listen address, lower case ("" for none).
func (c Config) listenHost() string {
	h, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return ""
	}
	return strings.ToLower(h)
}
