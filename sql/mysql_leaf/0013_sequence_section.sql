-- Sequence sections: each section's bound and its owner's lease, timed by the
-- database's clock (as sql/postgres/0013_sequence_section.sql).
CREATE TABLE IF NOT EXISTS segmint_sequence_section (
  biz_type    varchar(63)  NOT NULL,
  section     int          NOT NULL CHECK (section >= 0),
  holder      varchar(255) NOT NULL,
  version     bigint       NOT NULL CHECK (version > 0),
  bound       bigint       NOT NULL,
  expires_ms  bigint       NOT NULL,
  update_time timestamp    NOT NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (biz_type, section)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
