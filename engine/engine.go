package engine

import (
	"context"
	"log/slog"
)

// Config configures an Engine. The zero value is not valid; start from
// DefaultConfig.
type Config struct {
	// MaxBatchTokens is the most tokens processed in one step (decode
	// tokens plus prefill chunks). Default 2048.
	MaxBatchTokens int
	// MaxRunning caps the sequences in the running set. Default 256.
	MaxRunning int
	// MaxWaiting caps the waiting queue; Submit returns ErrQueueFull past
	// it. Default 10000.
	MaxWaiting int
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{MaxBatchTokens: 2048, MaxRunning: 256, MaxWaiting: 10000}
}

// Stats is a snapshot of the engine for metrics and the TUI.
type Stats struct {
	Model        string
	BlocksTotal  int
	BlocksUsed   int
	BlocksCached int
	BlockSize    int
	Running      int
	Waiting      int
	Steps        uint64
	// StepTokens is the number of tokens in the last step's batch.
	StepTokens int
	// Completed counts requests that have finished (any reason).
	Completed uint64
	// GeneratedTokens counts every output token produced.
	GeneratedTokens uint64
	// PromptTokens counts prompt tokens prefilled (cache hits excluded).
	PromptTokens uint64
	Preemptions  uint64
}

// Engine runs one model replica. Build it with New, start it with Run.
type Engine struct {
	_ struct{}
}

// New returns an engine over exec. logger may be nil.
func New(exec Executor, clock Clock, cfg Config, logger *slog.Logger) (*Engine, error) {
	panic("todo")
}

// Info describes the executor the engine drives.
func (e *Engine) Info() ExecutorInfo { panic("todo") }

// Submit queues req. The request is cancelled when ctx ends: it is removed
// and its blocks freed at the next step. It returns ErrClosed, ErrQueueFull,
// ErrDuplicateID, *ContextLengthError or *InvalidRequestError.
func (e *Engine) Submit(ctx context.Context, req Request) (*Stream, error) { panic("todo") }

// Cancel cancels the request with the given id, if it is live.
func (e *Engine) Cancel(id string) { panic("todo") }

// Stats returns a snapshot; safe to call from any goroutine.
func (e *Engine) Stats() Stats { panic("todo") }

// Run runs the step loop until ctx ends; then every live request finishes
// with FinishCancelled and Run returns nil.
func (e *Engine) Run(ctx context.Context) error { panic("todo") }
