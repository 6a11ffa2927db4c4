package store

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func ptr[T any](v T) *T { return &v }

// defaultLimits are the tier limits documented in doc.go.
var defaultLimits = map[Tier]Limits{
	TierEnterprise: {},
	TierPaid:       {RPM: 600, TPM: 2_000_000, Concurrency: 64},
	TierFree:       {RPM: 60, TPM: 200_000, Concurrency: 8},
	TierBatch:      {RPM: 120, TPM: 2_000_000, Concurrency: 16},
}

func TestDefaultTierLimits(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	got, err := s.TierLimits(t.Context())
	require.NoError(t, err)
	assert.Equal(t, defaultLimits, got)
}

func TestLocalTenantQuota(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	q, err := s.Quota(t.Context(), LocalTenant)
	require.NoError(t, err)
	zero := ptr[int64](0)
	assert.Equal(t, Quota{
		Tenant:   LocalTenant,
		Tier:     TierPaid,
		Limits:   Limits{},
		Override: Override{RPM: zero, TPM: zero, Concurrency: zero, DailyTokens: zero},
	}, q)
}

func TestSetTierLimits(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := t.Context()
	_, err := s.UpdateQuota(ctx, "own", QuotaUpdate{Tier: ptr(TierFree), RPM: ptr[int64](5)})
	require.NoError(t, err)
	_, err = s.EnsureTenant(ctx, "plain", TierFree)
	require.NoError(t, err)

	free := Limits{RPM: 30, TPM: 1000, Concurrency: 2, DailyTokens: 50_000}
	require.NoError(t, s.SetTierLimits(ctx, TierFree, free))
	got, err := s.TierLimits(ctx)
	require.NoError(t, err)
	assert.Equal(t, free, got[TierFree])
	assert.Equal(t, defaultLimits[TierPaid], got[TierPaid])

	plain, err := s.Quota(ctx, "plain")
	require.NoError(t, err)
	assert.Equal(t, free, plain.Limits, "a tenant inherits its tier's new limits")
	own, err := s.Quota(ctx, "own")
	require.NoError(t, err)
	assert.Equal(t, Limits{RPM: 5, TPM: 1000, Concurrency: 2, DailyTokens: 50_000}, own.Limits,
		"an override stays")

	require.ErrorIs(t, s.SetTierLimits(ctx, TierFree, Limits{TPM: -1}), ErrInvalid)
	require.ErrorIs(t, s.SetTierLimits(ctx, Tier("gold"), Limits{}), ErrInvalid)
	got, err = s.TierLimits(ctx)
	require.NoError(t, err)
	assert.Equal(t, free, got[TierFree], "a refused change changes nothing")
}

// TestUpdateQuota applies updates one after another to one tenant.
func TestUpdateQuota(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	paid, free := defaultLimits[TierPaid], defaultLimits[TierFree]
	steps := []struct {
		name       string
		update     QuotaUpdate
		tier       Tier
		limits     Limits
		overridden Override
	}{
		{
			name:   "nothing creates the tenant as paid",
			tier:   TierPaid,
			limits: paid,
		},
		{
			name:       "override",
			update:     QuotaUpdate{RPM: ptr[int64](100)},
			tier:       TierPaid,
			limits:     Limits{RPM: 100, TPM: paid.TPM, Concurrency: paid.Concurrency},
			overridden: Override{RPM: ptr[int64](100)},
		},
		{
			name:       "0 is unlimited, nil keeps",
			update:     QuotaUpdate{TPM: ptr[int64](0), DailyTokens: ptr[int64](1_000_000)},
			tier:       TierPaid,
			limits:     Limits{RPM: 100, TPM: 0, Concurrency: paid.Concurrency, DailyTokens: 1_000_000},
			overridden: Override{RPM: ptr[int64](100), TPM: ptr[int64](0), DailyTokens: ptr[int64](1_000_000)},
		},
		{
			name:       "tier change keeps the overrides",
			update:     QuotaUpdate{Tier: ptr(TierFree)},
			tier:       TierFree,
			limits:     Limits{RPM: 100, TPM: 0, Concurrency: free.Concurrency, DailyTokens: 1_000_000},
			overridden: Override{RPM: ptr[int64](100), TPM: ptr[int64](0), DailyTokens: ptr[int64](1_000_000)},
		},
		{
			name:       "-1 clears",
			update:     QuotaUpdate{RPM: ptr[int64](-1), DailyTokens: ptr[int64](-1)},
			tier:       TierFree,
			limits:     Limits{RPM: free.RPM, TPM: 0, Concurrency: free.Concurrency},
			overridden: Override{TPM: ptr[int64](0)},
		},
		{
			name:   "clearing the last override",
			update: QuotaUpdate{TPM: ptr[int64](-1), Concurrency: ptr[int64](-1)},
			tier:   TierFree,
			limits: free,
		},
	}
	for _, step := range steps {
		q, err := s.UpdateQuota(ctx, "acme", step.update)
		require.NoError(t, err, step.name)
		want := Quota{Tenant: "acme", Tier: step.tier, Limits: step.limits, Override: step.overridden}
		assert.Equal(t, want, q, step.name)
		read, err := s.Quota(ctx, "acme")
		require.NoError(t, err, step.name)
		assert.Equal(t, q, read, "%s: read back", step.name)
	}

	var rows int
	require.NoError(t, s.db.QueryRowContext(ctx,
		`SELECT count(*) FROM tenant_quotas WHERE tenant = 'acme'`).Scan(&rows))
	assert.Zero(t, rows, "no overrides, no row")
}

func TestUpdateQuotaRefuses(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := t.Context()
	before, err := s.UpdateQuota(ctx, "acme", QuotaUpdate{RPM: ptr[int64](7)})
	require.NoError(t, err)
	tests := map[string]struct {
		tenant string
		update QuotaUpdate
	}{
		"below -1":         {"acme", QuotaUpdate{TPM: ptr[int64](-2)}},
		"unknown tier":     {"acme", QuotaUpdate{Tier: ptr(Tier("gold")), RPM: ptr[int64](1)}},
		"malformed tenant": {"ACME", QuotaUpdate{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := s.UpdateQuota(ctx, tc.tenant, tc.update)
			require.ErrorIs(t, err, ErrInvalid)
		})
	}
	after, err := s.Quota(ctx, "acme")
	require.NoError(t, err)
	assert.Equal(t, before, after)
}

func TestUpdateQuotaCreatesTenant(t *testing.T) {
	t.Parallel()
	s, clk := newStore(t)
	ctx := t.Context()
	q, err := s.UpdateQuota(ctx, "nightly", QuotaUpdate{Tier: ptr(TierBatch), Concurrency: ptr[int64](4)})
	require.NoError(t, err)
	assert.Equal(t, TierBatch, q.Tier)
	assert.Equal(t, int64(4), q.Limits.Concurrency)

	tn, err := s.Tenant(ctx, "nightly")
	require.NoError(t, err)
	assert.Equal(t, Tenant{ID: "nightly", Tier: TierBatch, Created: clk.Now()}, tn)
}

func TestQuotas(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := t.Context()
	_, err := s.UpdateQuota(ctx, "zeta", QuotaUpdate{Tier: ptr(TierEnterprise)})
	require.NoError(t, err)
	_, err = s.EnsureTenant(ctx, "acme", TierFree)
	require.NoError(t, err)

	qs, err := s.Quotas(ctx)
	require.NoError(t, err)
	require.Len(t, qs, 3)
	assert.Equal(t, Quota{Tenant: "acme", Tier: TierFree, Limits: defaultLimits[TierFree]}, qs[0])
	assert.Equal(t, LocalTenant, qs[1].Tenant)
	assert.Equal(t, Quota{Tenant: "zeta", Tier: TierEnterprise}, qs[2])

	_, err = s.Quota(ctx, "nobody")
	require.ErrorIs(t, err, ErrNotFound)
	_, err = s.Quota(ctx, "")
	require.ErrorIs(t, err, ErrInvalid)
}
