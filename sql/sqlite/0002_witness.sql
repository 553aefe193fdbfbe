-- segmint schema for embedded (SQLite) databases, version 2: witnesses, as on
-- PostgreSQL (sql/postgres/0002_witness.sql).
CREATE TABLE IF NOT EXISTS segmint_witness (
    database    TEXT    NOT NULL,
    biz_type    TEXT    NOT NULL,
    version     INTEGER NOT NULL,
    max_id      INTEGER NOT NULL,
    high_id     INTEGER NOT NULL,
    update_time TEXT    NOT NULL DEFAULT CURRENT_TIMESTAMP,
    PRIMARY KEY (database, biz_type)
) STRICT;
