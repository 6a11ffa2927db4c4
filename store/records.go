package store

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// RecordKind names what a control record describes.
type RecordKind string

// The kinds of control records and what their ID names.
const (
	// RecordTenant: a tenant (ID: the tenant id), its tier.
	RecordTenant RecordKind = "tenant"
	// RecordKey: an API key (ID: the key id), with the SHA-256 of its
	// secret, never the secret, and its revocation.
	RecordKey RecordKind = "key"
	// RecordQuota: a tenant's whole set of quota overrides (ID: the tenant
	// id); a tombstone (Deleted) when it overrides nothing.
	RecordQuota RecordKind = "quota"
	// RecordTier: a tier's default limits (ID: the tier).
	RecordTier RecordKind = "tier"
)

// maxRecordNode bounds a version's node id, in bytes.
const maxRecordNode = 128

// Version orders the records about one thing: a hybrid logical clock
// timestamp (Wall, Logical) and the node that made it, compared in that
// order, so that two versions are equal only when they are the same write.
type Version struct {
	// Wall is Unix milliseconds: the later of the maker's clock and every
	// version of the same record it had seen.
	Wall int64
	// Logical orders versions made in the same millisecond.
	Logical uint32
	// Node is the node (or database, for offline writes) that made it.
	Node string
}

// After reports whether v is newer than o.
func (v Version) After(o Version) bool {
	if v.Wall != o.Wall {
		return v.Wall > o.Wall
	}
	if v.Logical != o.Logical {
		return v.Logical > o.Logical
	}
	return v.Node > o.Node
}

// IsZero reports whether v is the zero Version (no record).
func (v Version) IsZero() bool { return v == Version{} }

// Record is one replicated piece of control state: the whole current state
// of one tenant, key, tenant quota or tier, at a version. Usage rows are
// per node and never records.
//
// Merging (see [Store.Apply]): the record with the newer Version wins, with
// one exception: a key revoked on any node stays revoked. A node that
// would lose a revocation (it holds a revoked key and receives a newer
// grant of it, or holds a grant and receives an older revocation) keeps
// the revocation and makes a new version of the merged key, newer than
// both, which then wins everywhere.
type Record struct {
	Kind    RecordKind
	ID      string
	Version Version
	// Deleted marks a tombstone: only RecordQuota (no override left).
	Deleted bool
	// Payload is the state, JSON (tenantPayload, keyPayload, quotaPayload
	// or tierPayload). The caller owns the slice.
	Payload []byte
}

// The payloads. Times are Unix milliseconds; 0 is none.
type (
	tenantPayload struct {
		Tier    Tier  `json:"tier"`
		Created int64 `json:"created"`
	}
	keyPayload struct {
		Tenant  string `json:"tenant"`
		Hash    string `json:"hash"` // hex SHA-256 of the secret
		Admin   bool   `json:"admin"`
		Name    string `json:"name"`
		Created int64  `json:"created"`
		Revoked int64  `json:"revoked"`
	}
	quotaPayload struct {
		RPM         *int64 `json:"rpm"`
		TPM         *int64 `json:"tpm"`
		Concurrency *int64 `json:"concurrency"`
		DailyTokens *int64 `json:"daily_tokens"`
		// The capacity settings; absent (zero) in records of older nodes.
		HotShards     int64   `json:"hot_shards,omitempty"`
		UserRPM       int64   `json:"user_rpm,omitempty"`
		UserTPM       int64   `json:"user_tpm,omitempty"`
		ReservedTPS   float64 `json:"reserved_tps,omitempty"`
		ReservedModel string  `json:"reserved_model,omitempty"`
	}
	tierPayload struct {
		RPM         int64 `json:"rpm"`
		TPM         int64 `json:"tpm"`
		Concurrency int64 `json:"concurrency"`
		DailyTokens int64 `json:"daily_tokens"`
	}
)

// control is the Store's part in replication: its clock, its name in
// versions and the hook told of local changes.
type control struct {
	mu     sync.Mutex
	clock  hlc    // guarded by mu
	origin string // guarded by mu: control_origin's id, read once

	node atomic.Pointer[string]
	hook atomic.Pointer[func([]Record)]
}

// SetNode names this node in the versions the Store makes from now on
// (a cluster's node id). Without it, versions carry the database's own
// random name.
func (s *Store) SetNode(id string) { s.control.node.Store(&id) }

// OnChange sets the function told, after each commit, of the records that
// this Store's own changes made (creating or revoking a key, ensuring a
// tenant, updating a quota or a tier) and that Apply re-issued. It runs on
// the committing goroutine and must not block. Changes made by other
// Stores on the same file (an offline llmctl) are not told: read Records.
func (s *Store) OnChange(fn func([]Record)) { s.control.hook.Store(&fn) }

func (s *Store) notify(recs []Record) {
	if fn := s.control.hook.Load(); fn != nil && len(recs) > 0 {
		(*fn)(recs)
	}
}

// writeControl is write for transactions that make records: fn appends
// them to recs, and they are told to OnChange's function after the commit.
func (s *Store) writeControl(ctx context.Context, fn func(tx *sql.Tx, recs *[]Record) error) error {
	var recs []Record
	err := s.write(ctx, func(tx *sql.Tx) error {
		recs = recs[:0]
		return fn(tx, &recs)
	})
	if err == nil {
		s.notify(recs)
	}
	return err
}

// stamp returns a version newer than floor and than every one this Store
// made or applied, from its clock.
func (s *Store) stamp(ctx context.Context, tx *sql.Tx, floor Version) (Version, error) {
	c := &s.control
	node := ""
	if p := c.node.Load(); p != nil {
		node = *p
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if node == "" {
		if c.origin == "" {
			if err := tx.QueryRowContext(ctx, `SELECT id FROM control_origin`).Scan(&c.origin); err != nil {
				return Version{}, fmt.Errorf("read control origin: %w", err)
			}
		}
		node = c.origin
	}
	return c.clock.next(millis(s.now()), floor, node), nil
}

// hlc is a hybrid logical clock: a timestamp that follows the wall clock
// but never goes back, and moves past every version it witnesses.
type hlc struct {
	wall    int64
	logical uint32
}

// witness moves the clock up to v's timestamp.
func (h *hlc) witness(v Version) {
	if v.Wall > h.wall || (v.Wall == h.wall && v.Logical > h.logical) {
		h.wall, h.logical = v.Wall, v.Logical
	}
}

// next returns node's version after witnessing floor, at wall time now
// (Unix milliseconds): newer than floor and every earlier result.
func (h *hlc) next(now int64, floor Version, node string) Version {
	h.witness(floor)
	if now > h.wall {
		h.wall, h.logical = now, 0
	} else {
		h.logical++
		if h.logical == 0 { // 2^32 versions in one millisecond: move on
			h.wall++
		}
	}
	return Version{Wall: h.wall, Logical: h.logical, Node: node}
}

const recordColumns = `kind, id, wall, logical, node, deleted, payload`

func scanRecord(row scanner) (Record, error) {
	var r Record
	var payload string
	if err := row.Scan(&r.Kind, &r.ID, &r.Version.Wall, &r.Version.Logical, &r.Version.Node, &r.Deleted,
		&payload); err != nil {
		return Record{}, err
	}
	r.Payload = []byte(payload)
	return r, nil
}

// readRecord returns the record of kind and id, nil when there is none.
func readRecord(ctx context.Context, q querier, kind RecordKind, id string) (*Record, error) {
	r, err := scanRecord(q.QueryRowContext(ctx, `SELECT `+recordColumns+` FROM control_records
		WHERE kind = ? AND id = ?`, kind, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &r, nil
}

func upsertRecord(ctx context.Context, tx *sql.Tx, r Record) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO control_records (`+recordColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (kind, id) DO UPDATE SET wall = excluded.wall, logical = excluded.logical,
			node = excluded.node, deleted = excluded.deleted, payload = excluded.payload`,
		r.Kind, r.ID, r.Version.Wall, r.Version.Logical, r.Version.Node, r.Deleted, string(r.Payload))
	return err
}

// putLocal records a local change of kind/id: a new version of payload.
func (s *Store) putLocal(ctx context.Context, tx *sql.Tx, recs *[]Record, kind RecordKind, id string, deleted bool,
	payload any) error {
	b, err := json.Marshal(payload)
	if err != nil {
		return err
	}
	cur, err := readRecord(ctx, tx, kind, id)
	if err != nil {
		return err
	}
	var floor Version
	if cur != nil {
		floor = cur.Version
	}
	v, err := s.stamp(ctx, tx, floor)
	if err != nil {
		return err
	}
	r := Record{Kind: kind, ID: id, Version: v, Deleted: deleted, Payload: b}
	if err := upsertRecord(ctx, tx, r); err != nil {
		return err
	}
	*recs = append(*recs, r)
	return nil
}

// recordKey records key id's current row.
func (s *Store) recordKey(ctx context.Context, tx *sql.Tx, recs *[]Record, id string) error {
	var p keyPayload
	var hash []byte
	var revoked sql.NullInt64
	err := tx.QueryRowContext(ctx, `SELECT tenant, hash, admin, name, created, revoked FROM api_keys WHERE id = ?`, id).
		Scan(&p.Tenant, &hash, &p.Admin, &p.Name, &p.Created, &revoked)
	if err != nil {
		return err
	}
	p.Hash = hex.EncodeToString(hash)
	p.Revoked = revoked.Int64
	return s.putLocal(ctx, tx, recs, RecordKey, id, false, p)
}

// recordTenant records tenant id's current row.
func (s *Store) recordTenant(ctx context.Context, tx *sql.Tx, recs *[]Record, id string) error {
	var p tenantPayload
	if err := tx.QueryRowContext(ctx, `SELECT tier, created FROM tenants WHERE id = ?`, id).
		Scan(&p.Tier, &p.Created); err != nil {
		return err
	}
	return s.putLocal(ctx, tx, recs, RecordTenant, id, false, p)
}

// recordQuota records tenant's overrides: a tombstone when there are none.
func (s *Store) recordQuota(ctx context.Context, tx *sql.Tx, recs *[]Record, tenant string, o Override) error {
	c := o.Capacity
	p := quotaPayload{RPM: o.RPM, TPM: o.TPM, Concurrency: o.Concurrency, DailyTokens: o.DailyTokens,
		HotShards: c.HotShards, UserRPM: c.UserRPM, UserTPM: c.UserTPM, ReservedTPS: c.ReservedTPS, ReservedModel: c.ReservedModel}
	return s.putLocal(ctx, tx, recs, RecordQuota, tenant, o.empty(), p)
}

// recordTier records tier's limits.
func (s *Store) recordTier(ctx context.Context, tx *sql.Tx, recs *[]Record, tier Tier, l Limits) error {
	p := tierPayload{RPM: l.RPM, TPM: l.TPM, Concurrency: l.Concurrency, DailyTokens: l.DailyTokens}
	return s.putLocal(ctx, tx, recs, RecordTier, string(tier), false, p)
}

// Records returns every control record, ordered by kind and id: the state
// to send a peer.
func (s *Store) Records(ctx context.Context) ([]Record, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+recordColumns+` FROM control_records ORDER BY kind, id`)
	if err != nil {
		return nil, fmt.Errorf("store: list records: %w", err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list records: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list records: %w", err)
	}
	return out, nil
}

// Apply merges records received from other nodes, in one transaction: a
// record newer than the one held replaces it and its table row (a key,
// quota override or tier set, a tenant), an older or equal one is ignored,
// and a key revocation is never lost (see [Record]). A key or quota of a
// tenant not known yet creates the tenant (tier paid) until the tenant's
// own record arrives. Applying is idempotent.
//
// It returns the records whose state changed here, as now held (received,
// or re-issued with a new version to keep a revocation), for the caller to
// pass on; re-issued ones are also told to OnChange's function. Invalid
// records (unknown kind, malformed id or payload) are skipped and reported
// in an error wrapping ErrInvalid, after the valid ones were applied; any
// other error means nothing was applied.
func (s *Store) Apply(ctx context.Context, recs []Record) ([]Record, error) {
	var bad []error
	valid := make([]Record, 0, len(recs))
	for _, r := range recs {
		if err := checkRecord(r); err != nil {
			bad = append(bad, err)
			continue
		}
		valid = append(valid, r)
	}
	var changed, reissued []Record
	err := s.write(ctx, func(tx *sql.Tx) error {
		changed, reissued = changed[:0], reissued[:0]
		for _, in := range valid {
			cur, err := readRecord(ctx, tx, in.Kind, in.ID)
			if err != nil {
				return err
			}
			s.control.mu.Lock()
			s.control.clock.witness(in.Version)
			s.control.mu.Unlock()
			next, act, err := resolve(cur, in)
			if err != nil {
				return err
			}
			switch act {
			case keep:
				continue
			case reissue:
				floor := in.Version
				if cur != nil && cur.Version.After(floor) {
					floor = cur.Version
				}
				if next.Version, err = s.stamp(ctx, tx, floor); err != nil {
					return err
				}
				reissued = append(reissued, next)
			}
			if err := materialize(ctx, tx, next, millis(s.now())); err != nil {
				return fmt.Errorf("%s %q: %w", next.Kind, next.ID, err)
			}
			if err := upsertRecord(ctx, tx, next); err != nil {
				return err
			}
			changed = append(changed, next)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: apply records: %w", err)
	}
	s.notify(reissued)
	if len(bad) > 0 {
		return changed, fmt.Errorf("%w: %d records skipped: %w", ErrInvalid, len(bad), errors.Join(bad...))
	}
	return changed, nil
}

// mergeAction is what resolve decides.
type mergeAction int

const (
	keep    mergeAction = iota // the held record stays
	take                       // the received record replaces it
	reissue                    // the merge of both, under a new version
)

// resolve merges received record in into cur (nil when none held), both
// valid: the newer version wins, except that a key revoked in only one of
// them stays revoked (at that revocation's time) under a new version. The new
// version is the caller's to stamp.
func resolve(cur *Record, in Record) (Record, mergeAction, error) {
	if cur == nil {
		return in, take, nil
	}
	newer := in.Version.After(cur.Version)
	if in.Kind != RecordKey {
		if newer {
			return in, take, nil
		}
		return *cur, keep, nil
	}
	var held, got keyPayload
	if err := json.Unmarshal(cur.Payload, &held); err != nil {
		return Record{}, keep, fmt.Errorf("held key record %q: %w", cur.ID, err)
	}
	if err := json.Unmarshal(in.Payload, &got); err != nil {
		return Record{}, keep, err
	}
	switch {
	case newer && held.Revoked != 0 && got.Revoked == 0:
		got.Revoked = held.Revoked
		return withPayload(in, got), reissue, nil
	case newer:
		return in, take, nil
	case got.Revoked != 0 && held.Revoked == 0:
		held.Revoked = got.Revoked
		return withPayload(*cur, held), reissue, nil
	}
	return *cur, keep, nil
}

func withPayload(r Record, p keyPayload) Record {
	b, _ := json.Marshal(p) // a struct of strings, ints and a bool
	r.Payload = b
	return r
}

// checkRecord returns an error wrapping ErrInvalid unless r is a record
// Apply can hold.
func checkRecord(r Record) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s record %q: %s", ErrInvalid, r.Kind, r.ID, fmt.Sprintf(format, args...))
	}
	v := r.Version
	if v.Wall < 0 || v.Node == "" || len(v.Node) > maxRecordNode || !utf8.ValidString(v.Node) {
		return bad("bad version")
	}
	if r.Deleted && r.Kind != RecordQuota {
		return bad("only quota records are deleted")
	}
	switch r.Kind {
	case RecordTenant:
		var p tenantPayload
		if err := checkTenantID(r.ID); err != nil {
			return bad("%v", err)
		}
		if err := json.Unmarshal(r.Payload, &p); err != nil {
			return bad("%v", err)
		}
		if err := p.Tier.check(); err != nil {
			return bad("%v", err)
		}
	case RecordKey:
		var p keyPayload
		if !wellFormedID(r.ID) {
			return bad("malformed key id")
		}
		if err := json.Unmarshal(r.Payload, &p); err != nil {
			return bad("%v", err)
		}
		if h, err := hex.DecodeString(p.Hash); err != nil || len(h) != 32 {
			return bad("hash: want 64 hex digits")
		}
		if err := checkTenantID(p.Tenant); err != nil {
			return bad("%v", err)
		}
		if err := checkKeyName(p.Name); err != nil {
			return bad("%v", err)
		}
		if p.Revoked < 0 {
			return bad("negative revocation time")
		}
	case RecordQuota:
		var p quotaPayload
		if err := checkTenantID(r.ID); err != nil {
			return bad("%v", err)
		}
		if err := json.Unmarshal(r.Payload, &p); err != nil {
			return bad("%v", err)
		}
		for _, l := range []*int64{p.RPM, p.TPM, p.Concurrency, p.DailyTokens} {
			if l != nil && *l < 0 {
				return bad("negative limit")
			}
		}
		if err := p.capacity().check(); err != nil {
			return bad("%v", err)
		}
	case RecordTier:
		var p tierPayload
		if err := Tier(r.ID).check(); err != nil {
			return bad("%v", err)
		}
		if err := json.Unmarshal(r.Payload, &p); err != nil {
			return bad("%v", err)
		}
		if p.RPM < 0 || p.TPM < 0 || p.Concurrency < 0 || p.DailyTokens < 0 {
			return bad("negative limit")
		}
	default:
		return fmt.Errorf("%w: unknown record kind %q", ErrInvalid, r.Kind)
	}
	return nil
}

// materialize writes a valid record's state into its table; now is the
// creation time of a tenant made for a key or quota that arrived first.
func materialize(ctx context.Context, tx *sql.Tx, r Record, now int64) error {
	placeholder := func(tenant string) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO tenants (id, tier, created) VALUES (?, ?, ?)
			ON CONFLICT (id) DO NOTHING`, tenant, TierPaid, now)
		return err
	}
	var err error
	switch r.Kind {
	case RecordTenant:
		var p tenantPayload
		_ = json.Unmarshal(r.Payload, &p) // checked
		_, err = tx.ExecContext(ctx, `INSERT INTO tenants (id, tier, created) VALUES (?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET tier = excluded.tier, created = excluded.created`, r.ID, p.Tier, p.Created)
	case RecordKey:
		var p keyPayload
		_ = json.Unmarshal(r.Payload, &p)
		hash, _ := hex.DecodeString(p.Hash)
		revoked := sql.NullInt64{Int64: p.Revoked, Valid: p.Revoked != 0}
		if err = placeholder(p.Tenant); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO api_keys (id, tenant, hash, admin, name, created, revoked)
			VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET tenant = excluded.tenant, hash = excluded.hash, admin = excluded.admin,
				name = excluded.name, created = excluded.created, revoked = excluded.revoked`,
			r.ID, p.Tenant, hash, p.Admin, p.Name, p.Created, revoked)
	case RecordQuota:
		var p quotaPayload
		_ = json.Unmarshal(r.Payload, &p)
		if err = placeholder(r.ID); err != nil {
			return err
		}
		if r.Deleted {
			_, err = tx.ExecContext(ctx, `DELETE FROM tenant_quotas WHERE tenant = ?`, r.ID)
			break
		}
		err = writeOverride(ctx, tx, r.ID, Override{RPM: p.RPM, TPM: p.TPM, Concurrency: p.Concurrency,
			DailyTokens: p.DailyTokens, Capacity: p.capacity()})
	case RecordTier:
		var p tierPayload
		_ = json.Unmarshal(r.Payload, &p)
		_, err = tx.ExecContext(ctx, `UPDATE tier_quotas SET rpm = ?, tpm = ?, concurrency = ?, daily_tokens = ?
			WHERE tier = ?`, p.RPM, p.TPM, p.Concurrency, p.DailyTokens, r.ID)
	}
	return err
}

// capacity is the payload's capacity settings.
func (p quotaPayload) capacity() Capacity {
	return Capacity{HotShards: p.HotShards, UserRPM: p.UserRPM, UserTPM: p.UserTPM, ReservedTPS: p.ReservedTPS,
		ReservedModel: p.ReservedModel}
}
