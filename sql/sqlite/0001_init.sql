-- segmint schema for embedded (SQLite) databases, version 1: the same tables and
-- columns as on PostgreSQL (sql/postgres/0001_init.sql), with SQLite's types.

CREATE TABLE IF NOT EXISTS tiny_id_info (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    biz_type    TEXT    NOT NULL UNIQUE,
    begin_id    INTEGER NOT NULL DEFAULT 0,
    max_id      INTEGER NOT NULL DEFAULT 0,
    step        INTEGER NOT NULL CHECK (step > 0),
    delta       INTEGER NOT NULL DEFAULT 1 CHECK (delta > 0),
    remainder   INTEGER NOT NULL DEFAULT 0 CHECK (remainder >= 0 AND remainder < delta),
    create_time TEXT    NOT NULL DEFAULT CURRENT_TIMESTAMP,
    update_time TEXT    NOT NULL DEFAULT CURRENT_TIMESTAMP,
    version     INTEGER NOT NULL DEFAULT 0
) STRICT;

-- `token` holds the SHA-256 (hex) of the token, never the token itself.
CREATE TABLE IF NOT EXISTS tiny_id_token (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    token       TEXT    NOT NULL,
    biz_type    TEXT    NOT NULL,
    remark      TEXT    NOT NULL DEFAULT '',
    create_time TEXT    NOT NULL DEFAULT CURRENT_TIMESTAMP,
    update_time TEXT    NOT NULL DEFAULT CURRENT_TIMESTAMP,
    UNIQUE (token, biz_type)
) STRICT;
