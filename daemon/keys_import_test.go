package daemon

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/store"
)

// TestImportKeyOverHTTP: a key created on one node, added to another with
// POST /v1/admin/keys {"key": ...}, works on both; a mistyped key is a 400.
func TestImportKeyOverHTTP(t *testing.T) {
	t.Parallel()
	a, b := newStoreServer(t, nil), newStoreServer(t, nil)
	adminA, adminB := makeKey(t, a, "ops", store.TierPaid, true), makeKey(t, b, "ops", store.TierPaid, true)
	baseA, baseB := startServer(t, a), startServer(t, b)
	c := testClient(t)

	resp, raw := call(t, c, http.MethodPost, baseA+"/v1/admin/keys", adminA, `{"tenant":"acme","name":"backend"}`)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", raw)
	var made api.KeyCreated
	require.NoError(t, json.Unmarshal(raw, &made))

	body, _ := json.Marshal(api.KeyCreateRequest{Tenant: "acme", Name: "backend", Key: made.Key})
	resp, raw = call(t, c, http.MethodPost, baseB+"/v1/admin/keys", adminB, string(body))
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", raw)
	var imported api.KeyCreated
	require.NoError(t, json.Unmarshal(raw, &imported))
	require.Equal(t, made.ID, imported.ID)

	chat := `{"model":"sim/small","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
	for _, base := range []string{baseA, baseB} {
		resp, raw = call(t, c, http.MethodPost, base+"/v1/chat/completions", made.Key, chat)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	}

	resp, raw = call(t, c, http.MethodPost, baseB+"/v1/admin/keys", adminB, `{"tenant":"acme","key":"llmd-notakey"}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", raw)
	require.Equal(t, "key", errorOf(t, raw)["param"])
}
