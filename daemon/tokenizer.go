package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	modelfile "github.com/llmd/llmd/model"
	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/tokenizer"
)

// A model's tokenizer and chat template read on this node, for a model an
// upstream engine serves: llmd counts its prompts for the quota without a
// round trip to the engine, and for engines that have no /tokenize.

// loadTokenizer reads the tokenizer and chat template at path: a GGUF file
// (its metadata; the weights are not read), a Hugging Face model directory
// (tokenizer.json, tokenizer_config.json), a Hugging Face hub name
// ("Qwen/Qwen3-8B") found in the local hub cache where vLLM and SGLang
// download to, or "ollama:NAME" in the Ollama store. It returns where it
// read it from.
func loadTokenizer(path string, env modelfile.ResolveEnv) (ggufText, string, error) {
	if strings.HasPrefix(path, "ollama:") {
		refs, err := modelfile.Resolve(path, env)
		if err != nil {
			return ggufText{}, "", err
		}
		path = refs[0].Path
	}
	st, err := os.Stat(path)
	if err != nil {
		dir, ok := hfCacheDir(path, env)
		if !ok {
			return ggufText{}, "", fmt.Errorf("tokenizer %s: %w", path, err)
		}
		path = dir
		if st, err = os.Stat(path); err != nil {
			return ggufText{}, "", err
		}
	}
	if st.IsDir() {
		tok, cfg, err := tokenizer.NewFromHFDir(path)
		if err != nil {
			return ggufText{}, "", err
		}
		text, err := newGGUFText(tok, cfg.ChatTemplate)
		return text, path, err
	}
	f, err := gguf.Open(path)
	if err != nil {
		return ggufText{}, "", err
	}
	defer f.Close()
	tok, err := tokenizer.New(f)
	if err != nil {
		return ggufText{}, "", fmt.Errorf("%s: %w", path, err)
	}
	src, _ := f.String("tokenizer.chat_template")
	text, err := newGGUFText(tok, src)
	return text, path, err
}

// hfCacheDir finds a hub name's newest snapshot in the Hugging Face cache
// ($HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub):
// models--ORG--NAME/snapshots/<the revision refs/main names>.
func hfCacheDir(name string, env modelfile.ResolveEnv) (string, bool) {
	org, model, ok := strings.Cut(name, "/")
	if !ok || org == "" || model == "" || strings.ContainsAny(model, "/\\") || strings.HasPrefix(name, ".") {
		return "", false
	}
	hub := os.Getenv("HF_HUB_CACHE")
	if hub == "" {
		if home := os.Getenv("HF_HOME"); home != "" {
			hub = filepath.Join(home, "hub")
		} else if env.Home != "" {
			hub = filepath.Join(env.Home, ".cache", "huggingface", "hub")
		} else {
			return "", false
		}
	}
	repo := filepath.Join(hub, "models--"+org+"--"+model)
	ref, err := os.ReadFile(filepath.Join(repo, "refs", "main"))
	if err != nil {
		return "", false
	}
	rev := strings.TrimSpace(string(ref))
	if rev == "" || strings.ContainsAny(rev, "/\\.") {
		return "", false
	}
	return filepath.Join(repo, "snapshots", rev), true
}
