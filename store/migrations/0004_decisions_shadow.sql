-- The model-choice decision and the safety verdict of a request, '' when
-- there was none (rows written before this migration read as ''). Both
-- are free text: decision is router/rule ('auto/short-chat') or
-- alias/variant ('flagship/canary'); safety is the safety check's verdict
-- ('flag:self_harm', 'block:violence', 'fail_open').
ALTER TABLE usage_events ADD COLUMN decision TEXT NOT NULL DEFAULT '';
ALTER TABLE usage_events ADD COLUMN safety TEXT NOT NULL DEFAULT '';

-- Shadow traffic: one row per request copied to a shadow model, comparing
-- the shadow's answer (discarded, never billed) with the primary's. Written
-- by store/shadow.go; keep the statuses in step with it.
-- started is Unix milliseconds; durations are milliseconds (REAL), 0 when
-- not measured. exact_match and edit_distance (token-level Levenshtein)
-- are NULL unless both answers were decoded greedily (greedy = 1) and
-- compared; score is NULL without a scorer or when it failed
-- (scorer_error says why).
CREATE TABLE shadow_results (
	id                  INTEGER PRIMARY KEY,
	request_id          TEXT    NOT NULL,
	alias               TEXT    NOT NULL,
	primary_model       TEXT    NOT NULL,
	shadow_model        TEXT    NOT NULL,
	started             INTEGER NOT NULL,
	primary_status      TEXT    NOT NULL CHECK (primary_status IN
		('finished', 'error', 'cancelled', 'skipped')),
	shadow_status       TEXT    NOT NULL CHECK (shadow_status IN
		('finished', 'error', 'cancelled', 'skipped')),
	primary_ttft_ms     REAL    NOT NULL,
	shadow_ttft_ms      REAL    NOT NULL,
	primary_itl_ms      REAL    NOT NULL,
	shadow_itl_ms       REAL    NOT NULL,
	primary_duration_ms REAL    NOT NULL,
	shadow_duration_ms  REAL    NOT NULL,
	primary_tokens      INTEGER NOT NULL CHECK (primary_tokens >= 0),
	shadow_tokens       INTEGER NOT NULL CHECK (shadow_tokens >= 0),
	greedy              INTEGER NOT NULL CHECK (greedy IN (0, 1)),
	exact_match         INTEGER CHECK (exact_match IN (0, 1)),
	edit_distance       INTEGER CHECK (edit_distance >= 0),
	score               REAL,
	scorer_error        TEXT    NOT NULL DEFAULT ''
);

-- The report selects by alias and time, or by time.
CREATE INDEX shadow_results_alias_started ON shadow_results (alias, started);
CREATE INDEX shadow_results_started ON shadow_results (started);
