-- The end user a request was made for: the OpenAI "user" field (a
-- client's own tag for its end user), '' when none was sent.
ALTER TABLE usage_events ADD COLUMN end_user TEXT NOT NULL DEFAULT '';
