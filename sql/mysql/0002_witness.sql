-- How far other databases' rows advanced, as this database last heard.
CREATE TABLE IF NOT EXISTS segmint_witness (
  `database`  varchar(255) NOT NULL,
  biz_type    varchar(63)  NOT NULL,
  version     bigint       NOT NULL,
  max_id      bigint       NOT NULL,
  high_id     bigint       NOT NULL,
  update_time timestamp    NOT NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (`database`, biz_type)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
