package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"
)

var (
	// ErrNotFound is returned when a tenant or key does not exist; it is
	// wrapped with what was looked for.
	ErrNotFound = errors.New("store: not found")
	// ErrInvalid is returned, wrapped with the reason, for an argument the
	// store refuses: a malformed tenant id, an unknown tier, a negative
	// limit.
	ErrInvalid = errors.New("store: invalid")
	// ErrBadKey is returned by [Store.Authenticate] for a malformed,
	// unknown or revoked key, always unwrapped, so that callers (and
	// clients) cannot tell the cases apart.
	ErrBadKey = errors.New("store: invalid API key")
)

// fileName is the database's name in the data directory.
const fileName = "llmd.db"

// dsnParams are go-sqlite3's connection parameters, applied to every
// connection of the pool: WAL, so readers and the writer do not block each
// other; synchronous=FULL, so that a commit is on disk when it returns (the
// usage ledger's promise; NORMAL, go-sqlite3's default, may lose the last
// commits to a power loss); a 5 s busy timeout, so a writer waits for
// another (in this process or another) instead of failing; foreign keys
// enforced; and BEGIN IMMEDIATE for transactions, so a transaction takes the
// write lock before its first read and cannot fail with SQLITE_BUSY when it
// later writes.
const dsnParams = "_journal_mode=WAL&_synchronous=FULL&_busy_timeout=5000&_foreign_keys=on&_txlock=immediate"

// maxConns bounds the connection pool. Readers run in parallel in WAL mode;
// idle connections are kept (database/sql keeps 2 by default) so that
// Authenticate does not reopen and reconfigure one per request.
const maxConns = 8

// Store is llmd's durable state. It is safe for concurrent use; several
// Stores (in one process or several) may open the same directory.
type Store struct {
	db   *sql.DB
	path string

	// now is the clock (tests replace it); random is the source of key
	// secrets (tests replace it to force an ID collision).
	now    func() time.Time
	random io.Reader

	// writer is a semaphore of one held around this Store's write
	// transactions, so that they queue here rather than poll in SQLite's
	// busy handler; other Stores and processes still meet in the busy
	// handler.
	writer chan struct{}

	// auth looks up a key for Authenticate, which runs on every request.
	auth *sql.Stmt

	touches toucher

	// control is the replication state: clock, node name, change hook.
	control control
}

// Open opens the store in dir, creating dir (mode 0700) and the database
// file when missing, and brings the schema up to date. It fails when the
// database was written by a newer llmd (its schema version is higher than
// this build knows). The caller must Close the Store.
func Open(ctx context.Context, dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: create data directory: %w", err)
	}
	path, err := filepath.Abs(filepath.Join(dir, fileName))
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	migrations, err := loadMigrations(migrationFiles)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}

	db, err := sql.Open("sqlite3", dsn(path))
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	s := &Store{
		db:     db,
		path:   path,
		now:    time.Now,
		random: rand.Reader,
		writer: make(chan struct{}, 1),
	}
	if err := ping(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if err := s.open(ctx, migrations); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	return s, nil
}

// open migrates the schema, prepares the statements and starts the touch
// writer; on error the caller closes the database.
func (s *Store) open(ctx context.Context, migrations []migration) error {
	if err := s.migrate(ctx, migrations); err != nil {
		return err
	}
	var err error
	if s.auth, err = s.db.PrepareContext(ctx, authQuery); err != nil {
		return err
	}
	if err := s.touches.start(ctx, s); err != nil {
		s.auth.Close()
		return err
	}
	return nil
}

// ping opens the pool's first connection. On a new file that another Store
// (in this process or another) is switching to WAL at the same moment, a
// new connection's PRAGMA journal_mode fails at once with "database is
// locked": SQLite does not call the busy handler where waiting could
// deadlock. So ping retries that error for up to the busy timeout (5 s).
func ping(ctx context.Context, db *sql.DB) error {
	deadline := time.Now().Add(5 * time.Second)
	for delay := time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		err := db.PingContext(ctx)
		var se sqlite3.Error
		if err == nil || !errors.As(err, &se) || se.Code != sqlite3.ErrBusy || time.Now().After(deadline) {
			return err
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// dsn is the go-sqlite3 data source name of the database file at path: a
// file: URI, so that a path holding '?' or '#' is escaped rather than cut.
func dsn(path string) string {
	p := filepath.ToSlash(path)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // a Windows drive letter: file:///C:/...
	}
	u := url.URL{Scheme: "file", Path: p, RawQuery: dsnParams}
	return u.String()
}

// Close writes the last-used times still queued and closes the database.
// Calls after the first return nil.
func (s *Store) Close() error {
	if !s.touches.stop() {
		return nil
	}
	s.auth.Close()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("store: close %s: %w", s.path, err)
	}
	return nil
}

// Path returns the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// write runs fn in a write transaction (BEGIN IMMEDIATE) and commits it when
// fn returns nil.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return s.writeOn(ctx, s.db, fn)
}

// writeOn is write on db, one of the store's handles: writers take turns
// (s.writer) so that they queue here rather than on SQLite's busy timeout.
func (s *Store) writeOn(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	select {
	case s.writer <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.writer }()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// querier is a *sql.DB or a *sql.Tx, so that one read serves inside and
// outside a transaction.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}

// isConstraint reports whether err is SQLite's constraint violation of the
// given kind (sqlite3.ErrConstraintPrimaryKey, ...).
func isConstraint(err error, code sqlite3.ErrNoExtended) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && se.ExtendedCode == code
}

// millis is t as stored: Unix milliseconds.
func millis(t time.Time) int64 { return t.UnixMilli() }

// fromMillis is a stored time in UTC.
func fromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// fromNullMillis is a stored time that may be NULL (the zero time).
func fromNullMillis(ms sql.NullInt64) time.Time {
	if !ms.Valid {
		return time.Time{}
	}
	return fromMillis(ms.Int64)
}
