-- segmint schema, version 8: which layout change last wrote a biz row (see the
-- PostgreSQL migration of the same number).
ALTER TABLE tiny_id_info ADD COLUMN claimed_by INTEGER NOT NULL DEFAULT 0;
