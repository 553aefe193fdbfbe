-- segmint schema for embedded (SQLite) databases, version 5: snowflake worker-ID
-- leases, as on PostgreSQL (sql/postgres/0005_worker_lease.sql).
CREATE TABLE IF NOT EXISTS segmint_worker_lease (
    worker_id   INTEGER PRIMARY KEY CHECK (worker_id BETWEEN 0 AND 1023),
    holder      TEXT    NOT NULL,
    version     INTEGER NOT NULL,
    expires_ms  INTEGER NOT NULL,
    last_ms     INTEGER NOT NULL,
    bound_ms    INTEGER NOT NULL,
    update_time TEXT    NOT NULL DEFAULT CURRENT_TIMESTAMP
) STRICT;
