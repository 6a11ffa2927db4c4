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

// refill brings b to now for a bucket of limit tokens per minute and clamps
// it to [0, capacity].
func (b *bucket) refill(limit, now int64) {
	capacity := limit * unitsPerToken
	if !b.set {
		b.units, b.at, b.set = capacity, now, true
		return
	}
	if now > b.at {
		b.units += min(now-b.at, fullRefillMs) * limit
		b.at = now
	}
	b.units = clamp(b.units, 0, capacity)
}

// tokens is the whole tokens in b.
func (b *bucket) tokens() int64 { return b.units / unitsPerToken }

// waitMs is the milliseconds until b holds need units, refilling limit
// units per millisecond.
func (b *bucket) waitMs(limit, need int64) int64 {
	if b.units >= need {
		return 0
	}
	return ceilDiv(need-b.units, limit)
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

func clamp(v, lo, hi int64) int64 { return max(lo, min(v, hi)) }

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
		if l.TPM > 0 && s.tpm.units < r.Tokens*unitsPerToken {
			if o.code == codeAllowed {
				o.code = codeTokens
			}
			o.retryMs = max(o.retryMs, s.tpm.waitMs(l.TPM, r.Tokens*unitsPerToken))
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

// settle applies a reconciled reservation of tokens, made on day under
// limit tpm (0: not taken from the TPM bucket), to actual tokens used.
func (s *tenantState) settle(tokens, tpm, day, actual, now int64) {
	if tpm > 0 {
		s.tpm.refill(tpm, now)
		s.tpm.units = clamp(s.tpm.units+(tokens-actual)*unitsPerToken, 0, tpm*unitsPerToken)
	}
	s.rollDay(dayOf(now))
	if day == s.day {
		s.used = max(0, s.used+actual-tokens)
	}
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
