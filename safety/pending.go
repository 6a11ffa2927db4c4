package safety

import (
	"context"
	"fmt"
	"time"
)

// Pending is a check running in its own goroutine, started by
// [Checker.Start]. Its methods are safe for concurrent use.
type Pending struct {
	c      *Checker
	start  time.Time
	cancel context.CancelFunc
	done   chan struct{}
	res    Result // written once before done is closed
}

// Start runs the check of in in its own goroutine, so that the caller can
// route and admit the request meanwhile, and returns at once; Wait returns
// the result. The goroutine ends with the check: within Config.Timeout,
// sooner if ctx ends or Wait gives up on it. ctx is the request's context:
// when it ends, the check stops.
func (c *Checker) Start(ctx context.Context, in Input) *Pending {
	p := &Pending{c: c, start: time.Now(), done: make(chan struct{})}
	if c == nil {
		p.cancel = func() {}
		p.res = Result{Verdict: Allow}
		close(p.done)
		return p
	}
	ctx, p.cancel = context.WithCancel(ctx)
	go func() {
		defer close(p.done)
		defer p.cancel()
		p.res = c.Check(ctx, in)
	}()
	return p
}

// Done is closed when the check has finished; Wait then returns at once.
func (p *Pending) Done() <-chan struct{} { return p.done }

// Wait returns the check's result once it finishes. If ctx ends first, Wait
// stops the check and returns the policy's failure result, with Err
// wrapping ctx's cause and Latency the time since Start. Wait may be
// called more than once; once the check has finished it returns the same
// result.
func (p *Pending) Wait(ctx context.Context) Result {
	select {
	case <-p.done:
		return p.res
	default:
	}
	select {
	case <-p.done:
		return p.res
	case <-ctx.Done():
		p.cancel()
		res := p.c.failure(fmt.Errorf("safety: wait abandoned: %w", context.Cause(ctx)))
		res.Latency = time.Since(p.start)
		return res
	}
}
