-- segmint schema for embedded (SQLite) databases, version 13: sequence sections, as on
-- PostgreSQL (sql/postgres/0013_sequence_section.sql).
CREATE TABLE IF NOT EXISTS segmint_sequence_section (
    biz_type    TEXT    NOT NULL,
    section     INTEGER NOT NULL CHECK (section >= 0),
    holder      TEXT    NOT NULL,
    version     INTEGER NOT NULL CHECK (version > 0),
    bound       INTEGER NOT NULL,
    expires_ms  INTEGER NOT NULL,
    update_time TEXT    NOT NULL DEFAULT CURRENT_TIMESTAMP,
    PRIMARY KEY (biz_type, section)
) STRICT;
