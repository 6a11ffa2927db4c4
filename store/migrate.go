package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// migrationFiles holds the schema's migrations, one SQL file each, named
// NNNN_what.sql and numbered from 0001 without gaps. To change the schema,
// add the next file; never edit one that has shipped. Each runs once per
// database, in its own transaction, and its number is recorded in
// schema_migrations.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one step of the schema.
type migration struct {
	version int
	name    string // the file's name, for errors
	sql     string
}

// loadMigrations reads the migrations in fsys's migrations directory and
// checks that they are numbered 1, 2, ... in order.
func loadMigrations(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	ms := make([]migration, 0, len(names))
	for i, name := range names { // fs.Glob sorts them
		base := path.Base(name)
		num, _, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil || len(num) != 4 || v != i+1 {
			return nil, fmt.Errorf("migration %s: want a name starting %04d_", base, i+1)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: base, sql: string(b)})
	}
	return ms, nil
}

const createMigrationsTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	applied_at INTEGER NOT NULL
)`

// migrate applies the migrations the database has not had. Another process
// may migrate the same file at the same time: each migration's transaction
// checks the version again under the write lock.
func (s *Store) migrate(ctx context.Context, ms []migration) error {
	if _, err := s.db.ExecContext(ctx, createMigrationsTable); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	v, err := schemaVersion(ctx, s.db, len(ms))
	if err != nil || v == len(ms) {
		return err
	}
	for _, m := range ms {
		err := s.write(ctx, func(tx *sql.Tx) error {
			v, err := schemaVersion(ctx, tx, len(ms))
			if err != nil || v >= m.version {
				return err
			}
			if _, err := tx.ExecContext(ctx, m.sql); err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx,
				`INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`,
				m.version, millis(s.now()))
			return err
		})
		if err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
	}
	return nil
}

// schemaVersion is the database's schema version: the last migration
// applied, 0 for a new database. It fails when the version is higher than
// latest, the last migration this build knows.
func schemaVersion(ctx context.Context, q querier, latest int) (int, error) {
	var v int
	err := q.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if v > latest {
		return 0, fmt.Errorf("database schema version %d is newer than this build knows (%d): use a newer llmd", v, latest)
	}
	return v, nil
}
