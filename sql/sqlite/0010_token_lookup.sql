-- segmint schema, version 10: an index on the token hash as segmint looks it up (see
-- the PostgreSQL migration of the same number).
CREATE INDEX IF NOT EXISTS tiny_id_token_lower ON tiny_id_token (lower(token));
