package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	"github.com/llmd/llmd/model"
	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/synth"
	"github.com/llmd/llmd/model/tokenizer"
)

// Chat templates written into models made by "llmctl model init": the
// Llama 3 and ChatML formats, as Jinja like the GGUF files of those
// families carry them.
const (
	llama3Template = `{{- bos_token }}{% for message in messages %}` +
		`{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}` +
		`{% endfor %}{% if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}`
	chatMLTemplate = `{% for message in messages %}` +
		`{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}` +
		`{% endfor %}{% if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{% endif %}`
)

// initOptions are the flags of "llmctl model init".
type initOptions struct {
	arch, typ, vocabKind, out   string
	dim, layers, heads, kvHeads int
	ffn, vocab, context         int
	headDim, ropeDims           int
	experts, expertsUsed        int
	expertFFN                   int
	window, windowPattern       int
	tied                        bool
	seed                        uint64
	pooling                     string
	matryoshka                  bool
}

// newModelCmd builds "llmctl model".
func newModelCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "model",
		Short: "Make and inspect model files",
		Args:  usageArgs(unknownCommand),
		RunE:  func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newModelInitCmd())
	return cmd
}

func newModelInitCmd() *cobra.Command {
	o := &initOptions{}
	cmd := &cobra.Command{
		Use:   "init NAME",
		Short: "Write a GGUF model of a given shape with random weights and a built-in tokenizer",
		Long: "llmctl model init writes NAME.gguf into llmd's models directory (models/ in the user's data\n" +
			"directory, where \"llmd --model NAME\" finds it; --out names another file), and prints the path.\n" +
			"It is a model of the given shape and architecture (llama,\n" +
			"qwen2, qwen3, qwen3moe, phi3 or gemma3, or the embedding models bert and nomic-bert), with random\n" +
			"weights drawn from --seed, a small real tokenizer learned from built-in text (byte-level BPE or\n" +
			"SentencePiece) and a chat template. The weights are random, so the model's text is gibberish:\n" +
			"it is for tests and benchmarks, made here with no download.",
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, spec, err := o.write(args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %s, %d layers, dim %d, %d heads (%d KV), vocab %d, %s, %d parameters\n",
				path, spec.Arch, spec.Layers, spec.Dim, spec.Heads, spec.KVHeads, spec.Vocab, spec.FileType, spec.ParamCount)
			serve := path
			if o.out == "" {
				serve = modelName(args[0])
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "serve it with: llmd --model %s\n", serve)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.arch, "arch", "llama", "architecture: "+strings.Join(synth.Architectures, ", "))
	f.IntVar(&o.dim, "dim", 64, "embedding width")
	f.IntVar(&o.layers, "layers", 2, "transformer blocks")
	f.IntVar(&o.heads, "heads", 4, "attention heads")
	f.IntVar(&o.kvHeads, "kv-heads", 0, "key/value heads (default: --heads)")
	f.IntVar(&o.ffn, "ffn", 192, "feed-forward width")
	f.IntVar(&o.vocab, "vocab", 2048, "vocabulary size")
	f.IntVar(&o.context, "context", 2048, "context length in tokens")
	f.StringVar(&o.typ, "type", "f16", "weight type: f32, f16, bf16, q8_0, q5_0, q4_0, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs,\n"+
		"or a llama-quantize mixture: q3_k_m, q4_k_m, q5_k_m")
	f.StringVar(&o.vocabKind, "tokenizer", "bpe", "tokenizer: bpe (byte-level BPE) or spm (SentencePiece); bert and nomic-bert always use wordpiece")
	f.IntVar(&o.headDim, "head-dim", 0, "per-head key/value width (default: dim/heads)")
	f.IntVar(&o.ropeDims, "rope-dims", 0, "rotated dimensions per head (default: the head width; fewer for partial rotary)")
	f.IntVar(&o.experts, "experts", 8, "qwen3moe: feed-forward experts per layer")
	f.IntVar(&o.expertsUsed, "experts-used", 2, "qwen3moe: experts each token goes to")
	f.IntVar(&o.expertFFN, "expert-ffn", 0, "qwen3moe: each expert's feed-forward width (default: --ffn)")
	f.IntVar(&o.window, "sliding-window", 0, "gemma3: positions a sliding-window layer sees (default 512; -1: no sliding-window layers)")
	f.IntVar(&o.windowPattern, "sliding-pattern", 0, "gemma3: every Nth layer is global (default 6)")
	f.BoolVar(&o.tied, "tied", false, "no output matrix: the logits reuse the token embedding")
	f.StringVar(&o.pooling, "pooling", "mean", "bert, nomic-bert: how token states become the embedding: mean, cls or last")
	f.BoolVar(&o.matryoshka, "matryoshka", false, "bert, nomic-bert: mark the model as Matryoshka-trained (requests may ask for fewer dimensions)")
	f.Uint64Var(&o.seed, "seed", 1, "seed of the random weights")
	f.StringVarP(&o.out, "out", "o", "", "output file (default: NAME.gguf in llmd's models directory, "+
		"$XDG_DATA_HOME/llmd/models or ~/.local/share/llmd/models)")
	return cmd
}

// write builds the model and writes it; it returns the path and the spec
// read back from the written file.
func (o *initOptions) write(name string) (string, model.Spec, error) {
	typ, mix, err := synth.ParseType(o.typ)
	if err != nil {
		return "", model.Spec{}, err
	}
	encoder := o.arch == "bert" || o.arch == "nomic-bert"
	switch {
	case encoder:
		// Embedding models: a WordPiece vocabulary, no chat template.
		o.vocabKind = "wordpiece"
	case o.vocabKind != "bpe" && o.vocabKind != "spm":
		return "", model.Spec{}, fmt.Errorf("unknown tokenizer %q for %s (want bpe or spm)", o.vocabKind, o.arch)
	}
	vocab, err := tokenizer.BuildVocab(o.vocabKind, o.vocab)
	if err != nil {
		return "", model.Spec{}, err
	}
	template := ""
	if o.vocabKind == "bpe" {
		template = llama3Template
		if strings.HasPrefix(o.arch, "qwen") {
			// Qwen's conventions: ChatML, no BOS, <|im_end|> ends an answer.
			template, vocab.Pre, vocab.AddBOS = chatMLTemplate, "qwen2", false
			for i, tok := range vocab.Tokens {
				if tok == "<|im_end|>" {
					vocab.EOS = int32(i)
				}
			}
		}
	}
	m := synth.Model{
		Arch: o.arch, Name: name, Dim: o.dim, Layers: o.layers, Heads: o.heads, KVHeads: o.kvHeads, FFN: o.ffn,
		Vocab: o.vocab, ContextLength: o.context, Type: typ, Mix: mix, Tied: o.tied, Seed: o.seed,
		HeadDim: o.headDim, RopeDims: o.ropeDims,
	}
	if o.arch == "qwen3moe" {
		m.Experts, m.ExpertsUsed, m.ExpertFFN = o.experts, o.expertsUsed, o.expertFFN
	}
	if o.arch == "gemma3" {
		m.SlidingWindow, m.SlidingPattern = o.window, o.windowPattern
	}
	if encoder {
		m.Pooling, m.Matryoshka = o.pooling, o.matryoshka
	}
	w, err := m.Writer()
	if err != nil {
		return "", model.Spec{}, err
	}
	for k, v := range vocab.Metadata() {
		if err := w.Set(k, v); err != nil {
			return "", model.Spec{}, err
		}
	}
	if template != "" {
		w.SetString("tokenizer.chat_template", template)
	}
	path := o.out
	if path == "" {
		dir, err := modelsDir()
		if err != nil {
			return "", model.Spec{}, err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", model.Spec{}, fmt.Errorf("create the models directory: %w", err)
		}
		path = filepath.Join(dir, modelName(name)+".gguf")
	}
	if err := w.WriteFile(path); err != nil {
		return "", model.Spec{}, err
	}
	// Read it back: what we wrote must load.
	f, err := gguf.Open(path)
	if err != nil {
		return "", model.Spec{}, fmt.Errorf("read back %s: %w", path, err)
	}
	defer f.Close()
	spec, err := model.SpecFromFile(f)
	if err != nil {
		return "", model.Spec{}, fmt.Errorf("read back %s: %w", path, err)
	}
	if _, err := tokenizer.New(f); err != nil {
		return "", model.Spec{}, fmt.Errorf("read back %s: %w", path, err)
	}
	return path, spec, nil
}

// modelName is the file name, less .gguf, that "model init NAME" writes.
func modelName(name string) string {
	return filepath.Base(strings.TrimSuffix(name, ".gguf"))
}

// modelsDir is llmd's models directory: models/ in llmd's default data
// directory ($XDG_DATA_HOME/llmd, else ~/.local/share/llmd on Unix, else
// the platform's user configuration directory), where "llmd --model NAME"
// looks for NAME.gguf.
func modelsDir() (string, error) {
	if x := os.Getenv("XDG_DATA_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "llmd", "models"), nil
	}
	var (
		base string
		err  error
	)
	if runtime.GOOS != "darwin" && runtime.GOOS != "windows" {
		base, err = os.UserHomeDir()
		base = filepath.Join(base, ".local", "share")
	} else {
		base, err = os.UserConfigDir()
	}
	if err != nil {
		return "", fmt.Errorf("find the models directory: %w; pass --out", err)
	}
	return filepath.Join(base, "llmd", "models"), nil
}
