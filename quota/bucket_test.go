package quota

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBucketRefill(t *testing.T) {
	const limit = 120 // 2 tokens per second
	var b bucket
	b.refill(limit, 1000)
	require.Equal(t, bucket{units: limit * unitsPerToken, at: 1000, set: true}, b, "an unset bucket starts full")

	b.units = 0
	b.refill(limit, 1500) // 500 ms: one token
	assert.Equal(t, int64(1), b.tokens())
	assert.Equal(t, int64(500*limit), b.units)
	b.refill(limit, 1499) // earlier: nothing
	assert.Equal(t, int64(500*limit), b.units)
	assert.Equal(t, int64(1500), b.at)

	assert.Equal(t, int64(0), b.waitMs(limit, unitsPerToken), "holds one token")
	assert.Equal(t, int64(500), b.waitMs(limit, 2*unitsPerToken))
	assert.Equal(t, int64(59_500), b.waitMs(limit, limit*unitsPerToken), "time to full")

	b.units = 1
	b.refill(limit, 1500+10*fullRefillMs) // a long idle gap
	assert.Equal(t, int64(limit*unitsPerToken), b.units, "never above capacity")

	// A debt stays, and refills like any balance: from two minutes' worth
	// below zero it takes three minutes to be full.
	b.units = -2 * limit * unitsPerToken
	b.refill(limit, b.at)
	assert.Equal(t, int64(-2*limit*unitsPerToken), b.units)
	assert.Equal(t, int64(0), b.tokens(), "no tokens in debt")
	assert.Equal(t, int64(2*limit), b.owed())
	assert.Equal(t, int64(3*fullRefillMs), b.waitMs(limit, limit*unitsPerToken))
	b.refill(limit, b.at+2*fullRefillMs)
	assert.Equal(t, int64(0), b.units)
	b.units = -2 * limit * unitsPerToken
	b.refill(limit, b.at+10*fullRefillMs)
	assert.Equal(t, int64(limit*unitsPerToken), b.units, "full, however long the gap")
	b.units = -1
	assert.Equal(t, int64(1), b.owed(), "a debt rounds up")

	// The limit shrank: the balance is clamped to the new capacity.
	b.units = limit * unitsPerToken
	b.refill(10, b.at)
	assert.Equal(t, int64(10*unitsPerToken), b.units)
}

func TestBucketLargeLimitsStayExact(t *testing.T) {
	// The largest values both backends handle must stay below 2^53, where
	// Lua numbers stop being exact integers.
	const exact = int64(1) << 53
	require.Less(t, int64(MaxRate)*unitsPerToken+int64(MaxRate)*unitsPerToken, exact)
	require.Less(t, int64(MaxDailyTokens)+int64(MaxRate)*1000, exact)
	require.Less(t, int64(fullRefillMs)*MaxRate, exact)
	// A TPM balance stays above -(held overage) and the held overage below
	// a few MaxRate (see tpmNeed): a debt, and the refill of one, too.
	require.Less(t, 4*int64(MaxRate)*unitsPerToken+MaxRate, exact)
}

func TestDayOf(t *testing.T) {
	midnight := time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC).UnixMilli()
	assert.Equal(t, dayOf(midnight-1)+1, dayOf(midnight))
	assert.Equal(t, dayOf(midnight), dayOf(midnight+dayMs-1))
	assert.Equal(t, int64(-1), dayOf(-1))
	assert.Equal(t, int64(0), dayOf(0))
	// A fixed-offset zone does not matter: days are UTC.
	inTokyo := time.Date(2026, 3, 15, 8, 59, 0, 0, time.FixedZone("JST", 9*3600))
	assert.Equal(t, dayOf(midnight-1), dayOf(inTokyo.UnixMilli()))
}

func TestPerNode(t *testing.T) {
	for name, tc := range map[string]struct {
		nodes int
		in    Limits
		want  Limits
	}{
		"one node":        {1, Limits{RPM: 10, TPM: 7}, Limits{RPM: 10, TPM: 7}},
		"unknown nodes":   {0, Limits{RPM: 10}, Limits{RPM: 10}},
		"rounds up":       {3, Limits{RPM: 10, TPM: 7, Concurrency: 2, DailyTokens: 100}, Limits{RPM: 4, TPM: 3, Concurrency: 1, DailyTokens: 34}},
		"at least one":    {50, Limits{RPM: 10, Concurrency: 1}, Limits{RPM: 1, Concurrency: 1}},
		"unlimited stays": {4, Limits{}, Limits{}},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.in.perNode(tc.nodes))
		})
	}
}

func TestDecisionFromOutcome(t *testing.T) {
	r := &Request{Limits: Limits{RPM: 5, TPM: 50}}
	o := outcome{code: codeTokens, retryMs: 1500, remRequests: 4, resetRequestsMs: 12000, remTokens: 3, resetTokensMs: 56000}
	assert.Equal(t, Decision{
		Reason: ReasonTokens, RetryAfter: 1500 * time.Millisecond,
		LimitRequests: 5, RemainingRequests: 4, ResetRequests: 12 * time.Second,
		LimitTokens: 50, RemainingTokens: 3, ResetTokens: 56 * time.Second,
	}, o.decision(r))
	for _, code := range []int64{codeTooLarge, codeDailyTokens} {
		assert.True(t, (&outcome{code: code}).decision(r).Hard)
	}
	for _, code := range []int64{codeRequests, codeTokens, codeConcurrency} {
		assert.False(t, (&outcome{code: code}).decision(r).Hard)
	}
	assert.Equal(t, "quota: tokens limit exceeded, retry after 1.5s", o.decision(r).Err().Error())
}
