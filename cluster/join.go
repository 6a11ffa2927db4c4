package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// retryJoin joins the Join addresses until one answers, with a backoff
// from ReconnectInterval/4 doubling up to 8 x ReconnectInterval (a little
// jittered), while this node serves alone. It also stops once another
// node has joined this one (they found each other from the other side).
// It returns an error wrapping ErrJoin after RetryJoinMax failed attempts
// (when positive), nil otherwise.
func (c *Cluster) retryJoin(ctx context.Context) error {
	base := max(c.cfg.ReconnectInterval, 40*time.Millisecond)
	wait, ceiling := base/4, 8*base
	var lastErr error
	for attempt := 1; ; attempt++ {
		t := time.NewTimer(jitter(wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		if c.numLive.Load() > 1 {
			c.awaitingJoin.Store(false)
			c.log.Info("joined by another member", "attempts", attempt-1)
			return nil
		}
		n, err := c.ml.Join(c.cfg.Join)
		if n > 0 {
			c.awaitingJoin.Store(false)
			c.log.Info("joined the cluster", "attempts", attempt, "members", c.numLive.Load())
			return nil
		}
		lastErr = err
		if m := c.cfg.RetryJoinMax; m > 0 && attempt >= m {
			return fmt.Errorf("%w %v after %d attempts: %w", ErrJoin, c.cfg.Join, attempt, lastErr)
		}
		c.log.Debug("join failed; retrying", "join", c.cfg.Join, "attempt", attempt, "err", err)
		wait = min(2*wait, ceiling)
	}
}

// jitter spreads d over [0.8d, 1.2d) so nodes started together do not
// retry in step.
func jitter(d time.Duration) time.Duration {
	return d*8/10 + time.Duration(rand.Int64N(int64(d)*4/10+1))
}
