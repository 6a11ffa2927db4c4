package daemon

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/engine/cpu"
	"github.com/llmd/llmd/model/gguf"
)

// TestGGUFF16MatMulBF16 serves an F16 model with CPUF16MatMul "bf16"
// through HTTP: the load log says so, and the model generates the same
// greedy text twice, the second time from its cached prompt blocks (the
// bfloat16 kernels are batch-invariant). On a CPU without AVX512_BF16 the
// setting is refused, saying why. An unknown value is always refused.
func TestGGUFF16MatMulBF16(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.CPUF16MatMul = "fp8"
	require.ErrorContains(t, cfg.Validate(), "f16 matmul")

	cfg.CPUF16MatMul = "bf16"
	if !cpu.HasBF16MatMul() {
		require.ErrorContains(t, cfg.Validate(), "AVX512_BF16")
		t.Skip("no AVX512_BF16 on this CPU: checked that bf16 is refused")
	}
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	writeTestGGUFOf(t, path, 32, gguf.TypeF16)
	cfg.Models = nil
	cfg.ModelFiles = []string{path}
	var logs syncBuffer
	s, err := Open(cfg, newBufferLogger(&logs))
	require.NoError(t, err)
	base := startServer(t, s)
	c := testClient(t)
	require.Contains(t, logs.String(), `"f16_matmul":"bf16"`)
	const req = `{"model":"tiny","max_tokens":16,"temperature":0,"messages":[{"role":"user","content":"the quick brown fox"}]}`
	var texts []string
	for range 2 {
		resp, body := post(t, c, base+"/v1/chat/completions", req)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		var cc api.ChatCompletion
		require.NoError(t, json.Unmarshal(body, &cc))
		require.Positive(t, cc.Usage.CompletionTokens)
		texts = append(texts, cc.Choices[0].Message.Content)
	}
	require.Equal(t, texts[0], texts[1], "greedy text from the cached prompt blocks")
	requireIdle(t, s)
}
