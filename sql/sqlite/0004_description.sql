-- segmint schema for embedded (SQLite) databases, version 4: a description per biz, as
-- on PostgreSQL (sql/postgres/0004_description.sql).
ALTER TABLE tiny_id_info ADD COLUMN description TEXT NOT NULL DEFAULT '';
