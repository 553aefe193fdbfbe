-- How a biz's IDs are shaped (order, domain, format), one row per biz.
CREATE TABLE IF NOT EXISTS segmint_biz_shape (
  biz_type         varchar(63)  NOT NULL PRIMARY KEY,
  id_order         varchar(16)  NOT NULL,
  block            bigint       NOT NULL,
  domain           bigint       NOT NULL,
  within_delta     bigint       NOT NULL,
  within_remainder bigint       NOT NULL,
  shape_key        varchar(255) NOT NULL,
  prefix           varchar(255) NOT NULL,
  width            bigint       NOT NULL,
  base             bigint       NOT NULL,
  check_char       boolean      NOT NULL,
  as_string        boolean      NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
