-- A tenant's capacity settings beside its limits (issue 25 items 5 and 6):
-- hot_shards splits its Redis buckets into that many sub-buckets (0 or 1:
-- one bucket); user_rpm and user_tpm limit each of its end users (0: no
-- per-user limit); reserved_tps is output tokens per second the engine's
-- scheduler keeps for it on reserved_model ('' every model).
ALTER TABLE tenant_quotas ADD COLUMN hot_shards INTEGER NOT NULL DEFAULT 0 CHECK (hot_shards >= 0);
ALTER TABLE tenant_quotas ADD COLUMN user_rpm INTEGER NOT NULL DEFAULT 0 CHECK (user_rpm >= 0);
ALTER TABLE tenant_quotas ADD COLUMN user_tpm INTEGER NOT NULL DEFAULT 0 CHECK (user_tpm >= 0);
ALTER TABLE tenant_quotas ADD COLUMN reserved_tps REAL NOT NULL DEFAULT 0 CHECK (reserved_tps >= 0);
ALTER TABLE tenant_quotas ADD COLUMN reserved_model TEXT NOT NULL DEFAULT '';
