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

// TestKeysCreateKeyStdin: "keys create --key-stdin" adds a key made in one
// data directory to another, where it then authenticates (one key for
// every node of a cluster); an empty stdin is a usage error.
func TestKeysCreateKeyStdin(t *testing.T) {
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	out, errOut, err := runCmd(t, "", "keys", "create", "--tenant", "acme", "--data-dir", a)
	require.NoError(t, err, errOut)
	key := strings.TrimSpace(out)
	out, errOut, err = runCmd(t, key+"\n", "keys", "create", "--tenant", "acme", "--data-dir", b, "--key-stdin")
	require.NoError(t, err, errOut)
	require.Equal(t, key, strings.TrimSpace(out))

	st, err := store.Open(context.Background(), b)
	require.NoError(t, err)
	defer st.Close()
	k, err := st.Authenticate(context.Background(), key)
	require.NoError(t, err)
	require.Equal(t, "acme", k.Tenant)

	_, _, err = runCmd(t, "", "keys", "create", "--data-dir", b, "--key-stdin")
	require.ErrorContains(t, err, "no key on stdin")
}
