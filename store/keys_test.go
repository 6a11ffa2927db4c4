package store

import (
	"bytes"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCreateKeyAndAuthenticate(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := t.Context()
	_, err := s.EnsureTenant(ctx, "acme", TierPaid)
	require.NoError(t, err)

	secret, k, err := s.CreateKey(ctx, "acme", true, "ci runner")
	require.NoError(t, err)
	assert.True(t, wellFormed(secret))
	want := Key{ID: secret[:12], Tenant: "acme", Admin: true, Name: "ci runner", Created: t0}
	assert.Equal(t, want, k)

	got, err := s.Authenticate(ctx, secret)
	require.NoError(t, err)
	want.LastUsed = t0
	assert.Equal(t, want, got)

	ks, err := s.Keys(ctx)
	require.NoError(t, err)
	assert.Equal(t, []Key{want}, ks)
}

func TestCreateKeyRefuses(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := t.Context()
	tests := map[string]struct {
		tenant, name string
		want         error
	}{
		"unknown tenant":    {"nobody", "", ErrNotFound},
		"malformed tenant":  {"No Body", "", ErrInvalid},
		"control character": {LocalTenant, "a\nb", ErrInvalid},
		"long name":         {LocalTenant, strings.Repeat("n", maxKeyName+1), ErrInvalid},
		"not UTF-8":         {LocalTenant, "\xff", ErrInvalid},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, _, err := s.CreateKey(ctx, tc.tenant, false, tc.name)
			require.ErrorIs(t, err, tc.want)
		})
	}
	total, _, err := s.ActiveKeys(ctx)
	require.NoError(t, err)
	assert.Zero(t, total)
}

func TestCreateKeyRetriesTakenID(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := t.Context()
	a := bytes.Repeat([]byte{1}, secretBytes)
	b := bytes.Repeat([]byte{2}, secretBytes)
	s.random = bytes.NewReader(bytes.Join([][]byte{a, a, b}, nil))

	first, _, err := s.CreateKey(ctx, LocalTenant, false, "")
	require.NoError(t, err)
	second, k, err := s.CreateKey(ctx, LocalTenant, false, "")
	require.NoError(t, err, "the taken ID is retried")
	assert.NotEqual(t, first[:keyIDLen], k.ID)
	assert.Equal(t, second[:keyIDLen], k.ID)

	s.random = bytes.NewReader(bytes.Repeat(a, createKeyAttempts))
	_, _, err = s.CreateKey(ctx, LocalTenant, false, "")
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrNotFound)
}

func TestAuthenticateRejects(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := t.Context()
	secret, _, err := s.CreateKey(ctx, LocalTenant, false, "")
	require.NoError(t, err)
	revoked, k, err := s.CreateKey(ctx, LocalTenant, false, "")
	require.NoError(t, err)
	_, err = s.RevokeKey(ctx, k.ID)
	require.NoError(t, err)
	unknown, err := newSecret(rand.Reader)
	require.NoError(t, err)
	withChecksum := func(body string) string { return body + string(appendChecksum(nil, []byte(body))) }
	// sameID has the ID of a stored key, another random part and a valid
	// checksum: only the hash tells it apart.
	other, err := newSecret(rand.Reader)
	require.NoError(t, err)
	sameID := withChecksum(secret[:keyIDLen] + other[keyIDLen:48])
	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'a' {
			b[i] = 'b'
		} else {
			b[i] = 'a'
		}
		return string(b)
	}

	tests := map[string]string{
		"empty":             "",
		"truncated":         secret[:len(secret)-1],
		"ID only":           secret[:keyIDLen],
		"trailing newline":  secret + "\n",
		"wrong checksum":    flip(secret, len(secret)-1),
		"typo":              flip(secret, 20),
		"unknown":           unknown,
		"same ID":           sameID,
		"revoked":           revoked,
		"upper-case prefix": withChecksum("LLMD-" + secret[5:48]),
		"not base62":        withChecksum(secret[:20] + "-" + secret[21:48]),
	}
	for name, key := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := s.Authenticate(ctx, key)
			require.ErrorIs(t, err, ErrBadKey)
			require.Same(t, ErrBadKey, err, "every reason gives the same error")
		})
	}
}

func TestLastUsedThrottled(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openStore(t, dir)
	clk := &fakeClock{now: t0}
	s.now = clk.Now
	ctx := t.Context()
	secret, k, err := s.CreateKey(ctx, LocalTenant, false, "")
	require.NoError(t, err)
	assert.True(t, k.LastUsed.IsZero(), "never used")

	storedBy := func(s *Store) time.Time {
		t.Helper()
		ks, err := s.Keys(ctx)
		require.NoError(t, err)
		require.Len(t, ks, 1)
		return ks[0].LastUsed
	}
	stored := func() time.Time { return storedBy(s) }
	steps := []struct {
		advance time.Duration
		want    time.Time
	}{
		{0, t0},
		{30 * time.Second, t0},
		{29 * time.Second, t0},
		{time.Second, t0.Add(time.Minute)},
		{59 * time.Second, t0.Add(time.Minute)},
		{time.Hour, t0.Add(time.Minute + 59*time.Second + time.Hour)},
	}
	for i, step := range steps {
		clk.Add(step.advance)
		got, err := s.Authenticate(ctx, secret)
		require.NoError(t, err)
		assert.Equal(t, step.want, got.LastUsed, "step %d: returned", i)
		assert.Equal(t, step.want, stored(), "step %d: stored", i)
	}

	// Another Store (another process) honours the time it reads.
	other := openStore(t, dir)
	otherClk := &fakeClock{now: clk.Now().Add(10 * time.Second)}
	other.now = otherClk.Now
	last := stored()
	got, err := other.Authenticate(ctx, secret)
	require.NoError(t, err)
	assert.Equal(t, last, got.LastUsed)
	otherClk.Add(time.Minute)
	_, err = other.Authenticate(ctx, secret)
	require.NoError(t, err)
	assert.Equal(t, otherClk.Now(), storedBy(other))
}

func TestCloseWritesQueuedUses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Open(t.Context(), dir)
	require.NoError(t, err)
	s.now = (&fakeClock{now: t0}).Now
	secret, _, err := s.CreateKey(t.Context(), LocalTenant, false, "")
	require.NoError(t, err)
	_, err = s.Authenticate(t.Context(), secret)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	_, err = s.Authenticate(t.Context(), secret)
	require.Error(t, err, "closed")
	require.NotErrorIs(t, err, ErrBadKey, "a failing store is not a bad key")

	s = openStore(t, dir)
	ks, err := s.Keys(t.Context())
	require.NoError(t, err)
	require.Len(t, ks, 1)
	assert.Equal(t, t0, ks[0].LastUsed)
}

func TestRevokeKey(t *testing.T) {
	t.Parallel()
	s, clk := newStore(t)
	ctx := t.Context()
	secret, k, err := s.CreateKey(ctx, LocalTenant, true, "")
	require.NoError(t, err)

	clk.Add(time.Minute)
	got, err := s.RevokeKey(ctx, k.ID)
	require.NoError(t, err)
	assert.Equal(t, t0.Add(time.Minute), got.Revoked)
	_, err = s.Authenticate(ctx, secret)
	require.ErrorIs(t, err, ErrBadKey)

	clk.Add(time.Minute)
	again, err := s.RevokeKey(ctx, k.ID)
	require.NoError(t, err)
	assert.Equal(t, got, again, "revoking twice keeps the first time")

	unknown, err := newSecret(rand.Reader)
	require.NoError(t, err)
	_, err = s.RevokeKey(ctx, unknown[:keyIDLen])
	require.ErrorIs(t, err, ErrNotFound)

	_, err = s.RevokeKey(ctx, secret)
	require.ErrorIs(t, err, ErrInvalid)
	assert.NotContains(t, err.Error(), secret[keyIDLen:], "a pasted secret is not echoed")
	_, err = s.RevokeKey(ctx, "")
	require.ErrorIs(t, err, ErrInvalid)
}

func TestKeysOrder(t *testing.T) {
	t.Parallel()
	s, clk := newStore(t)
	ctx := t.Context()
	var ids []string
	for range 3 {
		_, k, err := s.CreateKey(ctx, LocalTenant, false, "same time")
		require.NoError(t, err)
		ids = append(ids, k.ID)
	}
	clk.Add(-time.Hour)
	_, early, err := s.CreateKey(ctx, LocalTenant, false, "earlier")
	require.NoError(t, err)

	ks, err := s.Keys(ctx)
	require.NoError(t, err)
	require.Len(t, ks, 4)
	assert.Equal(t, early.ID, ks[0].ID, "by creation time")
	assert.IsIncreasing(t, []string{ks[1].ID, ks[2].ID, ks[3].ID}, "then by ID")
	assert.ElementsMatch(t, ids, []string{ks[1].ID, ks[2].ID, ks[3].ID})
}

func TestActiveKeys(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := t.Context()
	total, admins, err := s.ActiveKeys(ctx)
	require.NoError(t, err)
	assert.Equal(t, [2]int{0, 0}, [2]int{total, admins})

	var adminIDs []string
	for i := range 5 {
		_, k, err := s.CreateKey(ctx, LocalTenant, i < 2, "")
		require.NoError(t, err)
		if k.Admin {
			adminIDs = append(adminIDs, k.ID)
		}
	}
	_, err = s.RevokeKey(ctx, adminIDs[0])
	require.NoError(t, err)
	total, admins, err = s.ActiveKeys(ctx)
	require.NoError(t, err)
	assert.Equal(t, [2]int{4, 1}, [2]int{total, admins})
}

func TestTenantCountsActiveKeys(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := t.Context()
	_, err := s.EnsureTenant(ctx, "acme", TierPaid)
	require.NoError(t, err)
	_, k, err := s.CreateKey(ctx, "acme", false, "one")
	require.NoError(t, err)
	_, _, err = s.CreateKey(ctx, "acme", true, "two")
	require.NoError(t, err)
	_, err = s.RevokeKey(ctx, k.ID)
	require.NoError(t, err)

	acme, err := s.Tenant(ctx, "acme")
	require.NoError(t, err)
	assert.Equal(t, 1, acme.Keys, "only active keys count")
	ts, err := s.Tenants(ctx)
	require.NoError(t, err)
	require.Equal(t, "acme", ts[0].ID)
	assert.Equal(t, 1, ts[0].Keys)
}

func BenchmarkAuthenticate(b *testing.B) {
	s := openStore(b, b.TempDir())
	secret, _, err := s.CreateKey(b.Context(), LocalTenant, false, "bench")
	require.NoError(b, err)

	b.Run("mode=serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Authenticate(b.Context(), secret); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("mode=parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.Authenticate(b.Context(), secret); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("mode=bad-checksum", func(b *testing.B) {
		bad := secret[:len(secret)-1] + "!"
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Authenticate(b.Context(), bad); err != ErrBadKey {
				b.Fatal(err)
			}
		}
	})
}

// TestImportKey: a key made by one store works in another once imported
// there; importing it again is a no-op; a mistyped key, another tenant or
// role, or a missing tenant are refused.
func TestImportKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, _ := newStore(t)
	b, _ := newStore(t)
	for _, s := range []*Store{a, b} {
		_, err := s.EnsureTenant(ctx, "acme", TierPaid)
		require.NoError(t, err)
	}
	secret, made, err := a.CreateKey(ctx, "acme", false, "backend")
	require.NoError(t, err)
	_, err = b.Authenticate(ctx, secret)
	require.ErrorIs(t, err, ErrBadKey)

	k, err := b.ImportKey(ctx, "acme", false, "backend", secret)
	require.NoError(t, err)
	require.Equal(t, made.ID, k.ID)
	got, err := b.Authenticate(ctx, secret)
	require.NoError(t, err)
	require.Equal(t, "acme", got.Tenant)
	again, err := b.ImportKey(ctx, "acme", false, "other name", secret)
	require.NoError(t, err, "importing twice is a no-op")
	require.Equal(t, "backend", again.Name)

	_, err = b.ImportKey(ctx, "acme", true, "", secret)
	require.ErrorIs(t, err, ErrInvalid, "the same key as an admin key")
	_, err = b.ImportKey(ctx, "acme", false, "", secret[:len(secret)-1]+"x")
	require.ErrorIs(t, err, ErrInvalid, "a mistyped key")
	_, err = b.ImportKey(ctx, "nobody", false, "", secret)
	require.ErrorIs(t, err, ErrNotFound)
}
