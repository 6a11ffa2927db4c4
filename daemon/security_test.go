package daemon

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/engine/sim"
	"github.com/llmd/llmd/peer"
	"github.com/llmd/llmd/store"
)

// The tests in this file are issue 18's findings, each tried as an
// attacker would (reliability.md SE-*).

// signedPost sends body to url as a request forwarded by node, signed with
// key (the cluster's gossip key).
func signedPost(t *testing.T, c *http.Client, key []byte, node, url, body string) (*http.Response, []byte) {
	t.Helper()
	a, err := peer.NewAuth(key)
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	a.Sign(req, peer.Identity{Node: node, Tenant: store.LocalTenant, Tier: "paid", RequestID: "req_forged"},
		[]byte(body), time.Now())
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

// TestForwardedRequestsNeedAClusterKey (SE-8, issue 18 finding 1): a
// cluster without a gossip key has no forwarding key that anyone could
// compute: a "forwarded" request is refused whatever it carries, and the
// nodes serve every request themselves.
func TestForwardedRequestsNeedAClusterKey(t *testing.T) {
	t.Parallel()
	nodes := startTestCluster(t, 2, func(i int, c *Config) {
		c.Cluster.Key, c.Cluster.InsecureGossip = nil, true
		c.Cluster.RoutePolicy = "round_robin"
	})
	c := testClient(t)
	makeKey(t, nodes[0].s, "ops", store.TierEnterprise, true)
	// What the old key derivation gave for an empty key, or any other
	// signature: refused before any route runs.
	for _, path := range []string{"/v1/admin/keys", "/v1/chat/completions"} {
		for name, hdr := range map[string]map[string]string{
			"claims a peer": {peer.HeaderNode: "evil", peer.HeaderTenant: "x", peer.HeaderTier: "enterprise",
				peer.HeaderRequest: "req_x", "X-Llmd-Peer-Admin": "1", peer.HeaderSignature: strings.Repeat("ab", 32)},
		} {
			resp, b := postHdr(t, c, nodes[0].base+path, `{"tenant":"x","admin":true}`, hdr)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s %s: %s", name, path, b)
			require.Equal(t, "permission_denied", errorOf(t, b)["code"])
		}
	}
	resp, _ := call(t, c, http.MethodGet, nodes[0].base+"/v1/admin/keys", "", "")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	// Round robin over two nodes, yet every request is served where it
	// entered.
	for i := range 4 {
		resp, b := post(t, c, nodes[1].base+"/v1/chat/completions", chatJSON(false,
			apiUser(fmt.Sprintf("question %d", i))))
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	}
	require.Zero(t, nodes[0].s.Stats()[0].Completed, "node-a served a request node-b could not forward")
}

// TestPeerIsNeverAdmin (SE-8, finding 2): a request signed with the right
// cluster key reaches the generation routes of a peer, never its admin
// routes.
func TestPeerIsNeverAdmin(t *testing.T) {
	t.Parallel()
	nodes := startTestCluster(t, 2, nil)
	c := testClient(t)
	b0 := nodes[1].base
	resp, b := signedPost(t, c, clusterTestKey, "node-a", b0+"/v1/admin/keys", `{"tenant":"x","admin":true}`)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s", b)
	require.Equal(t, "permission_denied", errorOf(t, b)["code"])
	resp, b = signedPost(t, c, clusterTestKey, "node-a", b0+"/v1/chat/completions",
		`{"model":"sim/small","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	keys, err := nodes[1].s.deps.Store.Keys(t.Context())
	require.NoError(t, err)
	require.Empty(t, keys)
}

// TestRevokingTheLastKeyStaysClosed (finding 3): once keys have existed,
// revoking every one of them leaves the node closed: no key, the revoked
// key and garbage are all refused, and nobody mints a new admin key
// anonymously; --anonymous opens it again, on loopback only.
func TestRevokingTheLastKeyStaysClosed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newStoreServer(t, func(c *Config) { c.DataDir = dir })
	base := startServer(t, s)
	c := testClient(t)
	resp, b := call(t, c, http.MethodPost, base+"/v1/admin/keys", "", `{"admin":true}`)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", b)
	key := jsonMap(t, string(b))["key"].(string)
	id := jsonMap(t, string(b))["id"].(string)
	resp, b = call(t, c, http.MethodDelete, base+"/v1/admin/keys/"+id, key, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)

	for name, k := range map[string]string{"no key": "", "revoked": key, "garbage": "garbage"} {
		resp, b := call(t, c, http.MethodGet, base+"/v1/admin/snapshot", k, "")
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s: %s", name, b)
		resp, _ = call(t, c, http.MethodPost, base+"/v1/chat/completions", k,
			`{"model":"sim/small","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, name)
	}
	resp, _ = call(t, c, http.MethodPost, base+"/v1/admin/keys", "", `{"admin":true}`)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "no admin key minted anonymously")

	cfg := testConfig()
	cfg.Anonymous, cfg.Listen, cfg.DataDir = true, "0.0.0.0:0", dir
	require.ErrorContains(t, cfg.Validate(), "--anonymous")
}

// TestAnonymousFlagReopensLoopback: --anonymous serves keyless requests
// as the local tenant after keys were made.
func TestAnonymousFlagReopensLoopback(t *testing.T) {
	t.Parallel()
	s := newStoreServer(t, func(c *Config) { c.Anonymous = true })
	makeKey(t, s, "ops", store.TierPaid, true)
	base := startServer(t, s)
	resp, b := call(t, testClient(t), http.MethodGet, base+"/v1/models", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
}

// TestBrowserRequestsRefused (finding 4): while no key exists, a page
// whose host name points at llmd (DNS rebinding) reads nothing; a
// cross-site page changes nothing, neither with a "simple" text/plain post
// nor with JSON; an origin named by --cors-origin may.
func TestBrowserRequestsRefused(t *testing.T) {
	t.Parallel()
	s := newStoreServer(t, func(c *Config) { c.CORSOrigins = []string{"https://app.example"} })
	base := startServer(t, s)
	c := testClient(t)
	do := func(method, path, body string, hdr map[string]string) (*http.Response, []byte) {
		req, err := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(body))
		require.NoError(t, err)
		for k, v := range hdr {
			if k == "Host" {
				req.Host = v
				continue
			}
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	resp, b := do(http.MethodGet, "/v1/admin/snapshot", "", map[string]string{"Host": "evil.example:8700"})
	require.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode, "%s", b)
	require.Equal(t, "misdirected_request", errorOf(t, b)["code"])
	resp, _ = do(http.MethodGet, "/v1/admin/snapshot", "", map[string]string{"Host": "localhost:8700"})
	require.Equal(t, http.StatusOK, resp.StatusCode)

	resp, b = do(http.MethodPost, "/v1/admin/keys", `{"admin":true}`, map[string]string{"Content-Type": "text/plain"})
	require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode, "%s", b)
	resp, b = do(http.MethodPost, "/v1/admin/keys", `{"admin":true}`,
		map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example"})
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s", b)
	require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"))
	keys, err := s.deps.Store.Keys(t.Context())
	require.NoError(t, err)
	require.Empty(t, keys, "no key was made")

	resp, _ = do(http.MethodOptions, "/v1/chat/completions", "", map[string]string{"Origin": "http://evil.example",
		"Access-Control-Request-Method": "POST"})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp, _ = do(http.MethodOptions, "/v1/chat/completions", "", map[string]string{"Origin": "https://app.example",
		"Access-Control-Request-Method": "POST"})
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Equal(t, "https://app.example", resp.Header.Get("Access-Control-Allow-Origin"))
	resp, b = do(http.MethodPost, "/v1/chat/completions", `{"model":"sim/small","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`,
		map[string]string{"Content-Type": "application/json", "Origin": "https://app.example"})
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	require.Equal(t, "https://app.example", resp.Header.Get("Access-Control-Allow-Origin"))
}

// TestSlowAndIdleConnectionsBounded (finding 5): a trickled body is cut at
// the body timeout with 408, idle kept-alive connections close at the idle
// timeout, and a client past the per-client connection cap gets 503.
func TestSlowAndIdleConnectionsBounded(t *testing.T) {
	t.Parallel()
	s := newStoreServer(t, func(c *Config) {
		c.BodyTimeout, c.IdleTimeout, c.MaxClientConnections = 300*time.Millisecond, 300*time.Millisecond, 30
		c.StepTimeScale = 1 // about 5 ms a token: 100 tokens outlast the body timeout
	})
	base := startServer(t, s)
	addr := strings.TrimPrefix(base, "http://")

	// 20 slowloris bodies: a byte now, the rest never.
	var wg sync.WaitGroup
	start := time.Now()
	for range 20 {
		wg.Go(func() {
			conn, err := net.Dial("tcp", addr)
			if !assertNoErr(t, err) {
				return
			}
			defer conn.Close()
			_, _ = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n"+
				"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if assertNoErr(t, err) {
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusRequestTimeout {
					t.Errorf("status %d, want 408", resp.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	require.Less(t, time.Since(start), 3*time.Second, "slow bodies were cut at the body timeout")

	// The body timeout bounds reading the request, not a stream that lasts
	// longer than it.
	st := openSSE(t, testClient(t), http.MethodPost, base+"/v1/chat", "", nativeBody(3, 100, "a longer story"), nil)
	require.Equal(t, http.StatusOK, st.resp.StatusCode)
	begun := time.Now()
	rest := st.rest(t)
	require.Equal(t, "done", rest[len(rest)-1].event)
	require.Greater(t, time.Since(begun), 300*time.Millisecond, "the stream outlasted the body timeout")

	// An idle kept-alive connection is closed at the idle timeout.
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	idle := time.Now()
	_, err = br.ReadByte()
	require.ErrorIs(t, err, io.EOF, "closed, not timed out on our side")
	require.Less(t, time.Since(idle), 3*time.Second)

	// Past 30 connections from this address: 503 at once.
	var open []net.Conn
	defer func() {
		for _, c := range open {
			_ = c.Close()
		}
	}()
	for range 30 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		open = append(open, c)
	}
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusServiceUnavailable && bytes.Contains(b, []byte("too_many_connections"))
	}, 5*time.Second, 20*time.Millisecond)
}

func assertNoErr(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// TestSlowReaderCutInTime (finding 8): a client that takes its stream
// slowly is cut once it is MaxClientLagTime behind, though it never falls
// the byte bound behind; the stream goes on and can be resumed.
func TestSlowReaderCutInTime(t *testing.T) {
	t.Parallel()
	s := newTunedSim(t, func(sc *sim.Config) { sc.MeanOutputTokens = 0 }, func(c *Config) {
		c.StepTimeScale = 1
		c.MaxClientLagTime = 500 * time.Millisecond
		c.SendBufferBytes = 4096
		c.StreamWriteTimeout = 30 * time.Second // only the lag may cut it
		c.ResumeGrace = time.Minute
	})
	base := startChecked(t, s)
	addr := strings.TrimPrefix(base, "http://")
	resp := rawStream(t, dialSmallWindow(t, addr), "/v1/chat/completions", openaiBody("sim/small", 7, 3000, "Go on"),
		map[string]string{"X-Resumable": "true"})
	id := resp.Header.Get("X-Request-Id")
	start := time.Now()
	buf := make([]byte, 256)
	var got []byte
	for {
		n, err := resp.Body.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			break
		}
		time.Sleep(50 * time.Millisecond) // about 5 KB a second; the stream makes several times that
		require.Less(t, time.Since(start), 20*time.Second, "never cut")
	}
	require.NotContains(t, string(got), "[DONE]", "cut before its end")
	l := s.streams.Get(id, store.LocalTenant)
	require.NotNil(t, l)
	require.False(t, l.Done(), "the stream goes on after the cut (%v)", time.Since(start))
	c := testClient(t)
	resp2, b := call(t, c, http.MethodDelete, requestURL(base, id), "", "")
	require.Equal(t, http.StatusOK, resp2.StatusCode, "%s", b)
	rest := openSSE(t, c, http.MethodGet, requestURL(base, id)+"/stream", "", "", nil).rest(t)
	require.Equal(t, 1, terminalCount(rest), "resumed to its one terminal event")
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and localhost
// and its key into dir and returns their paths.
func selfSigned(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kb, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600))
	return certFile, keyFile
}

// tlsClient trusts the certificate in certFile only.
func tlsClient(t *testing.T, certFile string) *http.Client {
	t.Helper()
	pemBytes, err := os.ReadFile(certFile)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pemBytes))
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// TestServeTLS (finding 7): llmd serves a stream over HTTPS with a
// certificate made here; ReloadTLS serves a new pair to new connections
// while a stream on the old one goes on; plain HTTP is refused.
func TestServeTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := selfSigned(t, dir, "first")
	s := newStoreServer(t, func(c *Config) {
		c.TLSCertFile, c.TLSKeyFile = certFile, keyFile
		c.StepTimeScale = 0.2
	})
	base := strings.Replace(startServer(t, s), "http://", "https://", 1)
	c := tlsClient(t, certFile)

	st := openSSE(t, c, http.MethodPost, base+"/v1/chat", "", nativeBody(1, 200, "tell me a story"), nil)
	require.Equal(t, http.StatusOK, st.resp.StatusCode)
	first, err := st.next()
	require.NoError(t, err)
	require.Empty(t, first.event, "a token: %v", first.lines)
	require.Equal(t, "first", st.resp.TLS.PeerCertificates[0].Subject.CommonName)

	// A new pair in the same files, reloaded.
	newCert, newKey := selfSigned(t, t.TempDir(), "second")
	for from, to := range map[string]string{newCert: certFile, newKey: keyFile} {
		b, err := os.ReadFile(from)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(to, b, 0o600))
	}
	require.NoError(t, s.ReloadTLS())
	c2 := tlsClient(t, certFile)
	resp, err := c2.Get(base + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "second", resp.TLS.PeerCertificates[0].Subject.CommonName)

	rest := st.rest(t)
	require.Equal(t, 1, terminalCount(rest), "the stream on the old certificate ended normally")
	require.Equal(t, "done", rest[len(rest)-1].event)

	plain := strings.Replace(base, "https://", "http://", 1)
	resp, err = testClient(t).Get(plain + "/healthz")
	if err == nil {
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "plain HTTP on the TLS port")
	}
	require.NoError(t, os.WriteFile(keyFile, []byte("not a key"), 0o600))
	require.Error(t, s.ReloadTLS(), "a bad pair is refused and the old one kept")
}

// TestTLSClusterForwards: nodes that serve TLS forward to each other over
// HTTPS, checking the peer against the CA (--ca-cert).
func TestTLSClusterForwards(t *testing.T) {
	t.Parallel()
	certFile, keyFile := selfSigned(t, t.TempDir(), "cluster")
	nodes := startTestCluster(t, 2, func(i int, c *Config) {
		c.TLSCertFile, c.TLSKeyFile, c.CAFile = certFile, keyFile, certFile
		c.Cluster.RoutePolicy = "round_robin"
	})
	c := tlsClient(t, certFile)
	base := strings.Replace(nodes[0].base, "http://", "https://", 1)
	served := 0
	for i := range 4 {
		resp, b := post(t, c, base+"/v1/chat/completions", chatJSON(false, apiUser(fmt.Sprintf("q %d", i))))
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
		rows := usageRows(t, nodes, resp.Header.Get("X-Request-Id"))
		if strings.HasPrefix(rows["node-a"].Route, "node-b ") {
			served++
		}
	}
	require.Positive(t, served, "node-a forwarded to node-b over HTTPS")
}

func apiUser(content string) api.Message {
	return api.Message{Role: "user", Content: api.Content(content)}
}
