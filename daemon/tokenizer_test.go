package daemon

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	modelfile "github.com/llmd/llmd/model"
	"github.com/llmd/llmd/pipeline"
)

// writeHFTokenizer writes a small byte-level BPE tokenizer in Hugging
// Face's layout into dir: the 256 byte symbols, merges of "h i" and
// "hi !", ChatML-like control tokens and a template.
func writeHFTokenizer(t *testing.T, dir string) {
	t.Helper()
	vocab := map[string]int{}
	n := 0
	for b := range 256 {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xa1 && b <= 0xac || b >= 0xae) {
			r = rune(256 + n)
			n++
		}
		vocab[string(r)] = b
	}
	vocab["hi"], vocab["hi!"] = 256, 257
	tj, err := json.Marshal(map[string]any{
		"added_tokens": []any{
			map[string]any{"id": 258, "content": "<|im_start|>", "special": true},
			map[string]any{"id": 259, "content": "<|im_end|>", "special": true},
		},
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": [][2]string{{"h", "i"}, {"hi", "!"}}},
	})
	require.NoError(t, err)
	cj, err := json.Marshal(map[string]any{"eos_token": "<|im_end|>",
		"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}" +
			"{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"})
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), tj, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), cj, 0o600))
}

// TestLoadTokenizer: a Hugging Face directory, the same found by hub name
// in the local hub cache, and the errors for what is not there.
func TestLoadTokenizer(t *testing.T) {
	hub := t.TempDir()
	t.Setenv("HF_HUB_CACHE", hub)
	repo := filepath.Join(hub, "models--acme--tiny-chat")
	writeHFTokenizer(t, filepath.Join(repo, "snapshots", "0123abcd"))
	require.NoError(t, os.MkdirAll(filepath.Join(repo, "refs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(repo, "refs", "main"), []byte("0123abcd\n"), 0o600))

	for _, path := range []string{filepath.Join(repo, "snapshots", "0123abcd"), "acme/tiny-chat"} {
		text, from, err := loadTokenizer(path, modelfile.ResolveEnv{})
		require.NoError(t, err, path)
		require.Equal(t, filepath.Join(repo, "snapshots", "0123abcd"), from)
		// GPT-2's split keeps "!" apart from "hi", so "hi !" never merges.
		require.Equal(t, []int32{256, '!'}, text.Prompt("hi!", false))
		ids, err := text.ChatPrompt(pipeline.ChatInput{AddGenerationPrompt: true,
			Messages: []api.Message{{Role: "user", Content: "hi!"}}})
		require.NoError(t, err)
		// <|im_start|> u s e r \n hi! <|im_end|> \n <|im_start|> a s s i s t a n t \n
		require.Equal(t, []int32{258, 'u', 's', 'e', 'r', '\n', 256, '!', 259, '\n', 258}, ids[:11])
		require.Len(t, ids, 11+len("assistant")+1)
	}
	for _, bad := range []string{"acme/missing", "/no/such/file.gguf", "../x", "ollama:"} {
		_, _, err := loadTokenizer(bad, modelfile.ResolveEnv{Home: t.TempDir()})
		require.Error(t, err, bad)
	}
}
