package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/model"
	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/tokenizer"
)

func TestModelInit(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		args     []string
		arch     string
		fileType string
		tied     bool
		template string
	}{
		"llama q8_0": {args: []string{"--type", "q8_0"}, arch: "llama", fileType: "Q8_0", template: llama3Template},
		"qwen2 tied": {args: []string{"--arch", "qwen2", "--kv-heads", "2", "--type", "q4_0", "--tied"}, arch: "qwen2",
			fileType: "Q4_0", tied: true, template: chatMLTemplate},
		"spm f16":  {args: []string{"--tokenizer", "spm", "--type", "f16"}, arch: "llama", fileType: "F16"},
		"qwen3":    {args: []string{"--arch", "qwen3", "--head-dim", "32", "--type", "q8_0"}, arch: "qwen3", fileType: "Q8_0", template: chatMLTemplate},
		"qwen3moe": {args: []string{"--arch", "qwen3moe", "--experts", "4", "--experts-used", "2", "--expert-ffn", "64"}, arch: "qwen3moe", fileType: "F16", template: chatMLTemplate},
		"phi3":     {args: []string{"--arch", "phi3", "--rope-dims", "12", "--tokenizer", "spm"}, arch: "phi3", fileType: "F16"},
		"gemma3":   {args: []string{"--arch", "gemma3", "--sliding-window", "16", "--tied"}, arch: "gemma3", fileType: "F16", tied: true, template: llama3Template},
		"q4_k_m":   {args: []string{"--type", "q4_k_m", "--dim", "256", "--ffn", "512"}, arch: "llama", fileType: "Q4_K_M", template: llama3Template},
		"q3_k_m":   {args: []string{"--type", "Q3_K_M", "--dim", "256"}, arch: "llama", fileType: "Q3_K_M", template: llama3Template},
		"q5_k_m":   {args: []string{"--type", "q5_k_m"}, arch: "llama", fileType: "Q5_K_M", template: llama3Template},
		"iq4_xs":   {args: []string{"--type", "iq4_xs", "--dim", "256"}, arch: "llama", fileType: "IQ4_XS", template: llama3Template},
		"q2_k":     {args: []string{"--type", "q2_k"}, arch: "llama", fileType: "Q2_K", template: llama3Template},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name+".gguf")
			args := append([]string{"model", "init", "m", "-o", path, "--vocab", "1000"}, tc.args...)
			out, errOut, err := runCmd(t, "", args...)
			require.NoError(t, err, errOut)
			require.Contains(t, out, "wrote "+path)

			f, err := gguf.Open(path)
			require.NoError(t, err)
			defer f.Close()
			spec, err := model.SpecFromFile(f)
			require.NoError(t, err)
			require.Equal(t, tc.arch, spec.Arch)
			require.Equal(t, tc.fileType, spec.FileType)
			require.Equal(t, tc.tied, spec.TiedOutput)
			require.Equal(t, 1000, spec.Vocab)
			tmpl, _ := f.String("tokenizer.chat_template")
			require.Equal(t, tc.template, tmpl)

			tok, err := tokenizer.New(f)
			require.NoError(t, err)
			text := "The server answers 42 questions."
			require.Equal(t, text, tok.Decode(tok.Encode(text, true)))
		})
	}
}

func TestModelInitErrors(t *testing.T) {
	dir := t.TempDir()
	for name, args := range map[string][]string{
		"unknown type":      {"--type", "q9"},
		"unknown mixture":   {"--type", "q4_k_l"},
		"unknown arch":      {"--arch", "gpt-j"},
		"heads vs kv":       {"--heads", "4", "--kv-heads", "3"},
		"unknown tokenizer": {"--tokenizer", "wordpiece"},
		"too many used":     {"--arch", "qwen3moe", "--experts", "2", "--experts-used", "3"},
		"odd rope dims":     {"--rope-dims", "7"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := runCmd(t, "", append([]string{"model", "init", "m", "-o", filepath.Join(dir, "x.gguf")}, args...)...)
			require.Error(t, err)
		})
	}
	_, _, err := runCmd(t, "", "model", "init")
	require.Error(t, err)
}

// TestModelInitDefaultPlace: without --out the model goes into llmd's
// models directory under the user's data directory, and the path is
// printed.
func TestModelInitDefaultPlace(t *testing.T) {
	data := t.TempDir()
	t.Setenv("XDG_DATA_HOME", data)
	out, errOut, err := runCmd(t, "", "model", "init", "tiny", "--vocab", "1000")
	require.NoError(t, err, errOut)
	want := filepath.Join(data, "llmd", "models", "tiny.gguf")
	require.FileExists(t, want)
	require.Contains(t, out, "wrote "+want+":")
	require.Equal(t, "serve it with: llmd --model tiny\n", errOut)
}
