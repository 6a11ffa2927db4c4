package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/upstream"
)

// UpstreamSpec is a model served through OpenAI-compatible engines on the
// node (--upstream MODEL=URL[,URL...]).
type UpstreamSpec struct {
	// Model is the id llmd serves; URLs the engines' base URLs; Name the
	// model's name on the engines ("" for the first they list).
	Model string
	URLs  []string
	Name  string
	// MaxWaiting and MaxKVUsage bound the engine's own queue and KV-cache
	// use under which llmd releases requests to it (0: the defaults, 8
	// and 0.95; see upstream.Config).
	MaxWaiting int
	MaxKVUsage float64
	// MaxInflight bounds the requests in flight on one engine (0: 256).
	MaxInflight int
	// Tokenizer is where to read the model's tokenizer and chat template
	// on this node (--upstream-tokenizer MODEL=PATH: a GGUF file, a Hugging
	// Face directory or hub name, ollama:NAME) to count prompts for the
	// quota; "" uses the engine's /tokenize, else the model path the
	// engine reports when it is on this node, else an estimate.
	Tokenizer string
}

// ParseUpstream reads MODEL=URL[,URL...][#NAME]: the engines' model name,
// when it is not the first they list, follows a "#".
func ParseUpstream(v string) (UpstreamSpec, error) {
	model, urls, ok := strings.Cut(v, "=")
	model = strings.TrimSpace(model)
	if !ok || model == "" || urls == "" {
		return UpstreamSpec{}, fmt.Errorf("--upstream %q: use MODEL=URL[,URL...][#ENGINE_MODEL_NAME], e.g. "+
			"qwen=http://127.0.0.1:8000", v)
	}
	spec := UpstreamSpec{Model: model}
	if u, name, ok := strings.Cut(urls, "#"); ok {
		urls, spec.Name = u, strings.TrimSpace(name)
	}
	for _, u := range strings.Split(urls, ",") {
		u = strings.TrimSpace(u)
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return UpstreamSpec{}, fmt.Errorf("--upstream %q: %q is not an http(s) URL", v, u)
		}
		spec.URLs = append(spec.URLs, u)
	}
	if strings.HasPrefix(model, "sim/") {
		return UpstreamSpec{}, fmt.Errorf("--upstream %q: the sim/ prefix is for simulated models", v)
	}
	return spec, nil
}

// buildUpstream detects spec's engines and returns the model they serve.
func buildUpstream(ctx context.Context, cfg Config, spec UpstreamSpec, logger *slog.Logger) (*pipeline.Model, error) {
	ucfg := upstream.Config{Model: spec.Model, URLs: spec.URLs, Name: spec.Name, Stall: cfg.StallTimeout,
		MaxWaiting: spec.MaxWaiting, MaxKVUsage: spec.MaxKVUsage, MaxInflight: spec.MaxInflight, Ladder: cfg.Engine.Ladder,
		Logger: logger,
		LoadTokenizer: func(root string) (upstream.Tokenizer, error) {
			text, _, err := loadTokenizer(root, cfg.Resolve)
			if err != nil {
				return nil, err
			}
			return text, nil
		}}
	if spec.Tokenizer != "" {
		text, from, err := loadTokenizer(spec.Tokenizer, cfg.Resolve)
		if err != nil {
			return nil, fmt.Errorf("daemon: the tokenizer of upstream model %s: %w", spec.Model, err)
		}
		ucfg.Tokenizer, ucfg.TokenizerFrom = text, from
	}
	set, err := upstream.New(ctx, ucfg)
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	m := pipeline.NewModel(set, set, time.Now(), set.Run)
	m.Target = set
	m.Executor = "upstream:" + string(set.Kind())
	m.Arch = "upstream"
	m.Source = "upstream:" + strings.Join(spec.URLs, ",")
	return m, nil
}
