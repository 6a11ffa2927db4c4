package daemon

import (
	"cmp"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/cpu"
	"github.com/llmd/llmd/engine/grammar"
	modelfile "github.com/llmd/llmd/model"
	"github.com/llmd/llmd/model/chat"
	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/tokenizer"
	"github.com/llmd/llmd/model/toolcall"
	"github.com/llmd/llmd/pipeline"
)

// ggufText is the pipeline.TextModel of a GGUF model: its chat template and its
// tokenizer.
type ggufText struct {
	tok  *tokenizer.Tokenizer
	tmpl *chat.Template
	bos  string // the BOS token's text, "" when the vocabulary has none
	// tools is the template's tool-call format, renders whether it
	// renders tools itself.
	tools   toolcall.Format
	renders bool
	vocab   *lazyVocab
}

func (g ggufText) ChatPrompt(in pipeline.ChatInput) ([]int32, error) {
	cm := make([]chat.Message, len(in.Messages))
	for i, m := range in.Messages {
		role := m.Role
		if role == "developer" {
			role = "system"
		}
		cm[i] = chat.Message{Role: role, Content: string(m.Content), Name: m.Name, ToolCallID: m.ToolCallID}
		for _, tc := range m.ToolCalls {
			cm[i].ToolCalls = append(cm[i].ToolCalls, chat.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
	}
	res, err := g.tmpl.RenderRequest(chat.Request{Messages: cm, Tools: in.Tools, AddGenerationPrompt: in.AddGenerationPrompt,
		Kwargs: in.Kwargs})
	if err == nil && res.Source != chat.SourceGGUF && len(in.Tools) > 0 {
		// The built-in formats leave tools out: describe them in a system
		// message instead, so they are not lost.
		cm = withToolSystemPrompt(cm, toolcall.SystemPrompt(g.tools, in.Tools))
		res, err = g.tmpl.RenderRequest(chat.Request{Messages: cm, AddGenerationPrompt: in.AddGenerationPrompt, Kwargs: in.Kwargs})
	}
	if err != nil {
		return nil, pipeline.InvalidParam("messages", "%v", err)
	}
	prompt := res.Prompt
	// Templates that write bos_token themselves must not get a second one.
	addBOS := g.bos == "" || !strings.HasPrefix(prompt, g.bos)
	return g.tok.Encode(prompt, addBOS), nil
}

// withToolSystemPrompt adds text to the system message of msgs, or puts a
// system message of text first.
func withToolSystemPrompt(msgs []chat.Message, text string) []chat.Message {
	if len(msgs) > 0 && msgs[0].Role == "system" {
		out := slices.Clone(msgs)
		out[0].Content = strings.TrimRight(out[0].Content, "\n") + "\n\n" + text
		return out
	}
	return append([]chat.Message{{Role: "system", Content: text}}, msgs...)
}

func (g ggufText) Prompt(text string, addSpecial bool) []int32 { return g.tok.Encode(text, addSpecial) }
func (g ggufText) Decode(toks []int32) string                  { return g.tok.Decode(toks) }

// DecodeToken gives a generated token's text. Control and unused tokens
// (an end-of-turn marker the model emits, a reserved id) are not shown, as
// llama.cpp and vLLM leave special tokens out of generated text.
func (g ggufText) DecodeToken(t int32) string {
	switch g.tok.TokenType(t) {
	case tokenizer.TokenTypeControl, tokenizer.TokenTypeUnused:
		return ""
	}
	return g.tok.DecodeToken(t)
}
func (g ggufText) TokenText(t int32) string { return g.tok.DecodeToken(t) }
func (g ggufText) VocabSize() int           { return g.tok.VocabSize() }

func (g ggufText) Vocabulary() *grammar.Vocabulary { return g.vocab.get() }

func (g ggufText) ToolFormat() (toolcall.Format, bool) { return g.tools, g.renders }

// Reasoning implements pipeline.Reasoner: the chat template writes
// <think> sections.
func (g ggufText) Reasoning() bool { return g.tmpl != nil && g.tmpl.Reasoning() }

// loadGGUFModels resolves every --model and --models-dir value, opens each
// GGUF file (memory-mapped), prepares its tokenizer and chat template, and
// builds its CPU executor and engine. The returned closers release them
// (after the engines stop).
func loadGGUFModels(cfg Config, logger *slog.Logger) ([]func(), []*pipeline.Model, error) {
	specs := append([]string(nil), cfg.ModelFiles...)
	if cfg.ModelsDir != "" {
		specs = append(specs, cfg.ModelsDir)
	}
	var (
		closers []func()
		models  []*pipeline.Model
	)
	fail := func(err error) ([]func(), []*pipeline.Model, error) {
		for _, c := range closers {
			c()
		}
		return nil, nil, err
	}
	var refs []modelfile.ModelRef
	for _, spec := range specs {
		r, err := modelfile.Resolve(spec, cfg.Resolve)
		if err != nil {
			return fail(fmt.Errorf("daemon: %w", err))
		}
		refs = append(refs, r...)
	}
	for i, ref := range refs {
		if cfg.LoadProgress != nil {
			cfg.LoadProgress(i, len(refs), ref.Name)
		}
		start := time.Now()
		closer, m, err := loadGGUF(ref, ggufOptions{threads: cfg.CPUThreads, kvBytes: cfg.KVCacheBytes, kvType: cfg.KVCacheType, f16MatMul: cfg.CPUF16MatMul}, cfg, logger)
		if err != nil {
			return fail(fmt.Errorf("daemon: load %s (%s): %w", ref.Name, ref.Path, err))
		}
		closers = append(closers, closer)
		models = append(models, m)
		logger.Info("model loaded", "model", m.ID, "path", ref.Path, "source", ref.Source, "arch", m.Arch,
			"parameters", m.Params, "quantization", m.Quantization, "context_length", m.Limit,
			"template", m.Text.(ggufText).tmpl.Source(), "executor", "cpu", "kv_blocks", m.Info.NumBlocks, "kv_type", ggufKVType(cfg.KVCacheType),
			"f16_matmul", ggufF16MatMul(cfg.CPUF16MatMul), "max_seq_tokens", m.Limit, "load_ms", time.Since(start).Milliseconds())
	}
	if cfg.LoadProgress != nil && len(refs) > 0 {
		cfg.LoadProgress(len(refs), len(refs), "")
	}
	return closers, models, nil
}

// ggufKVType is the KV cache type a GGUF model's executor gets for the
// configured one (see Config.KVCacheType), in the executor's spelling.
func ggufKVType(configured string) string {
	return strings.ToLower(cmp.Or(configured, cpu.DefaultConfig().KVType))
}

// ggufF16MatMul is how a GGUF model's executor multiplies F16 and BF16
// weights for the configured Config.CPUF16MatMul.
func ggufF16MatMul(configured string) string { return cmp.Or(configured, cpu.F16MatMuls[0]) }

// ggufOptions are one GGUF model's executor settings: threads (0: one per
// core), KV cache bytes (0: the executor's default), KV cache type and F16
// matmul ("": the executor's defaults).
type ggufOptions struct {
	threads   int
	kvBytes   int64
	kvType    string
	f16MatMul string
}

// loadGGUF builds the CPU executor and engine of one GGUF file; the
// returned closer releases them (after the engine stops).
func loadGGUF(ref modelfile.ModelRef, opts ggufOptions, cfg Config, logger *slog.Logger) (func(), *pipeline.Model, error) {
	f, err := gguf.Open(ref.Path)
	if err != nil {
		return nil, nil, err
	}
	m, err := ggufModel(ref, f)
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	if spec, _ := modelfile.SpecFromFile(f); spec.Encoder {
		return loadGGUFEmbedder(ref, f, m, spec, opts)
	}
	cc := cpu.DefaultConfig()
	cc.Name = ref.Name
	cc.EOS = m.Text.(ggufText).tok.EndOfGeneration()
	if opts.threads > 0 {
		cc.Threads = opts.threads
	}
	if opts.kvBytes > 0 {
		cc.KVCacheBytes = opts.kvBytes
	}
	if opts.kvType != "" {
		cc.KVType = opts.kvType
	}
	cc.F16MatMul = opts.f16MatMul
	exec, err := cpu.New(f, cc)
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	ecfg, closeDraft, err := ggufSpeculation(cfg, f, cc)
	if err != nil {
		exec.Close()
		_ = f.Close()
		return nil, nil, err
	}
	if closeDraft == nil {
		closeDraft = func() {}
	}
	eng, err := engine.New(exec, engine.RealClock{}, ecfg, logger)
	if err != nil {
		closeDraft()
		exec.Close()
		_ = f.Close()
		return nil, nil, err
	}
	m.Replica = pipeline.EngineReplica{E: eng}
	m.Info = eng.Info()
	m.Run = eng.Run
	m.Limit = min(m.Limit, eng.MaxSeqTokens())
	m.Source = ref.Path
	if ref.Source == modelfile.RefSourceOllama {
		m.Source = "ollama:" + ref.Name
	}
	if st, err := os.Stat(ref.Path); err == nil {
		m.Memory = ggufMemory(st.Size(), cc.KVCacheBytes)
	}
	return func() { closeDraft(); exec.Close(); _ = f.Close() }, m, nil
}

// loadGGUFEmbedder builds an embedding model's embedder and batcher (no
// engine and no KV cache: see pipeline.EmbedBatcher) over the text side
// and details m holds; the closer releases them after the batcher stops.
func loadGGUFEmbedder(ref modelfile.ModelRef, f *gguf.File, m *pipeline.Model, spec modelfile.Spec, opts ggufOptions) (func(), *pipeline.Model, error) {
	emb, err := cpu.NewEmbedder(f, cpu.EmbedConfig{Threads: opts.threads})
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	em := pipeline.NewEmbedModel(ref.Name, m.Text, pipeline.NewEmbedBatcher(emb, emb.MaxBatchTokens(), 0), spec.ContextLength,
		pipeline.EmbedModel{Dim: spec.Dim, Pooling: spec.Pooling.String(), Matryoshka: spec.Matryoshka}, time.Unix(m.Created, 0))
	em.Arch, em.Params, em.Quantization, em.Template, em.Metadata = m.Arch, m.Params, m.Quantization, m.Template, m.Metadata
	em.Source = ref.Path
	if ref.Source == modelfile.RefSourceOllama {
		em.Source = "ollama:" + ref.Name
	}
	if st, err := os.Stat(ref.Path); err == nil {
		em.Memory = ggufMemory(st.Size(), 0)
	}
	return func() { emb.Close(); _ = f.Close() }, em, nil
}

func ggufModel(ref modelfile.ModelRef, f *gguf.File) (*pipeline.Model, error) {
	spec, err := modelfile.SpecFromFile(f)
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.New(f)
	if err != nil {
		return nil, err
	}
	src, _ := f.String("tokenizer.chat_template")
	text, err := newGGUFText(tok, src)
	if err != nil {
		return nil, err
	}
	m := &pipeline.Model{
		ID:           ref.Name,
		Text:         text,
		EOS:          map[int32]bool{},
		Limit:        spec.ContextLength,
		Executor:     pipeline.ExecutorCPU,
		Arch:         spec.Arch,
		Params:       spec.ParamCount,
		Quantization: spec.FileType,
		Created:      time.Now().Unix(),
	}
	for _, id := range tok.EndOfGeneration() {
		m.EOS[id] = true
	}
	m.Template, m.Metadata = src, ggufMetadata(f)
	return m, nil
}

// newGGUFText joins a tokenizer and a chat template's source (a GGUF
// file's tokenizer.chat_template or a Hugging Face directory's; "" for
// the fallback formats) into a text model.
func newGGUFText(tok *tokenizer.Tokenizer, src string) (ggufText, error) {
	opts := chat.Options{
		EOS: tok.Token(tok.EOS()),
		Fallback: chat.FallbackFor(func(piece string) bool {
			_, ok := tok.TokenID(piece)
			return ok
		}),
	}
	bos := ""
	if id, ok := tok.BOS(); ok {
		bos = tok.Token(id)
		opts.BOS = bos
	}
	tmpl, err := chat.NewTemplate(src, opts)
	if err != nil {
		return ggufText{}, err
	}
	return ggufText{tok: tok, tmpl: tmpl, bos: bos, tools: toolcall.Detect(src),
		renders: toolcall.Detect(src).RendersTools(src) && tmpl.Source() == chat.SourceGGUF,
		vocab: &lazyVocab{build: func() *grammar.Vocabulary {
			return grammar.NewVocabulary(tok.TokenBytes(), tok.EndOfGeneration())
		}}}, nil
}

// ggufMetadata copies f's metadata for Ollama's /api/show: scalars as they
// are, arrays up to pipeline.MaxMetadataArray long, longer ones (the
// vocabulary) as nil. The copy outlives the mapped file.
func ggufMetadata(f *gguf.File) map[string]any {
	out := make(map[string]any, len(f.Keys()))
	for _, k := range f.Keys() {
		v, _ := f.Value(k)
		if n := f.ArrayLen(k); n >= 0 {
			if u8, ok := v.([]uint8); ok && n <= pipeline.MaxMetadataArray {
				ints := make([]int, n) // numbers, not base64
				for i, x := range u8 {
					ints[i] = int(x)
				}
				v = ints
			} else if n > pipeline.MaxMetadataArray {
				v = nil
			} else if b, err := json.Marshal(v); err == nil {
				v = json.RawMessage(b) // a copy, not the mapping's slice
			}
		}
		out[k] = v
	}
	return out
}

// ggufMemory is the host memory a GGUF model is accounted: its file (the
// weights, mapped and read whole) and its KV cache.
func ggufMemory(fileSize, kvBytes int64) int64 { return fileSize + kvBytes }
