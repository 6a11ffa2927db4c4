package clicfg

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLoadMissingIsEmpty(t *testing.T) {
	t.Parallel()
	f, err := Load(filepath.Join(t.TempDir(), "nope", FileName))
	require.NoError(t, err)
	_, ok := f.Get("http://127.0.0.1:8700")
	require.False(t, ok)
	require.Empty(t, f.Addrs())
}

func TestSaveLoadRoundTrip(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "llmd", FileName)
	f := &File{}
	saved := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	require.NoError(t, f.Set("http://127.0.0.1:8700", Entry{APIKey: "llmd-abcdefgXYZ", KeyID: "llmd-abcdefg", Admin: true, Saved: saved}))
	require.NoError(t, f.Set("https://node-b:8700", Entry{APIKey: "other", Saved: saved}))
	require.NoError(t, f.Save(path))

	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "only the owner may read the keys")
	dst, err := os.Stat(filepath.Dir(path))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), dst.Mode().Perm())

	g, err := Load(path)
	require.NoError(t, err)
	e, ok := g.Get("http://127.0.0.1:8700")
	require.True(t, ok)
	require.Equal(t, "llmd-abcdefgXYZ", e.APIKey)
	require.True(t, e.Admin)
	require.Equal(t, []string{"http://127.0.0.1:8700", "https://node-b:8700"}, g.Addrs())

	require.True(t, g.Delete("https://node-b:8700"))
	require.False(t, g.Delete("https://node-b:8700"))
	require.NoError(t, g.Save(path))
	h, err := Load(path)
	require.NoError(t, err)
	require.Equal(t, []string{"http://127.0.0.1:8700"}, h.Addrs())
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left behind")
}

func TestSaveTightensAnExistingFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), FileName)
	require.NoError(t, os.WriteFile(path, []byte(`{"hosts":{}}`), 0o644))
	f, err := Load(path)
	require.NoError(t, err)
	require.NoError(t, f.Set("http://h:1", Entry{APIKey: "k"}))
	require.NoError(t, f.Save(path))
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
}

func TestSetRefusesBadKeys(t *testing.T) {
	t.Parallel()
	for name, key := range map[string]string{"empty": "", "space": "a b", "newline": "abc\n", "non-ascii": "clé"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.ErrorIs(t, (&File{}).Set("http://h:1", Entry{APIKey: key}), ErrInvalidKey)
		})
	}
}

func TestLoadCorrupt(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), FileName)
	require.NoError(t, os.WriteFile(path, []byte("{not json"), 0o600))
	_, err := Load(path)
	require.ErrorContains(t, err, "log in again")
}

func TestEntryStringHidesKey(t *testing.T) {
	t.Parallel()
	require.Equal(t, "llmd-abcdefg", Entry{APIKey: "llmd-abcdefgSECRET", KeyID: "llmd-abcdefg"}.String())
	require.Equal(t, "(key)", Entry{APIKey: "SECRET"}.String())
}
