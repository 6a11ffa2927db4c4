package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/store"
)

// TestKeysCreateOffline: "keys create --data-dir" writes a working key into
// the store of a data directory that need not exist yet, with no llmd.
func TestKeysCreateOfflineInStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	out, errOut, err := runCmd(t, "", "--addr", "127.0.0.1:1", "keys", "create", "--admin", "--tenant", "ops",
		"--data-dir", dir)
	require.NoError(t, err, errOut)
	key := strings.TrimSpace(out)
	require.True(t, strings.HasPrefix(key, "llmd-"), out)
	require.NotContains(t, errOut, key[12:], "the key is printed on stdout only")

	st, err := store.Open(context.Background(), dir)
	require.NoError(t, err)
	defer st.Close()
	k, err := st.Authenticate(context.Background(), key)
	require.NoError(t, err)
	require.Equal(t, "ops", k.Tenant)
	require.True(t, k.Admin)

	_, errOut, err = runCmd(t, "", "keys", "create", "--tier", "gold", "--data-dir", dir)
	require.Error(t, err)
	require.NotEmpty(t, errOut+err.Error())
}
