-- Expiry, revocation and last use of a token row (UTC, as segmint's sessions run).
ALTER TABLE tiny_id_token ADD COLUMN IF NOT EXISTS expire_time datetime NULL;
ALTER TABLE tiny_id_token ADD COLUMN IF NOT EXISTS revoke_time datetime NULL;
ALTER TABLE tiny_id_token ADD COLUMN IF NOT EXISTS last_used_time datetime NULL;
