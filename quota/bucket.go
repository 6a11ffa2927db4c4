package quota

import "time"

// The integer arithmetic shared by both backends. common.lua, reserve.lua,
// reconcile.lua and usage.lua repeat it step for step: change them together.
const (
	// unitsPerToken is the bucket units of one token (or one request). A
	// bucket of limit L holds L*unitsPerToken units and gains L units per
	// millisecond, so it fills from empty in fullRefillMs.
	unitsPerToken = 60_000
	fullRefillMs  = 60_000
	dayMs         = 24 * 60 * 60 * 1000
)

// bucket is a token bucket's state: units at time at (ms since the Unix
// epoch). The zero bucket is unset and starts full at its first refill.
type bucket struct {
	units, at int64
	set       bool
}

// refill brings b to now for a bucket of limit tokens per minute and caps
// it at capacity. A balance below zero (a debt) stays: it refills like any
// other, which may take longer than a minute.
func (b *bucket) refill(limit, now int64) {
	capacity := limit * unitsPerToken
	if !b.set {
		b.units, b.at, b.set = capacity, now, true
		return
	}
	if now > b.at {
		// Never more time than fills the bucket, so the product stays far
		// below 2^53 however long the tenant was idle.
		b.units += min(now-b.at, max(0, ceilDiv(capacity-b.units, limit))) * limit
		b.at = now
	}
	b.units = min(b.units, capacity)
}

// tokens is the whole tokens in b, 0 when it is in debt.
func (b *bucket) tokens() int64 { return max(0, b.units) / unitsPerToken }

// owed is b's debt in whole tokens, rounded up: 0 unless it is below zero.
func (b *bucket) owed() int64 { return ceilDiv(max(0, -b.units), unitsPerToken) }

// waitMs is the milliseconds until b holds need units, refilling limit
// units per millisecond.
func (b *bucket) waitMs(limit, need int64) int64 {
	if b.units >= need {
		return 0
	}
	return ceilDiv(need-b.units, limit)
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// dayOf is the UTC calendar day of a time in ms since the Unix epoch.
func dayOf(ms int64) int64 {
	if ms < 0 {
		return (ms - dayMs + 1) / dayMs
	}
	return ms / dayMs
}

func millis(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// Deny codes, as the reserve script returns them; 0 is allowed.
const (
	codeAllowed = iota
	codeRequests
	codeTokens
	codeConcurrency
	codeDailyTokens
	codeTooLarge
	codeDuplicate
)

var reasons = [...]Reason{
	codeRequests:    ReasonRequests,
	codeTokens:      ReasonTokens,
	codeConcurrency: ReasonConcurrency,
	codeDailyTokens: ReasonDailyTokens,
	codeTooLarge:    ReasonTooLarge,
}

// outcome is a decision in the form both backends compute it: integers, ms.
type outcome struct {
	code, retryMs                int64
	remRequests, resetRequestsMs int64
	remTokens, resetTokensMs     int64
	created                      bool // Redis only: the tenant's state did not exist
}

// tenantState is one tenant's limiter state. Memory keeps it in a struct;
// the Redis scripts keep the same fields in a hash.
type tenantState struct {
	last      int64 // ms: the tenant's clock, which never goes backward
	rpm, tpm  bucket
	day, used int64 // the UTC day of used, and the tokens used that day
	// over is the potential overage of the reservations held: the sum of
	// MaxTokens - Tokens over those taken from the TPM bucket, in tokens.
	over int64
}

// clock advances the tenant's clock to now (ms) and returns it.
func (s *tenantState) clock(now int64) int64 {
	s.last = max(s.last, now)
	return s.last
}

// rollDay starts a new day's count when today differs from the stored day.
func (s *tenantState) rollDay(today int64) {
	if s.day != today {
		s.day, s.used = today, 0
	}
}

// decide is Reserve's decision for the tenant state at now with inFlight
// held reservations. When allowed it takes from the buckets and the day's
// budget; the caller records the reservation.
func (s *tenantState) decide(r *Request, now, inFlight int64) outcome {
	l := &r.Limits
	if l.RPM > 0 {
		s.rpm.refill(l.RPM, now)
	}
	if l.TPM > 0 {
		s.tpm.refill(l.TPM, now)
	}
	today := dayOf(now)
	s.rollDay(today)

	var o outcome
	switch {
	case l.TPM > 0 && r.Tokens > l.TPM:
		o.code = codeTooLarge
	case l.DailyTokens > 0 && s.used+r.Tokens > l.DailyTokens:
		o.code = codeDailyTokens
		if r.Tokens <= l.DailyTokens {
			o.retryMs = (today+1)*dayMs - now
		}
	default:
		if l.Concurrency > 0 && inFlight >= l.Concurrency {
			o.code, o.retryMs = codeConcurrency, ConcurrencyRetryAfter.Milliseconds()
		}
		if l.RPM > 0 && s.rpm.units < unitsPerToken {
			if o.code == codeAllowed {
				o.code = codeRequests
			}
			o.retryMs = max(o.retryMs, s.rpm.waitMs(l.RPM, unitsPerToken))
		}
		if l.TPM > 0 {
			if need := tpmNeed(r.Tokens, r.most()-r.Tokens, s.over, l.TPM); s.tpm.units < need*unitsPerToken {
				if o.code == codeAllowed {
					o.code = codeTokens
				}
				w := s.tpm.waitMs(l.TPM, need*unitsPerToken)
				if need > l.TPM {
					// More than the bucket holds: requests in flight must
					// settle first, and when is up to them.
					w = max(w, ConcurrencyRetryAfter.Milliseconds())
				}
				o.retryMs = max(o.retryMs, w)
			}
		}
	}
	if o.code == codeAllowed {
		if l.RPM > 0 {
			s.rpm.units -= unitsPerToken
		}
		if l.TPM > 0 {
			s.tpm.units -= r.Tokens * unitsPerToken
		}
		s.used += r.Tokens
	}
	if l.RPM > 0 {
		o.remRequests = s.rpm.tokens()
		o.resetRequestsMs = s.rpm.waitMs(l.RPM, l.RPM*unitsPerToken)
	}
	if l.TPM > 0 {
		o.remTokens = s.tpm.tokens()
		o.resetTokensMs = s.tpm.waitMs(l.TPM, l.TPM*unitsPerToken)
	}
	return o
}

// tpmNeed is the tokens the TPM bucket (of limit tpm) must hold to admit a
// request that reserves tokens and may use up to over more, while the
// reservations held may together use up to held more than they reserved:
// its reservation, plus the held overage beyond the allowance of tpm less
// its own overage (see "Estimated reservations" in the package doc). With
// nothing estimated (over and held 0) it is tokens.
func tpmNeed(tokens, over, held, tpm int64) int64 {
	return tokens + max(0, held-max(0, tpm-over))
}

// settle applies a reconciled reservation of tokens, which could use up to
// most, made on day under limit tpm (0: not taken from the TPM bucket), to
// actual tokens used.
func (s *tenantState) settle(tokens, most, tpm, day, actual, now int64) {
	if tpm > 0 {
		s.tpm.refill(tpm, now)
		s.tpm.units = settleUnits(s.tpm.units, tokens, most, actual, tpm*unitsPerToken)
	}
	s.rollDay(dayOf(now))
	if day == s.day {
		s.used = max(0, s.used+actual-tokens)
	}
}

// settleUnits is a TPM balance of units after settling a reservation of
// tokens, which could use up to most, to actual: the unused part is
// refunded (the balance capped at capacity); the part used above the
// reservation, up to most, is charged even below zero (a debt); anything
// used beyond most is charged only down to zero, and never raises a
// balance already below it.
func settleUnits(units, tokens, most, actual, capacity int64) int64 {
	units += (tokens - min(actual, most)) * unitsPerToken
	if actual > most {
		units = max(min(units, 0), units-(actual-most)*unitsPerToken)
	}
	return min(units, capacity)
}

// usage is the tenant's usage at now under limits l, without changing s.
func (s tenantState) usage(l Limits, now, inFlight int64) Usage {
	u := Usage{InFlight: inFlight}
	if l.RPM > 0 {
		s.rpm.refill(l.RPM, now)
		u.RequestsAvailable = s.rpm.tokens()
	}
	if l.TPM > 0 {
		s.tpm.refill(l.TPM, now)
		u.TokensAvailable = s.tpm.tokens()
		u.TokensOwed = s.tpm.owed()
	}
	if s.day == dayOf(now) {
		u.DailyTokensUsed = s.used
	}
	return u
}

// decision turns an outcome into the Decision for r.
func (o *outcome) decision(r *Request) Decision {
	d := Decision{
		Allowed:       o.code == codeAllowed,
		RetryAfter:    millis(o.retryMs),
		LimitRequests: r.Limits.RPM, RemainingRequests: o.remRequests, ResetRequests: millis(o.resetRequestsMs),
		LimitTokens: r.Limits.TPM, RemainingTokens: o.remTokens, ResetTokens: millis(o.resetTokensMs),
	}
	if !d.Allowed {
		d.Reason = reasons[o.code]
		d.Hard = o.code == codeTooLarge || o.code == codeDailyTokens
	}
	return d
}
