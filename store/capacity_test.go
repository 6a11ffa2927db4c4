package store

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCapacitySetKeptAndCleared(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, _ := newStore(t)
	q, err := s.UpdateQuota(ctx, "acme", QuotaUpdate{Capacity: CapacityUpdate{HotShards: ptr[int64](4),
		UserRPM: ptr[int64](10), UserTPM: ptr[int64](5000), ReservedTPS: ptr(120.5), ReservedModel: ptr("mid")}})
	require.NoError(t, err)
	want := Capacity{HotShards: 4, UserRPM: 10, UserTPM: 5000, ReservedTPS: 120.5, ReservedModel: "mid"}
	assert.Equal(t, want, q.Capacity)
	assert.InDelta(t, 120.5, q.Capacity.ReservedFor("mid"), 0)
	assert.Zero(t, q.Capacity.ReservedFor("small"), "reserved on mid only")

	q, err = s.UpdateQuota(ctx, "acme", QuotaUpdate{RPM: ptr[int64](7)})
	require.NoError(t, err)
	assert.Equal(t, want, q.Capacity, "a limit change keeps the capacity")
	assert.Equal(t, int64(7), q.Limits.RPM)

	q, err = s.UpdateQuota(ctx, "acme", QuotaUpdate{RPM: ptr[int64](-1), Capacity: CapacityUpdate{HotShards: ptr[int64](0),
		UserRPM: ptr[int64](0), UserTPM: ptr[int64](0), ReservedTPS: ptr(0.0), ReservedModel: ptr("")}})
	require.NoError(t, err)
	assert.Equal(t, Capacity{}, q.Capacity)
	assert.Equal(t, Override{}, q.Override, "nothing left: the override row is gone")
}

func TestCapacityRejectsBadValues(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	for name, u := range map[string]CapacityUpdate{
		"negative shards":   {HotShards: ptr[int64](-1)},
		"too many shards":   {HotShards: ptr[int64](MaxHotShards + 1)},
		"negative user tpm": {UserTPM: ptr[int64](-5)},
		"negative reserved": {ReservedTPS: ptr(-1.0)},
		"control in model":  {ReservedModel: ptr("a\nb")},
	} {
		_, err := s.UpdateQuota(t.Context(), "acme", QuotaUpdate{Capacity: u})
		require.ErrorIs(t, err, ErrInvalid, name)
	}
}

func TestCapacityReplicates(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, _ := newNode(t, "node-a")
	b, _ := newNode(t, "node-b")
	_, err := a.UpdateQuota(ctx, "acme", QuotaUpdate{Capacity: CapacityUpdate{HotShards: ptr[int64](8),
		ReservedTPS: ptr(50.0)}})
	require.NoError(t, err)
	recs, err := a.Records(ctx)
	require.NoError(t, err)
	_, err = b.Apply(ctx, recs)
	require.NoError(t, err)
	q, err := b.Quota(ctx, "acme")
	require.NoError(t, err)
	assert.Equal(t, Capacity{HotShards: 8, ReservedTPS: 50}, q.Capacity)
}
