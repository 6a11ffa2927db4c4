package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Tier is a tenant's service tier: it sets the tenant's default limits
// and its requests' priority in the engine's scheduler.
type Tier string

// The tiers, highest priority first.
const (
	TierEnterprise Tier = "enterprise"
	TierPaid       Tier = "paid"
	TierFree       Tier = "free"
	TierBatch      Tier = "batch"
)

// Tiers lists every tier, highest priority first. Callers must not modify
// it.
var Tiers = []Tier{TierEnterprise, TierPaid, TierFree, TierBatch}

// ParseTier returns the tier named s (exactly, in lower case), or an error
// wrapping ErrInvalid that lists the tiers.
func ParseTier(s string) (Tier, error) {
	t := Tier(s)
	if err := t.check(); err != nil {
		return "", err
	}
	return t, nil
}

// check returns an error wrapping ErrInvalid unless t is one of Tiers.
func (t Tier) check() error {
	switch t {
	case TierEnterprise, TierPaid, TierFree, TierBatch:
		return nil
	}
	return fmt.Errorf("%w: tier %q: want enterprise, paid, free or batch", ErrInvalid, string(t))
}

// LocalTenant is the tenant of unauthenticated requests on loopback. The
// first migration creates it with tier paid and every limit overridden to 0
// (unlimited).
const LocalTenant = "local"

// maxTenantID is the longest tenant id, in bytes.
const maxTenantID = 64

// Tenant is one tenant: a customer whose keys, limits and usage go
// together.
type Tenant struct {
	// ID is 1 to 64 characters of a-z, 0-9, '.', '_' and '-', starting
	// with a letter or digit.
	ID      string
	Tier    Tier
	Created time.Time
	// Keys counts the tenant's active (not revoked) API keys.
	Keys int
}

// checkTenantID returns an error wrapping ErrInvalid unless id matches
// ^[a-z0-9][a-z0-9._-]{0,63}$.
func checkTenantID(id string) error {
	if id == "" || len(id) > maxTenantID {
		return fmt.Errorf("%w: tenant id %q: want 1 to %d characters", ErrInvalid, id, maxTenantID)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return fmt.Errorf("%w: tenant id %q: want a-z, 0-9, '.', '_' and '-', starting with a letter or digit",
				ErrInvalid, id)
		}
	}
	return nil
}

// tenantQuery selects tenants with their active keys; scanTenant reads its
// rows.
const tenantQuery = `SELECT t.id, t.tier, t.created,
	(SELECT count(*) FROM api_keys k WHERE k.tenant = t.id AND k.revoked IS NULL)
	FROM tenants t`

// scanTenant reads a row of tenantQuery.
func scanTenant(row scanner) (Tenant, error) {
	var t Tenant
	var created int64
	if err := row.Scan(&t.ID, &t.Tier, &created, &t.Keys); err != nil {
		return Tenant{}, err
	}
	t.Created = fromMillis(created)
	return t, nil
}

// EnsureTenant creates tenant id with the given tier if it does not exist
// and returns it; an existing tenant is returned unchanged (its tier
// included: see [Store.UpdateQuota] to change it). A malformed id or an
// unknown tier gives ErrInvalid.
func (s *Store) EnsureTenant(ctx context.Context, id string, tier Tier) (Tenant, error) {
	if err := checkTenantID(id); err != nil {
		return Tenant{}, err
	}
	if err := tier.check(); err != nil {
		return Tenant{}, err
	}
	var t Tenant
	err := s.writeControl(ctx, func(tx *sql.Tx, recs *[]Record) error {
		if err := s.insertTenant(ctx, tx, recs, id, tier); err != nil {
			return err
		}
		var err error
		t, err = scanTenant(tx.QueryRowContext(ctx, tenantQuery+` WHERE t.id = ?`, id))
		return err
	})
	if err != nil {
		return Tenant{}, fmt.Errorf("store: ensure tenant %q: %w", id, err)
	}
	return t, nil
}

// insertTenant creates tenant id with tier unless it exists, and records
// it when it does.
func (s *Store) insertTenant(ctx context.Context, tx *sql.Tx, recs *[]Record, id string, tier Tier) error {
	res, err := tx.ExecContext(ctx,
		`INSERT INTO tenants (id, tier, created) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING`,
		id, tier, millis(s.now()))
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err
	}
	return s.recordTenant(ctx, tx, recs, id)
}

// Tenant returns tenant id, ErrNotFound when it does not exist, ErrInvalid
// when id is malformed.
func (s *Store) Tenant(ctx context.Context, id string) (Tenant, error) {
	if err := checkTenantID(id); err != nil {
		return Tenant{}, err
	}
	t, err := scanTenant(s.db.QueryRowContext(ctx, tenantQuery+` WHERE t.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Tenant{}, fmt.Errorf("%w: tenant %q", ErrNotFound, id)
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("store: read tenant %q: %w", id, err)
	}
	return t, nil
}

// Tenants returns every tenant, ordered by id.
func (s *Store) Tenants(ctx context.Context) ([]Tenant, error) {
	rows, err := s.db.QueryContext(ctx, tenantQuery+` ORDER BY t.id`)
	if err != nil {
		return nil, fmt.Errorf("store: list tenants: %w", err)
	}
	defer rows.Close()
	var ts []Tenant
	for rows.Next() {
		t, err := scanTenant(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list tenants: %w", err)
		}
		ts = append(ts, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list tenants: %w", err)
	}
	return ts, nil
}
