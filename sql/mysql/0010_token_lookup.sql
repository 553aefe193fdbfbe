-- A token is looked up by its hash (lower-case hex). Tinyid keeps its tokens in plain
-- text and its servers read them so: while Tinyid servers run, a row keeps what Tinyid
-- wrote, and segmint takes the SHA-256 of a plain token as the hash it would have
-- stored. A row that holds a hash already (64 hex digits, as segmint writes) is its own.
-- Tinyid's statements name their columns, so they never see this one.
ALTER TABLE tiny_id_token ADD COLUMN IF NOT EXISTS token_hash char(64) CHARACTER SET ascii COLLATE ascii_bin
  AS (IF(token REGEXP '^[0-9a-fA-F]{64}$', LOWER(token), SHA2(token, 256))) STORED;
CREATE INDEX IF NOT EXISTS segmint_token ON tiny_id_token (token_hash);
