package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	modelfile "github.com/llmd/llmd/model"
	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/synth"
	"github.com/llmd/llmd/model/tokenizer"
)

const testChatML = `{% for message in messages %}{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}` +
	`{% endfor %}{% if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{% endif %}`

// writeTestGGUF writes a small llama model with a byte-level BPE vocabulary
// and a ChatML template to path.
func writeTestGGUF(t *testing.T, path string) {
	t.Helper()
	vocab, err := tokenizer.BuildVocab("bpe", 600)
	require.NoError(t, err)
	w, err := synth.Model{Arch: "llama", Name: "tiny", Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, FFN: 64,
		Vocab: 600, ContextLength: 512, Type: gguf.TypeQ8_0, Seed: 7}.Writer()
	require.NoError(t, err)
	for k, v := range vocab.Metadata() {
		require.NoError(t, w.Set(k, v))
	}
	w.SetString("tokenizer.chat_template", testChatML)
	require.NoError(t, w.WriteFile(path))
}

// startTestGGUF serves the model writeTestGGUF writes (id "tiny") and
// returns the daemon, the model's path and the server's address.
func startTestGGUF(t *testing.T) (s *Daemon, path, base string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "tiny.gguf")
	writeTestGGUF(t, path)
	cfg := testConfig()
	cfg.Models = nil
	cfg.ModelFiles = []string{path}
	s, err := Open(cfg, testLogger(t))
	require.NoError(t, err)
	return s, path, startServer(t, s)
}

func TestGGUFModelLoadsAndTokenizes(t *testing.T) {
	t.Parallel()
	s, path, base := startTestGGUF(t)
	c := testClient(t)

	resp, body := get(t, c, base+"/v1/models/tiny")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var m api.Model
	require.NoError(t, json.Unmarshal(body, &m))
	require.Equal(t, api.Model{ID: "tiny", Object: "model", Created: m.Created, OwnedBy: "llmd", MaxModelLen: 512,
		Architecture: "llama", ParameterCount: m.ParameterCount, Quantization: "Q8_0"}, m)
	require.Positive(t, m.ParameterCount)

	// A prompt gets the vocabulary's BOS once; chat messages are rendered
	// with the file's ChatML template, whose special tokens are single ids.
	f, err := gguf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	tok, err := tokenizer.New(f)
	require.NoError(t, err)
	bos, _ := tok.BOS()
	imStart, _ := tok.TokenID("<|im_start|>")

	resp, body = post(t, c, base+"/tokenize", `{"model":"tiny","prompt":"the server"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var tr api.TokenizeResponse
	require.NoError(t, json.Unmarshal(body, &tr))
	require.Equal(t, append([]int32{bos}, tok.Encode("the server", false)...), tr.Tokens)

	resp, body = post(t, c, base+"/tokenize", `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.NoError(t, json.Unmarshal(body, &tr))
	want := tok.Encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", true)
	require.Equal(t, want, tr.Tokens)
	require.Equal(t, imStart, tr.Tokens[1])

	req, err := json.Marshal(api.DetokenizeRequest{Model: "tiny", Tokens: tok.Encode("Hello, world!", false)})
	require.NoError(t, err)
	resp, body = post(t, c, base+"/detokenize", string(req))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.JSONEq(t, `{"prompt":"Hello, world!"}`, string(body))

	// The model generates with the CPU executor: the weights are random, so
	// the text is gibberish, but the token accounting is exact.
	resp, body = post(t, c, base+"/v1/chat/completions",
		`{"model":"tiny","max_tokens":12,"temperature":0,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var cc api.ChatCompletion
	require.NoError(t, json.Unmarshal(body, &cc))
	require.Equal(t, len(want), cc.Usage.PromptTokens)
	require.Positive(t, cc.Usage.CompletionTokens)
	require.LessOrEqual(t, cc.Usage.CompletionTokens, 12)

	// Greedy decoding is deterministic: the same request gives the same text,
	// and the second one reuses the cached prompt blocks.
	resp, body = post(t, c, base+"/v1/chat/completions",
		`{"model":"tiny","max_tokens":12,"temperature":0,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var again api.ChatCompletion
	require.NoError(t, json.Unmarshal(body, &again))
	require.Equal(t, cc.Choices[0].Message.Content, again.Choices[0].Message.Content)

	resp, body = get(t, c, base+"/v1/stats")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var st api.StatsResponse
	require.NoError(t, json.Unmarshal(body, &st))
	require.Len(t, st.Models, 1)
	require.Equal(t, "cpu", st.Models[0].Executor)
	require.Equal(t, uint64(2), st.Models[0].Completed)
	requireIdle(t, s)
}

// TestGGUFModelFromOllamaStore resolves ollama:NAME in an Ollama-style store
// made in a temporary directory.
func TestGGUFModelFromOllamaStore(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	src := filepath.Join(t.TempDir(), "m.gguf")
	writeTestGGUF(t, src)
	data, err := os.ReadFile(src)
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	digest := hex.EncodeToString(sum[:])
	require.NoError(t, os.MkdirAll(filepath.Join(root, "blobs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "blobs", "sha256-"+digest), data, 0o644))
	manifest := fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json",
		"config":{"mediaType":"application/vnd.docker.container.image.v1+json","digest":"sha256:%s","size":1},
		"layers":[{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:%s","size":%d}]}`, digest, digest, len(data))
	mdir := filepath.Join(root, "manifests", "registry.ollama.ai", "library", "tiny")
	require.NoError(t, os.MkdirAll(mdir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(mdir, "1b"), []byte(manifest), 0o644))

	cfg := testConfig()
	cfg.Models = []string{"small"} // simulated and GGUF models side by side
	cfg.Clock = nil
	cfg.ModelFiles = []string{"ollama:tiny:1b"}
	cfg.Resolve = modelfile.ResolveEnv{OllamaModels: root}
	s, err := Open(cfg, testLogger(t))
	require.NoError(t, err)
	require.Equal(t, []string{"sim/small", "tiny:1b"}, s.Models())
	base := startServer(t, s)
	resp, body := get(t, testClient(t), base+"/v1/models/tiny:1b")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))

	cfg.ModelFiles = []string{"ollama:missing"}
	_, err = Open(cfg, nil)
	require.ErrorIs(t, err, modelfile.ErrModelNotFound)
}

func TestGGUFModelRefusesBadFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.gguf")
	require.NoError(t, os.WriteFile(bad, []byte("GGUF\x03\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff"), 0o644))
	good := filepath.Join(dir, "good.gguf")
	writeTestGGUF(t, good)
	for name, files := range map[string][]string{
		"hostile file":    {bad},
		"missing file":    {filepath.Join(dir, "nope.gguf")},
		"duplicate names": {good, good},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Models = nil
			cfg.ModelFiles = files
			_, err := Open(cfg, nil)
			require.Error(t, err)
		})
	}
}

func TestGGUFLogprobs(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	writeTestGGUF(t, path)
	cfg := testConfig()
	cfg.Models = []string{"small"}
	cfg.Clock = nil
	cfg.ModelFiles = []string{path}
	s, err := Open(cfg, testLogger(t))
	require.NoError(t, err)
	base := startServer(t, s)
	c := testClient(t)

	// Non-streamed: one entry per output token, with its alternatives.
	resp, body := post(t, c, base+"/v1/chat/completions",
		`{"model":"tiny","max_tokens":5,"temperature":0,"logprobs":true,"top_logprobs":2,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var cc api.ChatCompletion
	require.NoError(t, json.Unmarshal(body, &cc))
	lps := cc.Choices[0].Logprobs
	require.NotNil(t, lps)
	require.Len(t, lps.Content, cc.Usage.CompletionTokens)
	for _, e := range lps.Content {
		require.LessOrEqual(t, e.Logprob, float32(0))
		require.Len(t, e.TopLogprobs, 2)
		require.Equal(t, e.Token, e.TopLogprobs[0].Token, "greedy: the chosen token is the most likely")
		if b := intsToBytes(e.Bytes); utf8.Valid(b) {
			require.Equal(t, e.Token, string(b)) // a byte token's text is not UTF-8; its bytes say what it is
		}
	}

	// Streamed: the entries arrive with the chunks; together they cover
	// every output token.
	resp, body = post(t, c, base+"/v1/chat/completions",
		`{"model":"tiny","max_tokens":5,"temperature":0,"logprobs":true,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	streamed, completion := 0, 0
	for _, ev := range parseSSE(t, body) {
		if ev.data == "" || ev.data == "[DONE]" {
			continue
		}
		var ch api.ChatCompletionChunk
		require.NoError(t, json.Unmarshal([]byte(ev.data), &ch))
		for _, choice := range ch.Choices {
			if choice.Logprobs != nil {
				streamed += len(choice.Logprobs.Content)
			}
		}
		if ch.Usage != nil {
			completion = ch.Usage.CompletionTokens
		}
	}
	require.Equal(t, completion, streamed)

	// Errors: simulated models have no probabilities; top_logprobs needs
	// logprobs and stays within 20.
	for body, param := range map[string]string{
		`{"model":"sim/small","logprobs":true,"messages":[{"role":"user","content":"hi"}]}`:              "logprobs",
		`{"model":"tiny","top_logprobs":2,"messages":[{"role":"user","content":"hi"}]}`:                  "top_logprobs",
		`{"model":"tiny","logprobs":true,"top_logprobs":21,"messages":[{"role":"user","content":"hi"}]}`: "top_logprobs",
	} {
		resp, out := post(t, c, base+"/v1/chat/completions", body)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(out))
		require.Equal(t, param, errorOf(t, out)["param"])
	}

	// /v1/completions: the legacy format, streamed and not, with offsets
	// into the generated text.
	resp, body = post(t, c, base+"/v1/completions",
		`{"model":"tiny","prompt":"hi","max_tokens":6,"temperature":0,"logprobs":3}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var cmpl api.Completion
	require.NoError(t, json.Unmarshal(body, &cmpl))
	legacy := cmpl.Choices[0].Logprobs
	require.NotNil(t, legacy)
	require.Len(t, legacy.Tokens, cmpl.Usage.CompletionTokens)
	require.Len(t, legacy.TokenLogprobs, len(legacy.Tokens))
	require.Len(t, legacy.TextOffset, len(legacy.Tokens))
	offset := 0
	for k, tok := range legacy.Tokens {
		require.Equal(t, offset, legacy.TextOffset[k])
		offset += len(tok)
		require.LessOrEqual(t, legacy.TokenLogprobs[k], 0.0)
		require.LessOrEqual(t, len(legacy.TopLogprobs[k]), 3)
		require.Contains(t, legacy.TopLogprobs[k], tok, "greedy: the chosen token is among the top")
	}
	resp, body = post(t, c, base+"/v1/completions",
		`{"model":"tiny","prompt":"hi","max_tokens":6,"temperature":0,"logprobs":0,"stream":true,"stream_options":{"include_usage":true}}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	streamed, completion = 0, 0
	for _, ev := range parseSSE(t, body) {
		if ev.data == "" || ev.data == "[DONE]" {
			continue
		}
		var ch api.Completion
		require.NoError(t, json.Unmarshal([]byte(ev.data), &ch))
		for _, choice := range ch.Choices {
			if choice.Logprobs != nil {
				streamed += len(choice.Logprobs.Tokens)
			}
		}
		if ch.Usage != nil {
			completion = ch.Usage.CompletionTokens
		}
	}
	require.Equal(t, completion, streamed)
	for body, want := range map[string]int{
		`{"model":"tiny","prompt":"hi","logprobs":6}`:      http.StatusBadRequest,
		`{"model":"sim/small","prompt":"hi","logprobs":1}`: http.StatusBadRequest,
	} {
		resp, out := post(t, c, base+"/v1/completions", body)
		require.Equal(t, want, resp.StatusCode, string(out))
		require.Equal(t, "logprobs", errorOf(t, out)["param"])
	}
	requireIdle(t, s)
}

func intsToBytes(v []int) []byte {
	b := make([]byte, len(v))
	for i, x := range v {
		b[i] = byte(x)
	}
	return b
}
