-- The usage ledger: one row per request, keyed by its request id, written
-- by the usage writer (store/usage.go). A row is written as 'in_flight' at
-- admission and replaced once by the request's final event; later events
-- for the same id are ignored. No foreign key to tenants: the ledger keeps
-- the rows of a tenant deleted later.
-- Times are Unix milliseconds; durations are milliseconds (REAL); ended is
-- NULL while in flight. Keep the statuses in step with store/usage.go.

CREATE TABLE usage_events (
	request_id    TEXT    PRIMARY KEY,
	tenant        TEXT    NOT NULL,
	key_id        TEXT    NOT NULL,
	model         TEXT    NOT NULL,
	tier          TEXT    NOT NULL,
	node          TEXT    NOT NULL,
	endpoint      TEXT    NOT NULL,
	status        TEXT    NOT NULL CHECK (status IN
		('in_flight', 'finished', 'cancelled', 'error', 'rejected', 'interrupted')),
	finish_reason TEXT    NOT NULL,
	reason        TEXT    NOT NULL,
	input_tokens  INTEGER NOT NULL CHECK (input_tokens >= 0),
	cached_tokens INTEGER NOT NULL CHECK (cached_tokens >= 0),
	output_tokens INTEGER NOT NULL CHECK (output_tokens >= 0),
	queue_ms      REAL    NOT NULL,
	ttft_ms       REAL    NOT NULL,
	itl_ms        REAL    NOT NULL,
	duration_ms   REAL    NOT NULL,
	route         TEXT    NOT NULL,
	started       INTEGER NOT NULL,
	ended         INTEGER
);

-- The report selects by time, or by tenant and time.
CREATE INDEX usage_events_started ON usage_events (started);
CREATE INDEX usage_events_tenant_started ON usage_events (tenant, started);
-- Recovery finds a node's rows still in flight; the index holds only those.
CREATE INDEX usage_events_in_flight ON usage_events (node) WHERE status = 'in_flight';
