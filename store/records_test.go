package store

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hookLog collects what OnChange tells.
type hookLog struct {
	mu   sync.Mutex
	recs []Record
}

func (h *hookLog) add(recs []Record) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, recs...)
}

func (h *hookLog) take() []Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.recs
	h.recs = nil
	return out
}

// newNode opens a store named node, on its own fake clock at t0.
func newNode(t *testing.T, node string) (*Store, *fakeClock) {
	t.Helper()
	s, clk := newStore(t)
	s.SetNode(node)
	return s, clk
}

func kinds(recs []Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Kind) + "/" + r.ID
	}
	return out
}

func keyOf(t *testing.T, r Record) keyPayload {
	t.Helper()
	require.Equal(t, RecordKey, r.Kind)
	var p keyPayload
	require.NoError(t, json.Unmarshal(r.Payload, &p))
	return p
}

func TestLocalChangesMakeRecords(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, clk := newNode(t, "node-a")
	var h hookLog
	s.OnChange(h.add)

	_, err := s.EnsureTenant(ctx, "acme", TierFree)
	require.NoError(t, err)
	_, k, err := s.CreateKey(ctx, "acme", false, "ci")
	require.NoError(t, err)
	got := h.take()
	require.Equal(t, []string{"tenant/acme", "key/" + k.ID}, kinds(got))
	assert.Equal(t, "node-a", got[1].Version.Node)
	p := keyOf(t, got[1])
	assert.Equal(t, "acme", p.Tenant)
	assert.Len(t, p.Hash, 64, "the secret's hash travels, never the secret")
	assert.Zero(t, p.Revoked)

	_, err = s.EnsureTenant(ctx, "acme", TierPaid)
	require.NoError(t, err)
	assert.Empty(t, h.take(), "an existing tenant is not a change")

	clk.Add(time.Second)
	_, err = s.RevokeKey(ctx, k.ID)
	require.NoError(t, err)
	rev := h.take()
	require.Len(t, rev, 1)
	assert.True(t, rev[0].Version.After(got[1].Version))
	assert.Equal(t, millis(t0.Add(time.Second)), keyOf(t, rev[0]).Revoked)
	_, err = s.RevokeKey(ctx, k.ID)
	require.NoError(t, err)
	assert.Empty(t, h.take(), "revoking again changes nothing")

	rpm := int64(5)
	_, err = s.UpdateQuota(ctx, "acme", QuotaUpdate{RPM: &rpm})
	require.NoError(t, err)
	q := h.take()
	require.Equal(t, []string{"quota/acme"}, kinds(q))
	assert.False(t, q[0].Deleted)
	_, err = s.UpdateQuota(ctx, "acme", QuotaUpdate{RPM: &rpm})
	require.NoError(t, err)
	assert.Empty(t, h.take(), "the same override is not a change")
	unset := int64(clearOverride)
	_, err = s.UpdateQuota(ctx, "acme", QuotaUpdate{RPM: &unset})
	require.NoError(t, err)
	q = h.take()
	require.Equal(t, []string{"quota/acme"}, kinds(q))
	assert.True(t, q[0].Deleted, "no override left: a tombstone")

	tier := TierEnterprise
	_, err = s.UpdateQuota(ctx, "acme", QuotaUpdate{Tier: &tier})
	require.NoError(t, err)
	assert.Equal(t, []string{"tenant/acme"}, kinds(h.take()))

	require.NoError(t, s.SetTierLimits(ctx, TierFree, Limits{RPM: 7}))
	assert.Equal(t, []string{"tier/free"}, kinds(h.take()))

	all, err := s.Records(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"key/" + k.ID, "quota/acme", "tenant/acme", "tier/free"}, kinds(all))
}

// TestApplyReplicatesKeysAndQuotas: another node's records make its key
// authenticate here, by its hash, with its tenant's tier and limits.
func TestApplyReplicatesKeysAndQuotas(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, _ := newNode(t, "node-a")
	b, _ := newNode(t, "node-b")
	tier := TierFree
	rpm := int64(3)
	_, err := a.UpdateQuota(ctx, "acme", QuotaUpdate{Tier: &tier, RPM: &rpm})
	require.NoError(t, err)
	secret, k, err := a.CreateKey(ctx, "acme", true, "ops")
	require.NoError(t, err)
	require.NoError(t, a.SetTierLimits(ctx, TierFree, Limits{TPM: 99}))

	recs, err := a.Records(ctx)
	require.NoError(t, err)
	changed, err := b.Apply(ctx, recs)
	require.NoError(t, err)
	assert.Len(t, changed, len(recs))

	got, err := b.Authenticate(ctx, secret)
	require.NoError(t, err)
	assert.Equal(t, k.ID, got.ID)
	assert.Equal(t, "acme", got.Tenant)
	assert.True(t, got.Admin)
	q, err := b.Quota(ctx, "acme")
	require.NoError(t, err)
	assert.Equal(t, TierFree, q.Tier)
	assert.Equal(t, Limits{RPM: 3, TPM: 99}, q.Limits)

	again, err := b.Apply(ctx, recs)
	require.NoError(t, err)
	assert.Empty(t, again, "applying twice changes nothing")
	brecs, err := b.Records(ctx)
	require.NoError(t, err)
	assert.Equal(t, recs, brecs, "b holds a's records as they are")

	// The revocation follows, and the key stops working on b.
	_, err = a.RevokeKey(ctx, k.ID)
	require.NoError(t, err)
	recs, err = a.Records(ctx)
	require.NoError(t, err)
	_, err = b.Apply(ctx, recs)
	require.NoError(t, err)
	_, err = b.Authenticate(ctx, secret)
	require.ErrorIs(t, err, ErrBadKey)
}

func TestApplyNewerWinsTiesByNode(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, _ := newNode(t, "node-s")
	rec := func(wall int64, node string, rpm int64) Record {
		b, _ := json.Marshal(tierPayload{RPM: rpm})
		return Record{Kind: RecordTier, ID: "free", Version: Version{Wall: wall, Node: node}, Payload: b}
	}
	limit := func() int64 {
		m, err := s.TierLimits(ctx)
		require.NoError(t, err)
		return m[TierFree].RPM
	}
	for _, tc := range []struct {
		name  string
		in    Record
		want  int64
		takes bool
	}{
		{"first", rec(100, "node-b", 1), 1, true},
		{"older", rec(99, "node-z", 2), 1, false},
		{"same", rec(100, "node-b", 3), 1, false},
		{"tie, higher node", rec(100, "node-c", 4), 4, true},
		{"tie, lower node", rec(100, "node-a", 5), 4, false},
		{"newer", rec(101, "node-a", 6), 6, true},
	} {
		changed, err := s.Apply(ctx, []Record{tc.in})
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.takes, len(changed) == 1, tc.name)
		assert.Equal(t, tc.want, limit(), tc.name)
	}
	// A local change after them is newer than all: the clock witnessed them.
	require.NoError(t, s.SetTierLimits(ctx, TierFree, Limits{RPM: 9}))
	recs, err := s.Records(ctx)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	assert.True(t, recs[0].Version.After(Version{Wall: 101, Node: "node-a"}))
}

func TestRevocationIsSticky(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, order := range []string{"revocation first", "grant first"} {
		t.Run(order, func(t *testing.T) {
			t.Parallel()
			a, aclk := newNode(t, "node-a")
			b, bclk := newNode(t, "node-b")
			c, _ := newNode(t, "node-c")
			secret, k, err := a.CreateKey(ctx, LocalTenant, false, "")
			require.NoError(t, err)
			recs, err := a.Records(ctx)
			require.NoError(t, err)
			_, err = b.Apply(ctx, recs)
			require.NoError(t, err)
			// a revokes; b, not knowing, has the key re-imported later
			// (a newer grant of the same key).
			aclk.Add(time.Second)
			_, err = a.RevokeKey(ctx, k.ID)
			require.NoError(t, err)
			revocation, err := a.Records(ctx)
			require.NoError(t, err)
			bclk.Add(time.Hour)
			_, err = b.db.ExecContext(ctx, `DELETE FROM api_keys`)
			require.NoError(t, err)
			_, err = b.db.ExecContext(ctx, `DELETE FROM control_records`)
			require.NoError(t, err)
			_, err = b.ImportKey(ctx, LocalTenant, false, "again", secret)
			require.NoError(t, err)
			grant, err := b.Records(ctx)
			require.NoError(t, err)
			require.True(t, grant[0].Version.After(revocation[0].Version), "the grant is newer")

			first, second := revocation, grant
			if order == "grant first" {
				first, second = grant, revocation
			}
			_, err = c.Apply(ctx, first)
			require.NoError(t, err)
			changed, err := c.Apply(ctx, second)
			require.NoError(t, err)
			require.Len(t, changed, 1)
			_, err = c.Authenticate(ctx, secret)
			require.ErrorIs(t, err, ErrBadKey, "revoked on c")
			final := changed[0]
			assert.NotZero(t, keyOf(t, final).Revoked)
			assert.True(t, final.Version.After(grant[0].Version), "the merge is newer than the grant")
			assert.Equal(t, "node-c", final.Version.Node)

			// c's merged record wins on a and b too, and they agree.
			for _, s := range []*Store{a, b} {
				_, err := s.Apply(ctx, []Record{final})
				require.NoError(t, err)
				_, err = s.Authenticate(ctx, secret)
				require.ErrorIs(t, err, ErrBadKey)
			}
			// b, revoked by the merge, ignores its own old grant now.
			changed, err = b.Apply(ctx, grant)
			require.NoError(t, err)
			assert.Empty(t, changed)
			_, err = b.Authenticate(ctx, secret)
			require.ErrorIs(t, err, ErrBadKey)
		})
	}
}

func TestApplyOutOfOrderAndTombstones(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, aclk := newNode(t, "node-a")
	b, _ := newNode(t, "node-b")
	var h hookLog
	a.OnChange(h.add)
	tier := TierBatch
	rpm := int64(10)
	_, err := a.UpdateQuota(ctx, "beta", QuotaUpdate{Tier: &tier, RPM: &rpm})
	require.NoError(t, err)
	secret, _, err := a.CreateKey(ctx, "beta", false, "")
	require.NoError(t, err)
	aclk.Add(time.Second)
	unset := int64(clearOverride)
	_, err = a.UpdateQuota(ctx, "beta", QuotaUpdate{RPM: &unset})
	require.NoError(t, err)
	recs := h.take()
	require.Equal(t, []string{"tenant/beta", "quota/beta", "key/" + secret[:keyIDLen], "quota/beta"}, kinds(recs))

	// Delivered backwards: the tombstone, the key, the old quota, the tenant.
	for i := len(recs) - 1; i >= 0; i-- {
		_, err := b.Apply(ctx, recs[i:i+1])
		require.NoError(t, err, kinds(recs[i:i+1]))
	}
	_, err = b.Authenticate(ctx, secret)
	require.NoError(t, err)
	q, err := b.Quota(ctx, "beta")
	require.NoError(t, err)
	assert.Equal(t, TierBatch, q.Tier)
	assert.Nil(t, q.Override.RPM, "the tombstone is newer than the override")
	arecs, err := a.Records(ctx)
	require.NoError(t, err)
	brecs, err := b.Records(ctx)
	require.NoError(t, err)
	assert.Equal(t, arecs, brecs)
}

func TestApplySkipsInvalidRecords(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, _ := newNode(t, "node-s")
	v := Version{Wall: 1, Node: "node-x"}
	good, _ := json.Marshal(tenantPayload{Tier: TierFree, Created: 1})
	key, _ := json.Marshal(keyPayload{Tenant: "acme", Hash: "00", Name: "x"})
	for i, tc := range []Record{
		{Kind: "user", ID: "x", Version: v, Payload: good},
		{Kind: RecordTenant, ID: "Bad Id", Version: v, Payload: good},
		{Kind: RecordTenant, ID: "acme", Version: Version{Wall: 1}, Payload: good},
		{Kind: RecordTenant, ID: "acme", Version: v, Payload: []byte(`{"tier":"gold"}`)},
		{Kind: RecordTenant, ID: "acme", Version: v, Payload: []byte(`{`)},
		{Kind: RecordTenant, ID: "acme", Version: v, Deleted: true, Payload: good},
		{Kind: RecordKey, ID: "llmd-1234567", Version: v, Payload: key},
		{Kind: RecordQuota, ID: "acme", Version: v, Payload: []byte(`{"rpm":-2}`)},
		{Kind: RecordTier, ID: "gold", Version: v, Payload: []byte(`{}`)},
	} {
		ok := Record{Kind: RecordTenant, ID: "ok", Version: Version{Wall: int64(i + 1), Node: "node-x"}, Payload: good}
		changed, err := s.Apply(ctx, []Record{tc, ok})
		require.ErrorIs(t, err, ErrInvalid, "%+v", tc)
		require.Len(t, changed, 1, "the valid record of the batch is applied")
		_, err = s.Tenant(ctx, "acme")
		require.True(t, errors.Is(err, ErrNotFound), "%+v", tc)
	}
}

// TestMigrationBackfillsRecords: a database made before records existed
// gets one per tenant, key and quota override, which replicate.
func TestMigrationBackfillsRecords(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, _ := newNode(t, "node-a")
	rpm := int64(4)
	_, err := s.UpdateQuota(ctx, "acme", QuotaUpdate{RPM: &rpm})
	require.NoError(t, err)
	secret, k, err := s.CreateKey(ctx, "acme", true, "ops")
	require.NoError(t, err)
	_, err = s.RevokeKey(ctx, k.ID)
	require.NoError(t, err)
	secret2, _, err := s.CreateKey(ctx, "acme", false, "ci")
	require.NoError(t, err)
	// Back to schema version 4: without the records (5) and the capacity
	// columns (6).
	_, err = s.db.ExecContext(ctx, `DROP TABLE control_records; DROP TABLE control_origin;
		ALTER TABLE tenant_quotas DROP COLUMN hot_shards; ALTER TABLE tenant_quotas DROP COLUMN user_rpm;
		ALTER TABLE tenant_quotas DROP COLUMN user_tpm; ALTER TABLE tenant_quotas DROP COLUMN reserved_tps;
		ALTER TABLE tenant_quotas DROP COLUMN reserved_model;
		DELETE FROM schema_migrations WHERE version >= 5`)
	require.NoError(t, err)
	ms, err := loadMigrations(migrationFiles)
	require.NoError(t, err)
	require.NoError(t, s.migrate(ctx, ms))

	recs, err := s.Records(ctx)
	require.NoError(t, err)
	require.Len(t, recs, 4, "%v", kinds(recs))
	for _, r := range recs {
		require.NoError(t, checkRecord(r), "%s %s", r.Kind, r.Payload)
		assert.Regexp(t, `^db-[0-9a-f]{12}$`, r.Version.Node)
	}
	b, _ := newNode(t, "node-b")
	_, err = b.Apply(ctx, recs)
	require.NoError(t, err)
	_, err = b.Authenticate(ctx, secret)
	require.ErrorIs(t, err, ErrBadKey, "revoked before the upgrade, revoked after")
	got, err := b.Authenticate(ctx, secret2)
	require.NoError(t, err)
	assert.Equal(t, "acme", got.Tenant)
	q, err := b.Quota(ctx, "acme")
	require.NoError(t, err)
	assert.Equal(t, int64(4), q.Limits.RPM)
}

// TestOfflineWritesNameTheDatabase: without SetNode, versions carry the
// database's own name.
func TestOfflineWritesNameTheDatabase(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	_, err := s.EnsureTenant(t.Context(), "acme", TierPaid)
	require.NoError(t, err)
	recs, err := s.Records(t.Context())
	require.NoError(t, err)
	require.Len(t, recs, 1)
	assert.Regexp(t, `^db-[0-9a-f]{12}$`, recs[0].Version.Node)
}
