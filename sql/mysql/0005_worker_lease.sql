-- Snowflake worker-ID leases, timed by the database's clock.
CREATE TABLE IF NOT EXISTS segmint_worker_lease (
  worker_id   int          NOT NULL PRIMARY KEY CHECK (worker_id BETWEEN 0 AND 1023),
  holder      varchar(255) NOT NULL,
  version     bigint       NOT NULL,
  expires_ms  bigint       NOT NULL,
  last_ms     bigint       NOT NULL,
  bound_ms    bigint       NOT NULL,
  update_time timestamp    NOT NULL DEFAULT CURRENT_TIMESTAMP
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
