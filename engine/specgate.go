package engine

import "time"

// specGate decides, per number of running sequences, whether speculating
// pays on this executor with this drafter, from what the steps measure:
// the output tokens per second of decode-only steps that verified drafts
// (drafting time included) against those that did not. Drafts that are
// often rejected, or a draft model or verification that costs more than
// the accepted tokens save, turn speculation off for that batch size; a
// probe now and then, run the other way, keeps both estimates fresh, so it
// turns back on when the text becomes predictable again.
//
// A step that speculates right after one that did not is not measured: a
// drafter that keeps state per sequence (a draft model) first catches up
// with the tokens the plain steps committed, a cost of switching over, not
// of speculating, which would otherwise make every probe look slower than
// speculation runs. So a probe that speculates lasts specGateBurst steps.
//
// Probes cost: a probe that speculates where it does not pay loses its
// steps and the draft model's catch-up. So each probe that leaves the
// decision as it was doubles the steps to the next (specGateProbe up to
// specGateMaxProbe), and a change of decision starts over from
// specGateProbe.
//
// Locking: the step goroutine only.
type specGate struct {
	plain, spec [specGateBuckets]float64 // tokens/s, exponential moving averages; 0: not measured
	pays        [specGateBuckets]bool    // the last decision
	every       [specGateBuckets]int     // steps between probes; 0: specGateProbe
	since       [specGateBuckets]int     // steps since the last probe
	warm        bool                     // the last decode step observed verified drafts
	burst       int                      // steps left of a probe that speculates
}

const (
	// specGateBuckets bounds the batch sizes told apart; larger ones share
	// the last bucket.
	specGateBuckets = 65
	// specGateProbe and specGateMaxProbe bound the steps between two probes.
	specGateProbe    = 16
	specGateMaxProbe = 512
	// specGateWeight is the weight of a new measurement in the averages.
	specGateWeight = 0.3
	// specGateBurst is the length of a probe that speculates: its first
	// step is not measured.
	specGateBurst = 3
)

func gateBucket(n int) int { return min(max(n, 0), specGateBuckets-1) }

// allow reports whether the next step, with n running sequences, should
// speculate.
func (g *specGate) allow(n int) bool {
	if g.burst > 0 {
		g.burst--
		return true
	}
	b := gateBucket(n)
	switch {
	case g.spec[b] == 0:
		return true
	case g.plain[b] == 0:
		return false
	}
	pays := g.spec[b] >= g.plain[b]
	if pays != g.pays[b] || g.every[b] == 0 {
		g.pays[b], g.every[b], g.since[b] = pays, specGateProbe, 0
	}
	if g.since[b]++; g.since[b] < g.every[b] {
		return pays
	}
	g.since[b], g.every[b] = 0, min(2*g.every[b], specGateMaxProbe)
	if !pays {
		g.burst = specGateBurst - 1
	}
	return !pays
}

// observe records a decode-only step with n running sequences that
// produced tokens output tokens in d (drafting included), with drafts
// verified or not. A step with drafts after one without is not measured.
func (g *specGate) observe(n int, spec bool, tokens int, d time.Duration) {
	warm := g.warm
	g.warm = spec
	if d <= 0 || tokens <= 0 || spec && !warm {
		return
	}
	b := gateBucket(n)
	rate := float64(tokens) / d.Seconds()
	avg := &g.plain[b]
	if spec {
		avg = &g.spec[b]
	}
	if *avg == 0 {
		*avg = rate
		return
	}
	*avg += specGateWeight * (rate - *avg)
}

// decodeOnly reports whether every sequence of b decodes (one token, plus
// its drafts), so that its time compares with other decode steps, and
// whether any verified drafts.
func decodeOnly(b *Batch) (decode, drafts bool) {
	for i := range b.Seqs {
		s := &b.Seqs[i]
		if !s.Sample || len(s.Tokens) != 1+s.Draft {
			return false, false
		}
		drafts = drafts || s.Draft > 0
	}
	return len(b.Seqs) > 0, drafts
}
