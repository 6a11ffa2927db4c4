package peer

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var clusterTestKey = []byte("0123456789abcdef0123456789abcdef")

// TestPeerSignature (SE-8): a forwarded request is accepted only with a
// signature made with the cluster's key over its headers and body, within
// 30 s, once.
func TestPeerSignature(t *testing.T) {
	t.Parallel()
	a, err := NewAuth(clusterTestKey)
	require.NoError(t, err)
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"model":"sim/small"}`)
	id := Identity{Node: "n1", Tenant: "acme", Tier: "paid", KeyID: "k1", RequestID: "chatcmpl-1"}
	signed := func(a *Auth, at time.Time, body []byte) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
		a.Sign(r, id, body, at)
		return r
	}
	got, err := a.Verify(signed(a, now, body), 1<<20, now)
	require.NoError(t, err)
	require.Equal(t, id, got)

	r := signed(a, now, body)
	_, err = a.Verify(r, 1<<20, now)
	require.NoError(t, err)
	r.Body = httptestBody(body)
	_, err = a.Verify(r, 1<<20, now.Add(time.Second))
	require.ErrorIs(t, err, ErrReplay, "a replay within the window")

	_, err = a.Verify(signed(a, now.Add(-31*time.Second), body), 1<<20, now)
	require.ErrorIs(t, err, ErrReplay, "too old")
	_, err = a.Verify(signed(a, now.Add(31*time.Second), body), 1<<20, now)
	require.ErrorIs(t, err, ErrReplay, "from the future")

	other, err := NewAuth([]byte("another cluster's key, 32 bytes!"))
	require.NoError(t, err)
	_, err = a.Verify(signed(other, now, body), 1<<20, now)
	require.ErrorIs(t, err, ErrAuth, "another key")

	r = signed(a, now, body)
	r.Body = httptestBody([]byte(`{"model":"sim/mid"}`))
	_, err = a.Verify(r, 1<<20, now)
	require.ErrorIs(t, err, ErrAuth, "a changed body")

	r = signed(a, now, body)
	r.Header.Set(HeaderTenant, "someone-else")
	_, err = a.Verify(r, 1<<20, now)
	require.ErrorIs(t, err, ErrAuth, "a changed tenant")

	r = signed(a, now, body)
	r.Header.Set(HeaderTier, "platinum")
	r.Header.Set(HeaderSignature, hexOf(a.mac(r.Method, r.URL.RequestURI(), r.Header, body)))
	_, err = a.Verify(r, 1<<20, now)
	require.ErrorIs(t, err, ErrAuth, "an unknown tier, even signed")
}

func httptestBody(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }

func hexOf(b []byte) string { return fmt.Sprintf("%x", b) }

// TestNoKeyNoForwarding (SE-8): without a cluster key there is no
// forwarding key: the one derived from nothing would be anyone's.
func TestNoKeyNoForwarding(t *testing.T) {
	t.Parallel()
	for _, key := range [][]byte{nil, {}, []byte("short")} {
		_, err := NewAuth(key)
		require.ErrorIs(t, err, ErrNoKey)
	}
}

// TestForwardedIdentityHasNoAdmin: an admin header a forger adds is not
// signed and grants nothing; the identity has no admin right to carry.
func TestForwardedIdentityHasNoAdmin(t *testing.T) {
	t.Parallel()
	a, err := NewAuth(clusterTestKey)
	require.NoError(t, err)
	now := time.Unix(1_800_000_000, 0)
	r := httptest.NewRequest(http.MethodPost, "/v1/admin/keys", bytes.NewReader(nil))
	a.Sign(r, Identity{Node: "n1", Tenant: "acme", Tier: "paid", RequestID: "req_1"}, nil, now)
	r.Header.Set("X-Llmd-Peer-Admin", "1")
	id, err := a.Verify(r, 1<<20, now)
	require.NoError(t, err, "the extra header is ignored")
	require.Equal(t, Identity{Node: "n1", Tenant: "acme", Tier: "paid", RequestID: "req_1"}, id)
}
