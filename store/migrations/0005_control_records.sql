-- Replicated control state (store/records.go): the version of every
-- tenant, API key, tenant quota override and tier limit set, so that a
-- cluster's nodes converge on the same control state. A version is a
-- hybrid logical clock timestamp (wall: Unix milliseconds, logical: a
-- counter) and the node that made it, compared in that order. payload is
-- the record's JSON (see the payload types in records.go); deleted marks a
-- tombstone (a tenant's quota override removed).
CREATE TABLE control_records (
	kind    TEXT    NOT NULL CHECK (kind IN ('tenant', 'key', 'quota', 'tier')),
	id      TEXT    NOT NULL,
	wall    INTEGER NOT NULL CHECK (wall >= 0),
	logical INTEGER NOT NULL CHECK (logical >= 0),
	node    TEXT    NOT NULL,
	deleted INTEGER NOT NULL CHECK (deleted IN (0, 1)),
	payload TEXT    NOT NULL,
	PRIMARY KEY (kind, id)
);

-- The name of this database as the origin of versions made without a node
-- id (offline llmctl --data-dir): random, so that two databases never
-- make equal versions.
CREATE TABLE control_origin (id TEXT NOT NULL);
INSERT INTO control_origin (id) VALUES ('db-' || lower(hex(randomblob(6))));

-- What existed before this migration becomes records of this database,
-- versioned at its creation (quotas: now). The seeded rows (the tier
-- defaults, the local tenant and its override) are the same on every node
-- and are not backfilled; a later change to them makes a record.
INSERT INTO control_records (kind, id, wall, logical, node, deleted, payload)
	SELECT 'tenant', id, created, 0, (SELECT id FROM control_origin), 0,
		json_object('tier', tier, 'created', created)
	FROM tenants WHERE id <> 'local';
INSERT INTO control_records (kind, id, wall, logical, node, deleted, payload)
	SELECT 'key', id, created, 0, (SELECT id FROM control_origin), 0,
		json_object('tenant', tenant, 'hash', lower(hex(hash)),
			'admin', json(CASE admin WHEN 1 THEN 'true' ELSE 'false' END),
			'name', name, 'created', created, 'revoked', coalesce(revoked, 0))
	FROM api_keys;
INSERT INTO control_records (kind, id, wall, logical, node, deleted, payload)
	SELECT 'quota', tenant, CAST(unixepoch('subsec') * 1000 AS INTEGER), 0, (SELECT id FROM control_origin), 0,
		json_object('rpm', rpm, 'tpm', tpm, 'concurrency', concurrency, 'daily_tokens', daily_tokens)
	FROM tenant_quotas WHERE tenant <> 'local';
