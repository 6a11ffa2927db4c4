package store

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckTenantID(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		id string
		ok bool
	}{
		"letter":          {"a", true},
		"digit":           {"7", true},
		"local":           {"local", true},
		"punctuation":     {"acme-corp.eu_1", true},
		"64 characters":   {strings.Repeat("a", 64), true},
		"empty":           {"", false},
		"65 characters":   {strings.Repeat("a", 65), false},
		"leading dash":    {"-acme", false},
		"leading dot":     {".acme", false},
		"leading under":   {"_acme", false},
		"upper case":      {"Acme", false},
		"space":           {"acme corp", false},
		"slash":           {"acme/corp", false},
		"colon":           {"acme:1", false},
		"non-ASCII":       {"acmé", false},
		"NUL":             {"acme\x00", false},
		"trailing spaces": {"acme ", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := checkTenantID(tc.id)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ErrInvalid)
			}
		})
	}
}

func TestParseTier(t *testing.T) {
	t.Parallel()
	for _, tier := range Tiers {
		got, err := ParseTier(string(tier))
		require.NoError(t, err)
		assert.Equal(t, tier, got)
	}
	for _, s := range []string{"", "Paid", "gold", " free"} {
		_, err := ParseTier(s)
		require.ErrorIs(t, err, ErrInvalid, s)
		for _, tier := range Tiers {
			assert.ErrorContains(t, err, string(tier), "the error lists the tiers")
		}
	}
}

func TestEnsureTenant(t *testing.T) {
	t.Parallel()
	s, clk := newStore(t)
	ctx := t.Context()

	got, err := s.EnsureTenant(ctx, "acme", TierFree)
	require.NoError(t, err)
	want := Tenant{ID: "acme", Tier: TierFree, Created: t0}
	assert.Equal(t, want, got)

	clk.Add(time.Hour)
	got, err = s.EnsureTenant(ctx, "acme", TierEnterprise)
	require.NoError(t, err)
	assert.Equal(t, want, got, "an existing tenant is unchanged")

	_, err = s.EnsureTenant(ctx, "acme", Tier("gold"))
	require.ErrorIs(t, err, ErrInvalid)
	_, err = s.EnsureTenant(ctx, "Acme", TierFree)
	require.ErrorIs(t, err, ErrInvalid)
}

func TestTenant(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := t.Context()

	local, err := s.Tenant(ctx, LocalTenant)
	require.NoError(t, err)
	assert.Equal(t, TierPaid, local.Tier)
	assert.Equal(t, time.UTC, local.Created.Location())
	assert.WithinDuration(t, time.Now(), local.Created, time.Minute, "seeded with the real time")

	_, err = s.Tenant(ctx, "nobody")
	require.ErrorIs(t, err, ErrNotFound)
	_, err = s.Tenant(ctx, "No Body")
	require.ErrorIs(t, err, ErrInvalid)
}

func TestTenants(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := t.Context()
	for _, id := range []string{"zeta", "acme", "mid"} {
		_, err := s.EnsureTenant(ctx, id, TierBatch)
		require.NoError(t, err)
	}

	ts, err := s.Tenants(ctx)
	require.NoError(t, err)
	var ids []string
	for _, tn := range ts {
		ids = append(ids, tn.ID)
	}
	assert.Equal(t, []string{"acme", LocalTenant, "mid", "zeta"}, ids)
	assert.Equal(t, TierBatch, ts[0].Tier)
}
