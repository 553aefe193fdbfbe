-- segmint schema for embedded (SQLite) databases, version 7: layout epochs, as on
-- PostgreSQL (sql/postgres/0007_layout.sql).
ALTER TABLE tiny_id_info ADD COLUMN layout_epoch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tiny_id_info ADD COLUMN frozen INTEGER NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS segmint_layout (
    epoch       INTEGER PRIMARY KEY,
    members     TEXT    NOT NULL,
    state       TEXT    NOT NULL,
    changed_ms  INTEGER NOT NULL
) STRICT;
