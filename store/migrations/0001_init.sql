-- Tenants, API keys and quota settings, with the default tier limits and
-- the local tenant (tier paid, every limit overridden to 0: unlimited).
-- Times are Unix milliseconds. Keep the tier names and default limits in
-- step with store/doc.go and store/tenants.go.

CREATE TABLE tenants (
	id      TEXT    PRIMARY KEY,
	tier    TEXT    NOT NULL CHECK (tier IN ('enterprise', 'paid', 'free', 'batch')),
	created INTEGER NOT NULL
);

-- id is the key's display prefix (the secret's first 12 characters); only
-- the SHA-256 of the secret is kept.
CREATE TABLE api_keys (
	id        TEXT    PRIMARY KEY,
	tenant    TEXT    NOT NULL REFERENCES tenants (id),
	hash      BLOB    NOT NULL CHECK (length(hash) = 32),
	admin     INTEGER NOT NULL CHECK (admin IN (0, 1)),
	name      TEXT    NOT NULL,
	created   INTEGER NOT NULL,
	last_used INTEGER,
	revoked   INTEGER
);
CREATE INDEX api_keys_tenant ON api_keys (tenant);

-- 0 means unlimited.
CREATE TABLE tier_quotas (
	tier         TEXT    PRIMARY KEY CHECK (tier IN ('enterprise', 'paid', 'free', 'batch')),
	rpm          INTEGER NOT NULL CHECK (rpm >= 0),
	tpm          INTEGER NOT NULL CHECK (tpm >= 0),
	concurrency  INTEGER NOT NULL CHECK (concurrency >= 0),
	daily_tokens INTEGER NOT NULL CHECK (daily_tokens >= 0)
);
INSERT INTO tier_quotas (tier, rpm, tpm, concurrency, daily_tokens) VALUES
	('enterprise',   0,       0,  0, 0),
	('paid',       600, 2000000, 64, 0),
	('free',        60,  200000,  8, 0),
	('batch',      120, 2000000, 16, 0);

-- A tenant's overrides; NULL inherits the tier's limit, 0 is unlimited.
CREATE TABLE tenant_quotas (
	tenant       TEXT    PRIMARY KEY REFERENCES tenants (id),
	rpm          INTEGER CHECK (rpm >= 0),
	tpm          INTEGER CHECK (tpm >= 0),
	concurrency  INTEGER CHECK (concurrency >= 0),
	daily_tokens INTEGER CHECK (daily_tokens >= 0)
);

INSERT INTO tenants (id, tier, created)
	VALUES ('local', 'paid', CAST(unixepoch('subsec') * 1000 AS INTEGER));
INSERT INTO tenant_quotas (tenant, rpm, tpm, concurrency, daily_tokens)
	VALUES ('local', 0, 0, 0, 0);
