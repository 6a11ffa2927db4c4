package daemon

import (
	"errors"
	"fmt"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/cpu"
	"github.com/llmd/llmd/engine/sim"
	"github.com/llmd/llmd/model/gguf"
)

// Speculative decoding modes (Config.Speculative).
const (
	SpecOff   = "off"
	SpecNgram = "ngram"
	SpecDraft = "draft"
)

// simDraftCost is the draft model's cost per drafted token in a simulated
// model, as a fraction of the target's weight-read time: a draft model
// about a tenth of the target's size.
const simDraftCost = 0.1

// checkSpeculative validates the speculative decoding settings.
func (c Config) checkSpeculative() error {
	switch c.Speculative {
	case "", SpecOff, SpecNgram:
		if c.DraftModel != "" {
			return errors.New("a draft model is set but speculative decoding is not \"draft\": pass --speculative draft")
		}
	case SpecDraft:
		if c.DraftModel == "" {
			return errors.New("speculative decoding \"draft\" needs a draft model: pass --draft-model PATH (a GGUF file with the target's vocabulary)")
		}
	default:
		return fmt.Errorf("speculative decoding %q: use off, ngram or draft", c.Speculative)
	}
	return c.Engine.Spec.Validate()
}

// speculating reports whether a drafter is to be set.
func (c Config) speculating() bool { return c.Speculative == SpecNgram || c.Speculative == SpecDraft }

// simSpeculation sets up speculation on a simulated model: the executor drafts
// for itself. It returns the engine configuration to use.
func simSpeculation(cfg Config, sc *sim.Config) engine.Config {
	ec := cfg.Engine
	if cfg.Speculative == SpecDraft {
		sc.DraftCost = simDraftCost
	}
	return ec
}

// ggufSpeculation returns the engine configuration of a GGUF model whose file is
// target, with its drafter when speculation is on, and a closer for the
// draft model (nil when none). cc is the target's executor configuration;
// the draft model's executor shares its threads and block size.
func ggufSpeculation(cfg Config, target *gguf.File, cc cpu.Config) (engine.Config, func(), error) {
	ec := cfg.Engine
	switch cfg.Speculative {
	case SpecNgram:
		ec.Spec.Drafter = engine.NgramDrafter{}
		return ec, nil, nil
	case SpecDraft:
	default:
		return ec, nil, nil
	}
	f, err := gguf.Open(cfg.DraftModel)
	if err != nil {
		return ec, nil, fmt.Errorf("draft model: %w", err)
	}
	dc := cpu.DefaultConfig()
	dc.Threads, dc.BlockSize, dc.F16MatMul = cc.Threads, cc.BlockSize, cc.F16MatMul
	d, err := cpu.NewDraftModel(f, target, dc)
	if err != nil {
		_ = f.Close()
		return ec, nil, fmt.Errorf("draft model %s: %w", cfg.DraftModel, err)
	}
	ec.Spec.Drafter = d
	return ec, func() { d.Close(); _ = f.Close() }, nil
}
