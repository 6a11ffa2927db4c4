package quota

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// rapidChecksEnv, when set (to anything), makes the property tests run
// their long count of cases (CI sets it); -rapid.checks=N on the command
// line wins over both counts.
const rapidChecksEnv = "LLMD_RAPID_CHECKS"

// setRapidChecks runs the property tests of this test with n cases, or with
// long cases when LLMD_RAPID_CHECKS is set, unless -rapid.checks was given.
// rapid reads the flag when Check starts, and tests that call this are not
// parallel.
func setRapidChecks(t *testing.T, n, long int) {
	if _, ok := os.LookupEnv(rapidChecksEnv); ok {
		n = long
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "rapid.checks" })
	f := flag.Lookup("rapid.checks")
	if given || f == nil {
		return
	}
	old := f.Value.String()
	_ = f.Value.Set(strconv.Itoa(n))
	t.Cleanup(func() { _ = f.Value.Set(old) })
}

// quotaModel is RL-2's model of one tenant: the plainest statement of the
// rules, with balances in bucket units (1/60,000 token) so it can be
// compared exactly.
type quotaModel struct {
	lim   Limits
	ttlMs int64
	now   int64 // ms

	rpm, tpm int64 // units; tpm may be negative (a debt)
	at       int64 // ms of the last refill

	open    map[string]modelReservation // unsettled, maybe expired
	settled map[string]bool             // ids settled or expired, never to settle again
	charged int64                       // tokens charged for settled (actual) and expired (reserved) reservations
	maxOver int64                       // the largest potential overage admitted
	// beyondMost reports a reservation settled for more than its most,
	// which the worst-case balance does not bound.
	beyondMost bool
}

type modelReservation struct{ tokens, most, expires int64 }

func (q *quotaModel) advanceTo(now int64) {
	// Refill: min(capacity, balance + elapsed*limit), from a debt too; the
	// model's int64 holds any elapsed time of a case.
	dt := now - q.at
	q.rpm = min(q.lim.RPM*unitsPerToken, q.rpm+dt*q.lim.RPM)
	q.tpm = min(q.lim.TPM*unitsPerToken, q.tpm+dt*q.lim.TPM)
	q.at, q.now = now, now
	for id, r := range q.open {
		if r.expires <= now {
			delete(q.open, id)
			q.settled[id] = true
			q.charged += r.tokens
		}
	}
}

// held is the potential overage of the open reservations, in tokens.
func (q *quotaModel) held() int64 {
	var n int64
	for _, r := range q.open {
		n += r.most - r.tokens
	}
	return n
}

// reserve returns the expected allowed, reason and RetryAfter in ms for a
// request of tokens that may use most.
func (q *quotaModel) reserve(id string, tokens, most int64) (bool, Reason, int64) {
	l := q.lim
	wait := func(have, need, rate int64) int64 {
		if have >= need {
			return 0
		}
		return (need - have + rate - 1) / rate
	}
	if l.TPM > 0 && tokens > l.TPM {
		return false, ReasonTooLarge, 0
	}
	reason, retry := Reason(""), int64(0)
	if l.Concurrency > 0 && int64(len(q.open)) >= l.Concurrency {
		reason, retry = ReasonConcurrency, 1000
	}
	if l.RPM > 0 && q.rpm < unitsPerToken {
		reason = cmp.Or(reason, ReasonRequests)
		retry = max(retry, wait(q.rpm, unitsPerToken, l.RPM))
	}
	// The estimate must fit the balance, and the balance if every held
	// reservation and this one used their most must stay at or above
	// -max(TPM, this one's overage).
	over := most - tokens
	worstNeed := (q.held() + most - max(l.TPM, over)) * unitsPerToken
	if l.TPM > 0 && (q.tpm < tokens*unitsPerToken || q.tpm < worstNeed) {
		reason = cmp.Or(reason, ReasonTokens)
		w := max(wait(q.tpm, tokens*unitsPerToken, l.TPM), wait(q.tpm, worstNeed, l.TPM))
		if worstNeed > l.TPM*unitsPerToken { // refill alone cannot get there
			w = max(w, 1000)
		}
		retry = max(retry, w)
	}
	if reason != "" {
		return false, reason, retry
	}
	if l.RPM > 0 {
		q.rpm -= unitsPerToken
	}
	if l.TPM > 0 {
		q.tpm -= tokens * unitsPerToken
		q.maxOver = max(q.maxOver, over)
	} else {
		most = tokens // not from the bucket: nothing at risk
	}
	q.open[id] = modelReservation{tokens: tokens, most: most, expires: q.now + q.ttlMs}
	return true, "", 0
}

// reconcile returns the expected refund in units (negative: a charge).
func (q *quotaModel) reconcile(id string, actual int64) int64 {
	r, ok := q.open[id]
	if !ok {
		return 0
	}
	delete(q.open, id)
	q.settled[id] = true
	q.charged += actual
	if q.lim.TPM == 0 {
		return 0
	}
	q.beyondMost = q.beyondMost || actual > r.most
	before := q.tpm
	switch {
	case actual <= r.tokens: // a refund, up to capacity
		q.tpm = min(q.lim.TPM*unitsPerToken, q.tpm+(r.tokens-actual)*unitsPerToken)
	case actual <= r.most: // a charge, into debt if need be
		q.tpm -= (actual - r.tokens) * unitsPerToken
	default: // the charge up to most, then the rest only down to 0
		q.tpm -= (r.most - r.tokens) * unitsPerToken
		if q.tpm > 0 {
			q.tpm = max(0, q.tpm-(actual-r.most)*unitsPerToken)
		}
	}
	return q.tpm - before
}

func (q *quotaModel) outstanding() int64 {
	var n int64
	for _, r := range q.open {
		n += r.tokens
	}
	return n
}

// RL-2: random interleavings of reserve, reconcile, cancel, crash-expire and
// refill against Memory and the model, in the default mode (every request
// reserves the most it may use) or with estimated reservations (some may use
// more than they reserve, and leave a debt).
func TestMemoryProperties(t *testing.T) {
	setRapidChecks(t, 300, 10_000)
	rapid.Check(t, func(rt *rapid.T) {
		estimate := rapid.Bool().Draw(rt, "estimate")
		start := time.Date(2026, 3, 14, 0, 0, 0, 0, time.UTC) // a day's start: the case stays in one UTC day
		clock := newFakeClock(start)
		const ttl = 10 * time.Minute
		m := NewMemory(MemoryConfig{Now: clock.Now, TTL: ttl})
		lim := Limits{
			RPM:         rapid.Int64Range(0, 20).Draw(rt, "rpm"),
			TPM:         rapid.Int64Range(0, 500).Draw(rt, "tpm"),
			Concurrency: rapid.Int64Range(0, 5).Draw(rt, "concurrency"),
		}
		q := &quotaModel{
			lim: lim, ttlMs: ttl.Milliseconds(), now: start.UnixMilli(), at: start.UnixMilli(),
			rpm: lim.RPM * unitsPerToken, tpm: lim.TPM * unitsPerToken,
			open: map[string]modelReservation{}, settled: map[string]bool{},
		}
		ctx := context.Background()
		var ids []string // every id reserved, settled or not

		// state reads the limiter's exact tenant state.
		state := func() (tenantState, int64) {
			tn := m.tenant("acme", false)
			if tn == nil {
				return tenantState{}, 0
			}
			tn.mu.Lock()
			defer tn.mu.Unlock()
			return tn.tenantState, int64(len(tn.byID))
		}
		advance := func(d time.Duration) {
			clock.Advance(d)
			q.advanceTo(clock.Now().UnixMilli())
		}
		pickID := func(rt *rapid.T) string {
			if len(ids) == 0 || rapid.IntRange(0, 9).Draw(rt, "unknown") == 0 {
				return "never-reserved"
			}
			return rapid.SampledFrom(ids).Draw(rt, "id")
		}
		settle := func(rt *rapid.T, id string, actual int64) {
			before, _ := state()
			if lim.TPM > 0 && before.tpm.set {
				before.tpm.refill(lim.TPM, q.now) // the limiter refills lazily
			}
			reserved := q.open[id].tokens // 0 when not open
			want := q.reconcile(id, actual)
			if err := m.Reconcile(ctx, "acme", id, actual); err != nil {
				rt.Fatalf("reconcile: %v", err)
			}
			after, _ := state()
			if lim.TPM > 0 && after.tpm.set {
				after.tpm.refill(lim.TPM, q.now)
			}
			if lim.TPM > 0 && before.tpm.set {
				got := after.tpm.units - before.tpm.units
				if got != want {
					rt.Fatalf("reconcile %s actual %d: bucket moved %d units, model %d", id, actual, got, want)
				}
				if got > reserved*unitsPerToken {
					rt.Fatalf("refund of %d units above the reservation of %d tokens", got, reserved)
				}
			}
		}

		rt.Repeat(map[string]func(*rapid.T){
			"reserve": func(rt *rapid.T) {
				id := fmt.Sprintf("r%d", len(ids))
				tokens := rapid.Int64Range(0, 600).Draw(rt, "tokens")
				most := tokens
				if estimate {
					most += rapid.Int64Range(0, 700).Draw(rt, "over")
				}
				allowed, reason, retry := q.reserve(id, tokens, most)
				d, err := m.Reserve(ctx, Request{ID: id, Tenant: "acme", Limits: lim, Tokens: tokens, MaxTokens: most})
				if err != nil {
					rt.Fatalf("reserve: %v", err)
				}
				if d.Allowed != allowed || d.Reason != reason || d.RetryAfter != millis(retry) {
					rt.Fatalf("reserve %d (most %d): got %+v, model allowed=%v reason=%q retry=%dms", tokens, most, d, allowed, reason, retry)
				}
				ids = append(ids, id)
			},
			"reconcile": func(rt *rapid.T) {
				settle(rt, pickID(rt), rapid.Int64Range(0, 800).Draw(rt, "actual"))
			},
			"cancel": func(rt *rapid.T) {
				settle(rt, pickID(rt), 0)
			},
			"crash-expire": func(rt *rapid.T) {
				advance(ttl + time.Duration(rapid.Int64Range(0, 1000).Draw(rt, "late"))*time.Millisecond)
			},
			"refill": func(rt *rapid.T) {
				advance(time.Duration(rapid.Int64Range(0, 70_000).Draw(rt, "ms")) * time.Millisecond)
			},
			"": func(rt *rapid.T) {
				u, err := m.Usage(ctx, "acme", lim)
				if err != nil {
					rt.Fatalf("usage: %v", err)
				}
				q.advanceTo(clock.Now().UnixMilli()) // Usage expires what the model expires
				s, inFlight := state()
				// The default mode keeps balances in [0, capacity]; estimated
				// reservations may leave the TPM bucket in debt, down to
				// -max(TPM, the largest overage), and so may the balance if
				// every held reservation used its most, while settlements
				// stay within most.
				debt := max(lim.TPM, q.maxOver) * unitsPerToken
				if s.rpm.set && (s.rpm.units < 0 || s.rpm.units > lim.RPM*unitsPerToken) ||
					s.tpm.set && (s.tpm.units < -debt || s.tpm.units > lim.TPM*unitsPerToken) {
					rt.Fatalf("balance outside [-%d, capacity]: %+v", debt, s)
				}
				if !estimate && s.tpm.set && s.tpm.units < 0 {
					rt.Fatalf("default mode in debt: %+v", s)
				}
				if s.over != q.held() {
					rt.Fatalf("held overage %d, model %d", s.over, q.held())
				}
				if worst := q.tpm - q.held()*unitsPerToken; lim.TPM > 0 && !q.beyondMost && worst < -debt {
					rt.Fatalf("worst-case balance %d below -%d", worst, debt)
				}
				if want := (Usage{
					InFlight:          int64(len(q.open)),
					RequestsAvailable: q.rpm / unitsPerToken,
					TokensAvailable:   max(0, q.tpm) / unitsPerToken,
					TokensOwed:        (max(0, -q.tpm) + unitsPerToken - 1) / unitsPerToken,
					DailyTokensUsed:   q.charged + q.outstanding(),
				}); u != want {
					rt.Fatalf("usage %+v, model %+v", u, want)
				}
				if inFlight != int64(len(q.open)) {
					rt.Fatalf("in flight %d, model %d", inFlight, len(q.open))
				}
				// Sum charged == sum actual: the day's count is exactly the
				// settled actuals, the expired reservations and the open ones.
				if s.used != q.charged+q.outstanding() {
					rt.Fatalf("charged %d, model %d", s.used, q.charged+q.outstanding())
				}
				if s.tpm.set && s.tpm.units != q.tpm || s.rpm.set && s.rpm.units != q.rpm {
					// Memory refills lazily: bring a copy to now before comparing.
					s.tpm.refill(max(lim.TPM, 1), q.now)
					s.rpm.refill(max(lim.RPM, 1), q.now)
					if lim.TPM > 0 && s.tpm.units != q.tpm || lim.RPM > 0 && s.rpm.units != q.rpm {
						rt.Fatalf("balances rpm %d tpm %d, model rpm %d tpm %d", s.rpm.units, s.tpm.units, q.rpm, q.tpm)
					}
				}
			},
		})
	})
}
