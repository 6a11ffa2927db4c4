package grammar

import "github.com/llmd/llmd/engine"

// Constraint returns m as the engine's constraint on a sequence: the
// engine masks each step's sample with Allowed and advances m with Accept.
func (m *Matcher) Constraint() engine.Constraint { return constraint{m} }

type constraint struct{ m *Matcher }

func (c constraint) Allowed(mask []uint64)    { c.m.Allowed(mask) }
func (c constraint) Accept(tok int32) error   { return c.m.Accept(tok) }
func (c constraint) Done() bool               { return c.m.Done() }
func (c constraint) Clone() engine.Constraint { return constraint{c.m.Clone()} }
