package store

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSecretsNotStored is audit SE-2: no file the store writes holds a
// key's secret, whole or past its ID, while the store is open (the WAL)
// or after it is closed.
func TestSecretsNotStored(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Open(t.Context(), dir)
	require.NoError(t, err)
	clk := &fakeClock{now: t0}
	s.now = clk.Now
	ctx := t.Context()

	var secrets []string
	for i := range 8 {
		secret, k, err := s.CreateKey(ctx, LocalTenant, i%2 == 0, "audit")
		require.NoError(t, err)
		secrets = append(secrets, secret)
		for range 3 {
			_, err := s.Authenticate(ctx, secret)
			require.NoError(t, err)
			clk.Add(time.Minute)
		}
		if i%4 == 3 {
			_, err := s.RevokeKey(ctx, k.ID)
			require.NoError(t, err)
		}
	}
	_, err = s.Keys(ctx) // waits for the uses to be written
	require.NoError(t, err)

	audit := func(when string, wantFiles ...string) {
		t.Helper()
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			require.NoError(t, err)
			for _, secret := range secrets {
				require.False(t, bytes.Contains(data, []byte(secret)), "%s: %s holds a secret", when, e.Name())
				require.False(t, bytes.Contains(data, []byte(secret[keyIDLen:])),
					"%s: %s holds a secret's tail", when, e.Name())
			}
		}
		for _, f := range wantFiles {
			assert.Contains(t, names, f, "%s: audited", when)
		}
	}
	audit("open", "llmd.db", "llmd.db-wal", "llmd.db-shm")
	require.NoError(t, s.Close())
	audit("closed", "llmd.db")
}
