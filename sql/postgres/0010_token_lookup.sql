-- segmint schema, version 10: an index on the token hash as segmint looks it up.
--
-- A token is found by its hash in either case (`lower(token) = $1`): when a use is
-- recorded, and when a token is revoked or expires. Without an index on that expression
-- each lookup read every token row: a quarter of a second at a million tokens, for each
-- token used since the last write of uses.
CREATE INDEX IF NOT EXISTS tiny_id_token_lower ON tiny_id_token (lower(token));
