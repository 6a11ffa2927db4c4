package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// t0 is the fake clocks' start.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fakeClock is a clock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// openStore opens a Store in dir, closed when the test ends.
func openStore(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := Open(t.Context(), dir)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	return s
}

// newStore opens a Store in a new directory, on a fake clock at t0.
func newStore(t testing.TB) (*Store, *fakeClock) {
	t.Helper()
	s := openStore(t, t.TempDir())
	clk := &fakeClock{now: t0}
	s.now = clk.Now
	return s, clk
}

func TestOpenCreatesDirectory(t *testing.T) {
	t.Parallel()
	// '?', '#', '%' and ' ' would cut or garble a DSN that is not escaped.
	dir := filepath.Join(t.TempDir(), "a dir?x=1#y%20", "data")
	s := openStore(t, dir)

	fi, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
	assert.Equal(t, filepath.Join(dir, "llmd.db"), s.Path())
	assert.FileExists(t, s.Path())
	assert.True(t, filepath.IsAbs(s.Path()))
}

func TestConnectionSettings(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	for pragma, want := range map[string]string{
		"journal_mode": "wal",
		"foreign_keys": "1",
		"busy_timeout": "5000",
		"synchronous":  "2", // FULL
	} {
		var got string
		require.NoError(t, s.db.QueryRowContext(t.Context(), "PRAGMA "+pragma).Scan(&got), pragma)
		assert.Equal(t, want, got, pragma)
	}
}

// appliedMigrations returns schema_migrations: version -> applied_at.
func appliedMigrations(t *testing.T, s *Store) map[int]int64 {
	t.Helper()
	rows, err := s.db.QueryContext(t.Context(), `SELECT version, applied_at FROM schema_migrations`)
	require.NoError(t, err)
	defer rows.Close()
	m := map[int]int64{}
	for rows.Next() {
		var v int
		var at int64
		require.NoError(t, rows.Scan(&v, &at))
		m[v] = at
	}
	require.NoError(t, rows.Err())
	return m
}

func TestMigrationsApplyOnce(t *testing.T) {
	t.Parallel()
	ms, err := loadMigrations(migrationFiles)
	require.NoError(t, err)
	require.NotEmpty(t, ms)

	dir := t.TempDir()
	s, err := Open(t.Context(), dir)
	require.NoError(t, err)
	first := appliedMigrations(t, s)
	require.Len(t, first, len(ms))
	for _, m := range ms {
		assert.Contains(t, first, m.version)
	}
	require.NoError(t, s.Close())

	s = openStore(t, dir)
	assert.Equal(t, first, appliedMigrations(t, s), "reopening applies nothing")
	assert.Equal(t, 1, countTenants(t, s), "the local tenant is seeded once")
}

// countTenants counts the rows of tenants.
func countTenants(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	require.NoError(t, s.db.QueryRowContext(t.Context(), `SELECT count(*) FROM tenants`).Scan(&n))
	return n
}

func TestMigrateAppliesOnlyNewOnes(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ms, err := loadMigrations(migrationFiles)
	require.NoError(t, err)
	next := len(ms) + 1
	more := append(ms[:len(ms):len(ms)], migration{
		version: next,
		name:    fmt.Sprintf("%04d_test.sql", next),
		sql:     `CREATE TABLE extra (x INTEGER); INSERT INTO extra VALUES (1);`,
	})

	for range 2 {
		require.NoError(t, s.migrate(t.Context(), more))
	}
	var n int
	require.NoError(t, s.db.QueryRowContext(t.Context(), `SELECT count(*) FROM extra`).Scan(&n))
	assert.Equal(t, 1, n, "the new migration ran once")
	assert.Len(t, appliedMigrations(t, s), next)
}

func TestMigrateRollsBackAFailedMigration(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ms, err := loadMigrations(migrationFiles)
	require.NoError(t, err)
	next := len(ms) + 1
	bad := append(ms[:len(ms):len(ms)], migration{
		version: next,
		name:    fmt.Sprintf("%04d_bad.sql", next),
		sql:     `CREATE TABLE half (x INTEGER); INSERT INTO nowhere VALUES (1);`,
	})

	require.ErrorContains(t, s.migrate(t.Context(), bad), "_bad.sql")
	assert.Len(t, appliedMigrations(t, s), len(ms))
	var n int
	require.NoError(t, s.db.QueryRowContext(t.Context(),
		`SELECT count(*) FROM sqlite_schema WHERE name = 'half'`).Scan(&n))
	assert.Zero(t, n, "the failed migration left nothing behind")
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Open(t.Context(), dir)
	require.NoError(t, err)
	latest := len(appliedMigrations(t, s))
	_, err = s.db.ExecContext(t.Context(), `INSERT INTO schema_migrations VALUES (99, 0)`)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	_, err = Open(t.Context(), dir)
	require.Error(t, err)
	assert.ErrorContains(t, err, "schema version 99")
	assert.ErrorContains(t, err, fmt.Sprintf("(%d)", latest))
}

func TestLoadMigrations(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		files []string
		want  []int // nil: an error
	}{
		"numbered":     {files: []string{"0001_init.sql", "0002_usage.sql"}, want: []int{1, 2}},
		"none":         {files: nil, want: []int{}},
		"gap":          {files: []string{"0001_init.sql", "0003_usage.sql"}},
		"not from one": {files: []string{"0002_init.sql"}},
		"short number": {files: []string{"001_init.sql"}},
		"no number":    {files: []string{"init.sql"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fsys := fstest.MapFS{}
			for _, f := range tc.files {
				fsys["migrations/"+f] = &fstest.MapFile{Data: []byte("SELECT 1;")}
			}
			ms, err := loadMigrations(fsys)
			if tc.want == nil {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			got := []int{}
			for _, m := range ms {
				got = append(got, m.version)
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestOpenConcurrently opens one new directory from several Stores at once,
// as llmd and llmctl may on a first start: each migration runs once.
func TestOpenConcurrently(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const n = 4
	stores := make([]*Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = Open(t.Context(), dir) })
	}
	wg.Wait()
	for i, s := range stores {
		require.NoError(t, errs[i])
		t.Cleanup(func() { assert.NoError(t, s.Close()) })
	}
	ms, err := loadMigrations(migrationFiles)
	require.NoError(t, err)
	assert.Len(t, appliedMigrations(t, stores[0]), len(ms))
	assert.Equal(t, 1, countTenants(t, stores[n-1]))
}

func TestCloseTwice(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), t.TempDir())
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
}

// TestConcurrentStores runs 16 goroutines that authenticate and update
// quotas through two Stores on one directory, as llmd and llmctl would:
// none may see "database is locked".
func TestConcurrentStores(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	stores := []*Store{openStore(t, dir), openStore(t, dir)}
	// A clock that moves a minute per reading, so that every use is
	// written (the worst case for the writers).
	var ticks atomic.Int64
	for _, s := range stores {
		s.now = func() time.Time { return t0.Add(time.Duration(ticks.Add(1)) * time.Minute) }
	}

	const tenants, goroutines, rounds = 4, 16, 40
	var secrets []string
	for i := range tenants {
		id := fmt.Sprintf("t%d", i)
		_, err := stores[i%2].EnsureTenant(t.Context(), id, TierFree)
		require.NoError(t, err)
		secret, _, err := stores[i%2].CreateKey(t.Context(), id, false, "")
		require.NoError(t, err)
		secrets = append(secrets, secret)
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*rounds)
	for g := range goroutines {
		wg.Go(func() {
			for r := range rounds {
				s := stores[(g+r)%2]
				i := (g + r) % tenants
				if _, err := s.Authenticate(ctx, secrets[i]); err != nil {
					errs <- fmt.Errorf("authenticate: %w", err)
				}
				rpm := int64(g*rounds + r)
				if _, err := s.UpdateQuota(ctx, fmt.Sprintf("t%d", i), QuotaUpdate{RPM: &rpm}); err != nil {
					errs <- fmt.Errorf("update quota: %w", err)
				}
				if r%10 == 0 {
					if _, _, err := s.CreateKey(ctx, fmt.Sprintf("t%d", i), false, "more"); err != nil {
						errs <- fmt.Errorf("create key: %w", err)
					}
				}
				if _, err := s.Quota(ctx, fmt.Sprintf("t%d", i)); err != nil {
					errs <- fmt.Errorf("read quota: %w", err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	require.NoError(t, errors.Join(all...))

	total, _, err := stores[0].ActiveKeys(t.Context())
	require.NoError(t, err)
	assert.Equal(t, tenants+goroutines*rounds/10, total)
	for _, s := range stores {
		ks, err := s.Keys(t.Context())
		require.NoError(t, err)
		for _, k := range ks[:tenants] {
			assert.False(t, k.LastUsed.IsZero(), "key %s used", k.ID)
		}
	}
}
