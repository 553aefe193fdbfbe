ALTER TABLE leaf_alloc ADD COLUMN IF NOT EXISTS layout_epoch bigint NOT NULL DEFAULT 0;
ALTER TABLE leaf_alloc ADD COLUMN IF NOT EXISTS frozen boolean NOT NULL DEFAULT false;

CREATE TABLE IF NOT EXISTS segmint_layout (
  epoch       bigint      NOT NULL PRIMARY KEY,
  members     text        NOT NULL,
  state       varchar(16) NOT NULL,
  changed_ms  bigint      NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
