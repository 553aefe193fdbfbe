-- segmint schema for embedded (SQLite) databases, version 11: a biz whose counter
-- restarts each period, as on PostgreSQL (sql/postgres/0011_biz_period.sql).
ALTER TABLE segmint_biz_shape ADD COLUMN period_spec TEXT NOT NULL DEFAULT '';
