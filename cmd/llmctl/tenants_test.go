package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

func TestTenantsList(t *testing.T) {
	srv := newFakeAdmin(t, &fakeAdmin{})
	out, errOut, err := runCmd(t, "", "--addr", srv.URL, "--api-key", adminKey, "tenants", "list")
	require.NoError(t, err)
	require.Empty(t, errOut)
	require.Equal(t, ""+
		"ID       TIER        KEYS  CREATED\n"+
		"acme     enterprise  1     2026-03-01T12:00:00Z\n"+
		"default  paid        12    2026-03-01T12:00:00Z\n", out)

	out, _, err = runCmd(t, "", "--addr", srv.URL, "--api-key", adminKey, "tenants", "list", "--json")
	require.NoError(t, err)
	var list api.TenantList
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Equal(t, []api.TenantInfo{
		{ID: "acme", Tier: api.TierEnterprise, Created: t0, Keys: 1},
		{ID: "default", Tier: api.TierPaid, Created: t0, Keys: 12},
	}, list.Tenants)
}
