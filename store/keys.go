package store

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// Key describes an API key. It never holds the secret, which exists only
// in the answer to [Store.CreateKey].
type Key struct {
	// ID is the secret's first 12 characters ("llmd-" and 7 more): it is
	// shown in listings and names the key to revoke.
	ID     string
	Tenant string
	// Admin keys may call the admin API.
	Admin bool
	// Name is a free-form label.
	Name    string
	Created time.Time
	// LastUsed is the key's last recorded use, the zero time if never.
	// It is recorded at most once a minute.
	LastUsed time.Time
	// Revoked is when the key was revoked, the zero time while it is
	// active.
	Revoked time.Time
}

// maxKeyName is the longest key name, in bytes.
const maxKeyName = 128

// createKeyAttempts bounds the retries on an ID already taken, which
// happens about once in 2^41 keys.
const createKeyAttempts = 4

// keyColumns are a Key's columns in the order scanKey reads them.
const keyColumns = `id, tenant, admin, name, created, last_used, revoked`

// scanKey reads a row of keyColumns, followed by the columns extra points
// to.
func scanKey(row scanner, extra ...any) (Key, error) {
	var k Key
	var created int64
	var lastUsed, revoked sql.NullInt64
	dest := append([]any{&k.ID, &k.Tenant, &k.Admin, &k.Name, &created, &lastUsed, &revoked}, extra...)
	if err := row.Scan(dest...); err != nil {
		return Key{}, err
	}
	k.Created = fromMillis(created)
	k.LastUsed = fromNullMillis(lastUsed)
	k.Revoked = fromNullMillis(revoked)
	return k, nil
}

// checkKeyName returns an error wrapping ErrInvalid unless name is valid
// UTF-8 of at most maxKeyName bytes without control characters (it is
// shown in terminals).
func checkKeyName(name string) error {
	if len(name) > maxKeyName || !utf8.ValidString(name) {
		return fmt.Errorf("%w: key name: want at most %d bytes of UTF-8", ErrInvalid, maxKeyName)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: key name %q: control characters are not allowed", ErrInvalid, name)
		}
	}
	return nil
}

// CreateKey creates an API key for tenant, which must exist (ErrNotFound),
// and returns its secret, which the store does not keep: show it to the
// user once. A malformed tenant id or name gives ErrInvalid.
func (s *Store) CreateKey(ctx context.Context, tenant string, admin bool, name string) (secret string, k Key, err error) {
	if err := checkTenantID(tenant); err != nil {
		return "", Key{}, err
	}
	if err := checkKeyName(name); err != nil {
		return "", Key{}, err
	}
	err = s.writeControl(ctx, func(tx *sql.Tx, recs *[]Record) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM tenants WHERE id = ?`, tenant).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: tenant %q", ErrNotFound, tenant)
		}
		if err != nil {
			return err
		}
		now := fromMillis(millis(s.now()))
		for range createKeyAttempts {
			if secret, err = newSecret(s.random); err != nil {
				return err
			}
			sum := sha256.Sum256([]byte(secret))
			k = Key{ID: secret[:keyIDLen], Tenant: tenant, Admin: admin, Name: name, Created: now}
			_, err = tx.ExecContext(ctx, `INSERT INTO api_keys (id, tenant, hash, admin, name, created)
				VALUES (?, ?, ?, ?, ?, ?)`, k.ID, tenant, sum[:], admin, name, millis(now))
			if err == nil {
				return s.recordKey(ctx, tx, recs, k.ID)
			}
			if !isConstraint(err, sqlite3.ErrConstraintPrimaryKey) {
				return err
			}
		}
		return fmt.Errorf("%d key ids in a row were taken", createKeyAttempts)
	})
	if errors.Is(err, ErrNotFound) {
		return "", Key{}, err
	}
	if err != nil {
		return "", Key{}, fmt.Errorf("store: create key for tenant %q: %w", tenant, err)
	}
	return secret, k, nil
}

// ImportKey adds an existing key, made by another llmd's CreateKey, for
// tenant (which must exist), so that one key works on every node of a
// cluster. A malformed secret (bad format or checksum), tenant or name
// gives ErrInvalid. Importing a key this store already holds for the same
// tenant and role is a no-op that returns it; a different key with the same
// id, or the same key for another tenant or role, gives ErrInvalid.
func (s *Store) ImportKey(ctx context.Context, tenant string, admin bool, name, secret string) (Key, error) {
	if !wellFormed(secret) {
		return Key{}, fmt.Errorf("%w: not an llmd API key (format or checksum)", ErrInvalid)
	}
	if err := checkTenantID(tenant); err != nil {
		return Key{}, err
	}
	if err := checkKeyName(name); err != nil {
		return Key{}, err
	}
	sum := sha256.Sum256([]byte(secret))
	var k Key
	err := s.writeControl(ctx, func(tx *sql.Tx, recs *[]Record) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM tenants WHERE id = ?`, tenant).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: tenant %q", ErrNotFound, tenant)
		}
		if err != nil {
			return err
		}
		var hash []byte
		old, err := scanKey(tx.QueryRowContext(ctx, authQuery, secret[:keyIDLen]), &hash)
		switch {
		case err == nil:
			if subtle.ConstantTimeCompare(hash, sum[:]) != 1 || old.Tenant != tenant || old.Admin != admin {
				return fmt.Errorf("%w: a different key with id %s exists (or it belongs to another tenant or role)",
					ErrInvalid, old.ID)
			}
			k = old
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		now := fromMillis(millis(s.now()))
		k = Key{ID: secret[:keyIDLen], Tenant: tenant, Admin: admin, Name: name, Created: now}
		_, err = tx.ExecContext(ctx, `INSERT INTO api_keys (id, tenant, hash, admin, name, created)
			VALUES (?, ?, ?, ?, ?, ?)`, k.ID, tenant, sum[:], admin, name, millis(now))
		if err != nil {
			return err
		}
		return s.recordKey(ctx, tx, recs, k.ID)
	})
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalid) {
		return Key{}, err
	}
	if err != nil {
		return Key{}, fmt.Errorf("store: import key for tenant %q: %w", tenant, err)
	}
	return k, nil
}

// authQuery looks a key up for Authenticate.
const authQuery = `SELECT ` + keyColumns + `, hash FROM api_keys WHERE id = ?`

// Authenticate returns the key whose secret this is. A malformed, unknown
// or revoked key gives ErrBadKey, unwrapped, whatever the reason; any other
// error means the store failed. It records the use (Key.LastUsed) at most
// once a minute per key, on the Store's own goroutine: Authenticate only
// reads, and never fails or waits because of that write. The returned
// Key's LastUsed is this use when it is being recorded, else the last
// recorded use.
func (s *Store) Authenticate(ctx context.Context, secret string) (Key, error) {
	if !wellFormed(secret) {
		return Key{}, ErrBadKey
	}
	var hash []byte
	k, err := scanKey(s.auth.QueryRowContext(ctx, secret[:keyIDLen]), &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return Key{}, ErrBadKey
	}
	if err != nil {
		return Key{}, fmt.Errorf("store: authenticate: %w", err)
	}
	sum := sha256.Sum256([]byte(secret))
	if subtle.ConstantTimeCompare(hash, sum[:]) != 1 || !k.Revoked.IsZero() {
		return Key{}, ErrBadKey
	}
	now := s.now()
	if s.touches.use(k.ID, k.LastUsed, now) {
		k.LastUsed = fromMillis(millis(now))
	}
	return k, nil
}

// Keys returns every key, revoked ones included, ordered by creation time
// and then ID. It first waits (briefly) for the uses this Store has queued
// to be recorded, so that LastUsed includes them.
func (s *Store) Keys(ctx context.Context) ([]Key, error) {
	if err := s.touches.flush(ctx); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+keyColumns+` FROM api_keys ORDER BY created, id`)
	if err != nil {
		return nil, fmt.Errorf("store: list keys: %w", err)
	}
	defer rows.Close()
	var ks []Key
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list keys: %w", err)
		}
		ks = append(ks, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list keys: %w", err)
	}
	return ks, nil
}

// RevokeKey revokes the key with this ID and returns it; the key stops
// authenticating at once, in every process using the database. Revoking a
// revoked key keeps the first revocation time. An unknown ID gives
// ErrNotFound, a string that is not a key ID ErrInvalid (without echoing
// it: it may be a secret pasted by mistake).
func (s *Store) RevokeKey(ctx context.Context, id string) (Key, error) {
	if !wellFormedID(id) {
		return Key{}, fmt.Errorf("%w: key id: want %d characters starting %q", ErrInvalid, keyIDLen, secretPrefix)
	}
	var k Key
	err := s.writeControl(ctx, func(tx *sql.Tx, recs *[]Record) error {
		res, err := tx.ExecContext(ctx, `UPDATE api_keys SET revoked = ? WHERE id = ? AND revoked IS NULL`,
			millis(s.now()), id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n > 0 {
			if err := s.recordKey(ctx, tx, recs, id); err != nil {
				return err
			}
		}
		k, err = scanKey(tx.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: key %q", ErrNotFound, id)
		}
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return Key{}, err
	}
	if err != nil {
		return Key{}, fmt.Errorf("store: revoke key %q: %w", id, err)
	}
	return k, nil
}

// KeysEverMade reports whether an API key was ever made in this store
// (revoked keys count: revoking is the only way a key ends). A store that
// has had a key never goes back to anonymous access by itself.
func (s *Store) KeysEverMade(ctx context.Context) (bool, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM api_keys`).Scan(&n); err != nil {
		return false, fmt.Errorf("store: count keys: %w", err)
	}
	return n > 0, nil
}

// ActiveKeys counts the keys that are not revoked, and the admin keys
// among them.
func (s *Store) ActiveKeys(ctx context.Context) (total, admins int, err error) {
	err = s.db.QueryRowContext(ctx,
		`SELECT count(*), coalesce(sum(admin), 0) FROM api_keys WHERE revoked IS NULL`).Scan(&total, &admins)
	if err != nil {
		return 0, 0, fmt.Errorf("store: count keys: %w", err)
	}
	return total, admins, nil
}
