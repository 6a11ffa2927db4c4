package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/internal/clicfg"
)

// isolateConfig gives the test a configuration directory of its own and
// returns the credentials file in it.
func isolateConfig(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv(configDirEnv, dir)
	return filepath.Join(dir, clicfg.FileName)
}

// TestLoginLogout: a key saved by "llmctl login" is used by every later
// command against that address, explicit keys win over it, and "llmctl
// logout" forgets it.
func TestLoginLogout(t *testing.T) {
	path := isolateConfig(t)
	srv := newFakeAdmin(t, &fakeAdmin{})

	// Without a key: a 401 that says how to get one.
	_, errOut, err := runCmd(t, "", "--addr", srv.URL, "keys", "list")
	require.Error(t, err)
	require.Equal(t, `llmctl: llmd at `+srv.URL+` needs an API key: save one with "llmctl login" (or pass --api-key, set LLMD_API_KEY)`+"\n",
		stderrOf(t, err, errOut))

	// A key llmd refuses is not saved.
	_, errOut, err = runCmd(t, "wrong-key\n", "--addr", srv.URL, "login")
	require.Error(t, err)
	require.Contains(t, stderrOf(t, err, errOut), "llmd refused the API key")
	requireNoKey(t, errOut)
	_, err = os.Stat(path)
	require.ErrorIs(t, err, os.ErrNotExist)

	// A good key is checked and saved, 0600.
	_, errOut, err = runCmd(t, adminKey+"\n", "--addr", srv.URL, "login")
	require.NoError(t, err)
	require.Contains(t, errOut, "saved the admin key llmd-ADMIN00 as llmctl's key for "+srv.URL)
	requireNoKey(t, errOut)
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	// Later commands use it.
	out, _, err := runCmd(t, "", "--addr", srv.URL, "keys", "list")
	require.NoError(t, err)
	require.Contains(t, out, "llmd-USER0001")
	// ... but not against another address.
	other := newFakeAdmin(t, &fakeAdmin{})
	_, _, err = runCmd(t, "", "--addr", other.URL, "keys", "list")
	require.Error(t, err)

	// An explicit key wins: the user key is refused on an admin route.
	_, errOut, err = runCmd(t, "", "--addr", srv.URL, "--api-key", userKey, "keys", "list")
	require.Error(t, err)
	require.Contains(t, stderrOf(t, err, errOut), "needs an admin API key")
	t.Setenv("LLMD_API_KEY", userKey)
	_, _, err = runCmd(t, "", "--addr", srv.URL, "keys", "list")
	require.Error(t, err, "$LLMD_API_KEY wins over the saved key")
	t.Setenv("LLMD_API_KEY", "")

	// config shows the file and the key id, never the key; config token
	// prints the key for scripts.
	out, _, err = runCmd(t, "", "--addr", srv.URL, "config")
	require.NoError(t, err)
	require.Contains(t, out, "saved keys: "+path)
	require.Contains(t, out, "key for "+srv.URL+": llmd-ADMIN00, saved")
	requireNoKey(t, out)
	out, _, err = runCmd(t, "", "--addr", srv.URL, "config", "--json")
	require.NoError(t, err)
	var v configView
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Equal(t, keyFromSaved, v.KeySource)
	require.Len(t, v.Saved, 1)
	require.True(t, v.Saved[0].Admin)
	out, _, err = runCmd(t, "", "--addr", srv.URL, "config", "token")
	require.NoError(t, err)
	require.Equal(t, adminKey+"\n", out)

	// logout forgets it.
	_, errOut, err = runCmd(t, "", "--addr", srv.URL, "logout")
	require.NoError(t, err)
	require.Equal(t, "forgot the key saved for "+srv.URL+"\n", errOut)
	_, _, err = runCmd(t, "", "--addr", srv.URL, "keys", "list")
	require.Error(t, err)
	out, errOut, err = runCmd(t, "", "--addr", srv.URL, "config", "token")
	require.NoError(t, err)
	require.Empty(t, out)
	require.Contains(t, errOut, "no API key for "+srv.URL)
}

// TestLoginRefusedSavedKey: a saved key llmd no longer accepts gets a
// message that names where it came from, not the key.
func TestLoginRefusedSavedKey(t *testing.T) {
	path := isolateConfig(t)
	srv := newFakeAdmin(t, &fakeAdmin{})
	f := &clicfg.File{}
	require.NoError(t, f.Set(srv.URL, clicfg.Entry{APIKey: "llmd-REVOKED.s3cr3t", KeyID: "llmd-REVOKED"}))
	require.NoError(t, f.Save(path))
	_, errOut, err := runCmd(t, "", "--addr", srv.URL, "keys", "list")
	require.Error(t, err)
	msg := stderrOf(t, err, errOut)
	require.Contains(t, msg, "llmd refused the key llmctl saved for "+srv.URL+" (llmd-REVOKED, saved)")
	require.Contains(t, msg, `"llmctl login"`)
	requireNoKey(t, msg)
}

// TestKeysCreateSaves: the first admin key made without a key is saved
// for llmctl; --no-save, user keys and keys made with a key in use are not,
// and --save saves any.
func TestKeysCreateSaves(t *testing.T) {
	tests := map[string]struct {
		args      []string
		bootstrap bool
		wantSaved bool
	}{
		"first admin key":            {args: []string{"keys", "create", "--admin"}, bootstrap: true, wantSaved: true},
		"first admin key, --no-save": {args: []string{"keys", "create", "--admin", "--no-save"}, bootstrap: true},
		"user key":                   {args: []string{"--api-key", adminKey, "keys", "create", "--tenant", "acme"}},
		"admin key with a key":       {args: []string{"--api-key", adminKey, "keys", "create", "--admin"}},
		"user key, --save":           {args: []string{"--api-key", adminKey, "keys", "create", "--save"}, wantSaved: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			path := isolateConfig(t)
			srv := newFakeAdmin(t, &fakeAdmin{bootstrap: tc.bootstrap})
			out, errOut, err := runCmd(t, "", append([]string{"--addr", srv.URL}, tc.args...)...)
			require.NoError(t, err)
			require.Equal(t, newKey+"\n", out, "the key alone on stdout")
			f, err := clicfg.Load(path)
			require.NoError(t, err)
			e, ok := f.Get(srv.URL)
			require.Equal(t, tc.wantSaved, ok)
			if tc.wantSaved {
				require.Equal(t, newKey, e.APIKey)
				require.Contains(t, errOut, "as llmctl's key for "+srv.URL)
			}
		})
	}
	t.Run("contradiction", func(t *testing.T) {
		isolateConfig(t)
		srv := newFakeAdmin(t, &fakeAdmin{bootstrap: true})
		_, _, err := runCmd(t, "", "--addr", srv.URL, "keys", "create", "--save", "--no-save")
		require.Error(t, err)
	})
}

// stderrOf is what llmctl would print for err after errOut.
func stderrOf(t *testing.T, err error, errOut string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(errOut)
	exitStatus(err, &b)
	return b.String()
}

// notAdminMsg is what llmctl prints when the --api-key userKey is used on
// an admin route.
const notAdminMsg = "llmctl: this command needs an admin API key; the key in use (llmd-USER000, from --api-key) is not one: " +
	"run \"llmctl login\" with an admin key, or pass one with --api-key or LLMD_API_KEY\n"

// noKeyMsg is what llmctl prints when llmd at base wants a key and llmctl
// has none.
func noKeyMsg(base string) string {
	return "llmctl: llmd at " + base + " needs an API key: save one with \"llmctl login\" (or pass --api-key, set LLMD_API_KEY)\n"
}
