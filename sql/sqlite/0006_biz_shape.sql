-- segmint schema for embedded (SQLite) databases, version 6: how a biz's IDs look, as
-- on PostgreSQL (sql/postgres/0006_biz_shape.sql).
CREATE TABLE IF NOT EXISTS segmint_biz_shape (
    biz_type         TEXT    PRIMARY KEY,
    id_order         TEXT    NOT NULL,
    block            INTEGER NOT NULL,
    domain           INTEGER NOT NULL,
    within_delta     INTEGER NOT NULL,
    within_remainder INTEGER NOT NULL,
    shape_key        TEXT    NOT NULL,
    prefix           TEXT    NOT NULL,
    width            INTEGER NOT NULL,
    base             INTEGER NOT NULL,
    check_char       INTEGER NOT NULL,
    as_string        INTEGER NOT NULL
) STRICT;
