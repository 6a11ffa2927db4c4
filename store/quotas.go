package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Limits are a tier's or a tenant's limits. 0 means unlimited.
type Limits struct {
	// RPM is requests per minute.
	RPM int64
	// TPM is tokens (input plus output) per minute.
	TPM int64
	// Concurrency is the most requests in flight at once.
	Concurrency int64
	// DailyTokens is the tokens per UTC day.
	DailyTokens int64
}

// Override is a tenant's own limits: a nil field inherits the tier's
// limit, a non-nil one replaces it (0: unlimited).
type Override struct {
	RPM, TPM, Concurrency, DailyTokens *int64
	// Capacity is the tenant's own capacity settings (tiers have none).
	Capacity Capacity
}

// apply returns l with o's limits in place of l's.
func (o Override) apply(l Limits) Limits {
	pick := func(own *int64, tier int64) int64 {
		if own != nil {
			return *own
		}
		return tier
	}
	return Limits{
		RPM:         pick(o.RPM, l.RPM),
		TPM:         pick(o.TPM, l.TPM),
		Concurrency: pick(o.Concurrency, l.Concurrency),
		DailyTokens: pick(o.DailyTokens, l.DailyTokens),
	}
}

// equal reports whether o and p override the same limits alike.
func (o Override) equal(p Override) bool {
	same := func(a, b *int64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
	return same(o.RPM, p.RPM) && same(o.TPM, p.TPM) && same(o.Concurrency, p.Concurrency) &&
		same(o.DailyTokens, p.DailyTokens) && o.Capacity == p.Capacity
}

// empty reports whether o overrides nothing.
func (o Override) empty() bool {
	return o.RPM == nil && o.TPM == nil && o.Concurrency == nil && o.DailyTokens == nil && o.Capacity == Capacity{}
}

// Quota is a tenant's quota.
type Quota struct {
	Tenant string
	Tier   Tier
	// Limits are the effective limits: the tier's with Override applied.
	Limits Limits
	// Override holds the tenant's own limits.
	Override Override
	// Capacity is the tenant's capacity settings (Override.Capacity).
	Capacity Capacity
}

// TierLimits returns every tier's default limits.
func (s *Store) TierLimits(ctx context.Context) (map[Tier]Limits, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT tier, rpm, tpm, concurrency, daily_tokens FROM tier_quotas`)
	if err != nil {
		return nil, fmt.Errorf("store: read tier limits: %w", err)
	}
	defer rows.Close()
	m := make(map[Tier]Limits, len(Tiers))
	for rows.Next() {
		var t Tier
		var l Limits
		if err := rows.Scan(&t, &l.RPM, &l.TPM, &l.Concurrency, &l.DailyTokens); err != nil {
			return nil, fmt.Errorf("store: read tier limits: %w", err)
		}
		m[t] = l
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: read tier limits: %w", err)
	}
	return m, nil
}

// SetTierLimits sets a tier's default limits, which apply to its tenants'
// limits that are not overridden. A negative limit or an unknown tier gives
// ErrInvalid.
func (s *Store) SetTierLimits(ctx context.Context, tier Tier, l Limits) error {
	if err := tier.check(); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"rpm", l.RPM}, {"tpm", l.TPM}, {"concurrency", l.Concurrency}, {"daily_tokens", l.DailyTokens}} {
		if f.v < 0 {
			return fmt.Errorf("%w: %s %d: want 0 (unlimited) or more", ErrInvalid, f.name, f.v)
		}
	}
	err := s.writeControl(ctx, func(tx *sql.Tx, recs *[]Record) error {
		_, err := tx.ExecContext(ctx, `UPDATE tier_quotas SET rpm = ?, tpm = ?, concurrency = ?, daily_tokens = ?
			WHERE tier = ?`, l.RPM, l.TPM, l.Concurrency, l.DailyTokens, tier)
		if err != nil {
			return err
		}
		return s.recordTier(ctx, tx, recs, tier, l)
	})
	if err != nil {
		return fmt.Errorf("store: set %s limits: %w", tier, err)
	}
	return nil
}

// quotaQuery selects tenants' quotas; scanQuota reads its rows.
const quotaQuery = `SELECT t.id, t.tier,
	d.rpm, d.tpm, d.concurrency, d.daily_tokens,
	o.rpm, o.tpm, o.concurrency, o.daily_tokens,
	o.hot_shards, o.user_rpm, o.user_tpm, o.reserved_tps, o.reserved_model
	FROM tenants t
	JOIN tier_quotas d ON d.tier = t.tier
	LEFT JOIN tenant_quotas o ON o.tenant = t.id`

// scanQuota reads a row of quotaQuery.
func scanQuota(row scanner) (Quota, error) {
	var q Quota
	var tier Limits
	var own [4]sql.NullInt64
	var hot, userRPM, userTPM sql.NullInt64
	var tps sql.NullFloat64
	var model sql.NullString
	err := row.Scan(&q.Tenant, &q.Tier, &tier.RPM, &tier.TPM, &tier.Concurrency, &tier.DailyTokens,
		&own[0], &own[1], &own[2], &own[3], &hot, &userRPM, &userTPM, &tps, &model)
	if err != nil {
		return Quota{}, err
	}
	ptr := func(n sql.NullInt64) *int64 {
		if !n.Valid {
			return nil
		}
		return &n.Int64
	}
	q.Override = Override{RPM: ptr(own[0]), TPM: ptr(own[1]), Concurrency: ptr(own[2]), DailyTokens: ptr(own[3]),
		Capacity: Capacity{HotShards: hot.Int64, UserRPM: userRPM.Int64, UserTPM: userTPM.Int64, ReservedTPS: tps.Float64,
			ReservedModel: model.String}}
	q.Limits = q.Override.apply(tier)
	q.Capacity = q.Override.Capacity
	return q, nil
}

// readQuota reads tenant's quota through q.
func readQuota(ctx context.Context, q querier, tenant string) (Quota, error) {
	quota, err := scanQuota(q.QueryRowContext(ctx, quotaQuery+` WHERE t.id = ?`, tenant))
	if errors.Is(err, sql.ErrNoRows) {
		return Quota{}, fmt.Errorf("%w: tenant %q", ErrNotFound, tenant)
	}
	return quota, err
}

// Quota returns tenant's quota, ErrNotFound when the tenant does not exist,
// ErrInvalid when its id is malformed.
func (s *Store) Quota(ctx context.Context, tenant string) (Quota, error) {
	if err := checkTenantID(tenant); err != nil {
		return Quota{}, err
	}
	q, err := readQuota(ctx, s.db, tenant)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Quota{}, fmt.Errorf("store: read quota of %q: %w", tenant, err)
	}
	return q, err
}

// Quotas returns every tenant's quota, ordered by tenant id.
func (s *Store) Quotas(ctx context.Context) ([]Quota, error) {
	rows, err := s.db.QueryContext(ctx, quotaQuery+` ORDER BY t.id`)
	if err != nil {
		return nil, fmt.Errorf("store: list quotas: %w", err)
	}
	defer rows.Close()
	var qs []Quota
	for rows.Next() {
		q, err := scanQuota(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list quotas: %w", err)
		}
		qs = append(qs, q)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list quotas: %w", err)
	}
	return qs, nil
}

// QuotaUpdate changes a tenant's quota. A nil field keeps its value. For
// the limits, -1 removes the tenant's override (the tier's limit applies
// again), 0 overrides it to unlimited, a positive value overrides it.
type QuotaUpdate struct {
	Tier                               *Tier
	RPM, TPM, Concurrency, DailyTokens *int64
	// Capacity changes the tenant's capacity settings.
	Capacity CapacityUpdate
}

// clearOverride is the QuotaUpdate limit that removes an override.
const clearOverride = -1

// check returns an error wrapping ErrInvalid for an unknown tier or a limit
// below -1.
func (u QuotaUpdate) check() error {
	if u.Tier != nil {
		if err := u.Tier.check(); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{{"rpm", u.RPM}, {"tpm", u.TPM}, {"concurrency", u.Concurrency}, {"daily_tokens", u.DailyTokens}} {
		if f.v != nil && *f.v < clearOverride {
			return fmt.Errorf("%w: %s %d: want -1 (tier default), 0 (unlimited) or more", ErrInvalid, f.name, *f.v)
		}
	}
	return u.Capacity.apply(Capacity{}).check()
}

// apply returns o changed by u's limits.
func (u QuotaUpdate) apply(o Override) Override {
	set := func(own, update *int64) *int64 {
		switch {
		case update == nil:
			return own
		case *update == clearOverride:
			return nil
		default:
			v := *update
			return &v
		}
	}
	return Override{
		RPM:         set(o.RPM, u.RPM),
		TPM:         set(o.TPM, u.TPM),
		Concurrency: set(o.Concurrency, u.Concurrency),
		DailyTokens: set(o.DailyTokens, u.DailyTokens),
		Capacity:    u.Capacity.apply(o.Capacity),
	}
}

// UpdateQuota changes tenant's tier and overrides as u says, in one
// transaction, and returns the new quota. A missing tenant is created, with
// tier u.Tier or else paid. A malformed tenant id, an unknown tier or a limit
// below -1 gives ErrInvalid.
func (s *Store) UpdateQuota(ctx context.Context, tenant string, u QuotaUpdate) (Quota, error) {
	if err := checkTenantID(tenant); err != nil {
		return Quota{}, err
	}
	if err := u.check(); err != nil {
		return Quota{}, err
	}
	var q Quota
	err := s.writeControl(ctx, func(tx *sql.Tx, recs *[]Record) error {
		tier := TierPaid
		if u.Tier != nil {
			tier = *u.Tier
		}
		made := len(*recs)
		if err := s.insertTenant(ctx, tx, recs, tenant, tier); err != nil {
			return err
		}
		if u.Tier != nil && len(*recs) == made {
			res, err := tx.ExecContext(ctx, `UPDATE tenants SET tier = ? WHERE id = ? AND tier <> ?`, tier, tenant, tier)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n > 0 {
				if err := s.recordTenant(ctx, tx, recs, tenant); err != nil {
					return err
				}
			}
		}
		old, err := readQuota(ctx, tx, tenant)
		if err != nil {
			return err
		}
		o := u.apply(old.Override)
		if err := o.Capacity.check(); err != nil {
			return err
		}
		if !o.equal(old.Override) {
			if err := s.recordQuota(ctx, tx, recs, tenant, o); err != nil {
				return err
			}
		}
		if o.empty() {
			_, err = tx.ExecContext(ctx, `DELETE FROM tenant_quotas WHERE tenant = ?`, tenant)
		} else {
			err = writeOverride(ctx, tx, tenant, o)
		}
		if err != nil {
			return err
		}
		q, err = readQuota(ctx, tx, tenant)
		return err
	})
	if err != nil {
		return Quota{}, fmt.Errorf("store: update quota of %q: %w", tenant, err)
	}
	return q, nil
}

// writeOverride writes tenant's overrides row.
func writeOverride(ctx context.Context, tx *sql.Tx, tenant string, o Override) error {
	c := o.Capacity
	_, err := tx.ExecContext(ctx, `INSERT INTO tenant_quotas (tenant, rpm, tpm, concurrency, daily_tokens,
			hot_shards, user_rpm, user_tpm, reserved_tps, reserved_model)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (tenant) DO UPDATE SET rpm = excluded.rpm, tpm = excluded.tpm,
			concurrency = excluded.concurrency, daily_tokens = excluded.daily_tokens,
			hot_shards = excluded.hot_shards, user_rpm = excluded.user_rpm, user_tpm = excluded.user_tpm,
			reserved_tps = excluded.reserved_tps, reserved_model = excluded.reserved_model`,
		tenant, o.RPM, o.TPM, o.Concurrency, o.DailyTokens, c.HotShards, c.UserRPM, c.UserTPM, c.ReservedTPS, c.ReservedModel)
	return err
}
