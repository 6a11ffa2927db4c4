package safety

// OutputMonitor decides when the output checks of one answer run: the
// streaming code tells it how many tokens the answer has as they arrive
// (Due), and asks once at the end (Final). It is not safe for concurrent
// use: one answer, one goroutine. A nil *OutputMonitor never has a check
// due.
type OutputMonitor struct {
	every int  // tokens between periodic checks; 0 for none
	atEnd bool // a check at the end
	next  int  // the token count at which the next periodic check is due
	ended bool // Final has been asked
}

// NewOutputMonitor returns a monitor for one answer, following
// Config.OutputEvery and Config.OutputAtEnd.
func (c *Checker) NewOutputMonitor() *OutputMonitor {
	if c == nil {
		return &OutputMonitor{}
	}
	return &OutputMonitor{
		every: c.cfg.OutputEvery,
		atEnd: c.cfg.OutputAtEnd || c.cfg.OutputEvery > 0,
		next:  c.cfg.OutputEvery,
	}
}

// Enabled reports whether the answer will have any output check, so that
// the caller can skip keeping its text otherwise.
func (m *OutputMonitor) Enabled() bool { return m != nil && m.atEnd }

// Due reports whether a periodic check is due now that the answer has
// tokensSoFar tokens: true the first time tokensSoFar reaches a multiple of
// Config.OutputEvery, once however many multiples it passed since the last
// call. It is false after Final.
func (m *OutputMonitor) Due(tokensSoFar int) bool {
	if m == nil || m.every <= 0 || m.ended || tokensSoFar < m.next {
		return false
	}
	m.next = (tokensSoFar/m.every + 1) * m.every
	return true
}

// Final reports whether a final check (Input.Final true) is due now that
// the answer has ended: true once, if output checks are on at all.
func (m *OutputMonitor) Final() bool {
	if m == nil || !m.atEnd || m.ended {
		return false
	}
	m.ended = true
	return true
}
