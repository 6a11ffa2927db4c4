package model

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestResolveFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "Llama-3.2-1B.Q4_K_M.gguf")
	require.NoError(t, os.WriteFile(file, []byte("GGUF"), 0o644))
	noExt := filepath.Join(dir, "weights")
	require.NoError(t, os.WriteFile(noExt, []byte("GGUF"), 0o644))

	tests := map[string]struct {
		spec string
		want ModelRef
	}{
		"absolute path": {file, ModelRef{Name: "Llama-3.2-1B.Q4_K_M", Path: file, Source: RefSourceFile}},
		"no extension":  {noExt, ModelRef{Name: "weights", Path: noExt, Source: RefSourceFile}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			refs, err := Resolve(tc.spec, ResolveEnv{})
			require.NoError(t, err)
			require.Equal(t, []ModelRef{tc.want}, refs)
		})
	}

	t.Run("relative path becomes absolute", func(t *testing.T) {
		t.Parallel()
		wd, err := os.Getwd()
		require.NoError(t, err)
		rel, err := filepath.Rel(wd, file)
		require.NoError(t, err)
		refs, err := Resolve(rel, ResolveEnv{})
		require.NoError(t, err)
		require.Equal(t, file, refs[0].Path)
	})

	t.Run("directory", func(t *testing.T) {
		t.Parallel()
		refs, err := Resolve(dir, ResolveEnv{})
		require.NoError(t, err)
		require.Equal(t, []ModelRef{{Name: "Llama-3.2-1B.Q4_K_M", Path: file, Source: RefSourceDir}}, refs)
	})
}

func TestResolveFileErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := map[string]struct {
		spec    string
		is      error
		message string
	}{
		"missing file": {filepath.Join(dir, "nope.gguf"), ErrModelNotFound,
			`model "` + filepath.Join(dir, "nope.gguf") + `" not found: no such file`},
		"missing file that looks like an Ollama name": {"llama3.2:1b", ErrModelNotFound,
			`model "llama3.2:1b" not found: no such file; for a model in the Ollama store, pass "ollama:llama3.2:1b"`},
		"empty": {"", ErrInvalidModelRef, `model "" is empty: pass a GGUF file, a directory or ollama:NAME`},
	}
	if runtime.GOOS == "linux" {
		tests["not a regular file"] = struct {
			spec    string
			is      error
			message string
		}{"/dev/null", ErrInvalidModelRef, `model "/dev/null" is not a regular file`}
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			refs, err := Resolve(tc.spec, ResolveEnv{})
			require.Nil(t, refs)
			require.ErrorIs(t, err, tc.is)
			require.EqualError(t, err, tc.message)
		})
	}
}

func TestResolveDir(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dir := filepath.Join(base, "models")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	write := func(path string) {
		require.NoError(t, os.WriteFile(path, []byte("GGUF"), 0o644))
	}
	write(filepath.Join(dir, "b.gguf"))
	write(filepath.Join(dir, "A.GGUF"))
	write(filepath.Join(dir, "notes.txt"))
	write(filepath.Join(dir, "sub", "nested.gguf"))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "dir.gguf"), 0o755))
	// Symbolic links: inside the directory (kept), out of it (skipped),
	// and dangling (skipped).
	require.NoError(t, os.Symlink("b.gguf", filepath.Join(dir, "c-link.gguf")))
	outside := filepath.Join(base, "outside.gguf")
	write(outside)
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "d-out.gguf")))
	require.NoError(t, os.Symlink("../outside.gguf", filepath.Join(dir, "e-out-rel.gguf")))
	require.NoError(t, os.Symlink("missing.gguf", filepath.Join(dir, "f-dangling.gguf")))

	refs, err := ResolveDir(dir)
	require.NoError(t, err)
	require.Equal(t, []ModelRef{
		{Name: "A", Path: filepath.Join(dir, "A.GGUF"), Source: RefSourceDir},
		{Name: "b", Path: filepath.Join(dir, "b.gguf"), Source: RefSourceDir},
		{Name: "c-link", Path: filepath.Join(dir, "c-link.gguf"), Source: RefSourceDir},
	}, refs)

	empty := filepath.Join(base, "empty")
	require.NoError(t, os.MkdirAll(empty, 0o755))
	_, err = ResolveDir(empty)
	require.ErrorIs(t, err, ErrModelNotFound)
	require.EqualError(t, err, `model "`+empty+`" has no .gguf files`)

	_, err = ResolveDir(filepath.Join(base, "missing"))
	require.ErrorIs(t, err, ErrModelNotFound)
	require.ErrorContains(t, err, "no such directory")

	_, err = ResolveDir(filepath.Join(dir, "b.gguf"))
	require.ErrorIs(t, err, ErrInvalidModelRef)
}
