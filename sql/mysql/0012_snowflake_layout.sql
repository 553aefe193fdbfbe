-- segmint schema, version 12: the snowflake spec (epoch and bit layout) every server of
-- the cluster issues with, written once by the first server to lease a worker ID and
-- never changed but for `confirmed`, set once: a server with another spec never leases
-- (crates/core/src/snowflake/agreement.rs).
CREATE TABLE IF NOT EXISTS segmint_snowflake (
  id          tinyint      NOT NULL PRIMARY KEY CHECK (id = 1),
  spec        varchar(200) NOT NULL,
  confirmed   boolean      NOT NULL DEFAULT false,
  recorded_at timestamp    NOT NULL DEFAULT CURRENT_TIMESTAMP
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
