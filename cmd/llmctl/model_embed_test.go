package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine/cpu"
	"github.com/llmd/llmd/model"
	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/tokenizer"
)

// TestModelInitEmbedding writes bert and nomic-bert models: a WordPiece
// tokenizer, no chat template, the pooling asked for, and files an
// Embedder loads.
func TestModelInitEmbedding(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		args       []string
		arch       string
		pooling    model.Pooling
		matryoshka bool
	}{
		"bert cls":         {[]string{"--arch", "bert", "--pooling", "cls", "--context", "64"}, "bert", model.PoolingCLS, false},
		"nomic matryoshka": {[]string{"--arch", "nomic-bert", "--matryoshka", "--type", "q8_0"}, "nomic-bert", model.PoolingMean, true},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, tc.arch+".gguf")
			args := append([]string{"model", "init", "e", "-o", path, "--vocab", "1000"}, tc.args...)
			out, errOut, err := runCmd(t, "", args...)
			require.NoError(t, err, errOut)
			require.Contains(t, out, "wrote "+path)
			f, err := gguf.Open(path)
			require.NoError(t, err)
			defer f.Close()
			spec, err := model.SpecFromFile(f)
			require.NoError(t, err)
			require.Equal(t, tc.arch, spec.Arch)
			require.Equal(t, tc.pooling, spec.Pooling)
			require.Equal(t, tc.matryoshka, spec.Matryoshka)
			_, ok := f.String("tokenizer.chat_template")
			require.False(t, ok)
			tok, err := tokenizer.New(f)
			require.NoError(t, err)
			require.Equal(t, "bert", tok.Model())
			e, err := cpu.NewEmbedder(f, cpu.EmbedConfig{Threads: 1})
			require.NoError(t, err)
			defer e.Close()
			v, err := e.Embed(t.Context(), [][]int32{tok.Encode("The server answers questions.", true)})
			require.NoError(t, err)
			require.Len(t, v[0], spec.Dim)
		})
	}
	_, _, err := runCmd(t, "", "model", "init", "e", "-o", filepath.Join(dir, "x.gguf"), "--arch", "bert", "--pooling", "max")
	require.ErrorContains(t, err, "pooling")
}
