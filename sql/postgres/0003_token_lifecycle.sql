-- segmint schema, version 3: the token lifecycle. Added columns only, all nullable, so
-- that Tinyid's rows (which have none of them) still copy over unchanged.
ALTER TABLE tiny_id_token
    -- After this time the token is refused (NULL: never expires). Only ever lowered.
    ADD COLUMN IF NOT EXISTS expire_time    timestamptz,
    -- When the token was revoked (NULL: not revoked). A token revoked on any database
    -- is revoked on all of them.
    ADD COLUMN IF NOT EXISTS revoke_time    timestamptz,
    -- When a server last saw the token in use, approximately (written about once a
    -- minute, off the request path). Only ever moves forward.
    ADD COLUMN IF NOT EXISTS last_used_time timestamptz;
