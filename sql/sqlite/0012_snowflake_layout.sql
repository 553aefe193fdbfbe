-- segmint schema for embedded (SQLite) databases, version 12: the snowflake spec, as on
-- PostgreSQL (sql/postgres/0012_snowflake_layout.sql).
CREATE TABLE IF NOT EXISTS segmint_snowflake (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    spec        TEXT    NOT NULL,
    confirmed   INTEGER NOT NULL DEFAULT 0,
    recorded_at TEXT    NOT NULL DEFAULT CURRENT_TIMESTAMP
) STRICT;
