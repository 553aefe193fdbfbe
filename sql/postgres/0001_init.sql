-- segmint schema, version 1. Table and column names follow Tinyid's so that existing
-- Tinyid rows can be copied over unchanged.

-- One row per biz: the segment allocator state. A segment is reserved by advancing
-- max_id by step with a compare-and-set on version.
CREATE TABLE IF NOT EXISTS tiny_id_info (
    id          bigserial    PRIMARY KEY,
    biz_type    varchar(63)  NOT NULL UNIQUE,
    begin_id    bigint       NOT NULL DEFAULT 0,
    max_id      bigint       NOT NULL DEFAULT 0,
    step        bigint       NOT NULL CHECK (step > 0),
    delta       bigint       NOT NULL DEFAULT 1 CHECK (delta > 0),
    remainder   bigint       NOT NULL DEFAULT 0 CHECK (remainder >= 0 AND remainder < delta),
    create_time timestamptz  NOT NULL DEFAULT now(),
    update_time timestamptz  NOT NULL DEFAULT now(),
    version     bigint       NOT NULL DEFAULT 0
);

-- Which token may use which biz. `token` holds the SHA-256 (hex) of the token, never
-- the token itself.
CREATE TABLE IF NOT EXISTS tiny_id_token (
    id          bigserial    PRIMARY KEY,
    token       varchar(255) NOT NULL,
    biz_type    varchar(63)  NOT NULL,
    remark      varchar(255) NOT NULL DEFAULT '',
    create_time timestamptz  NOT NULL DEFAULT now(),
    update_time timestamptz  NOT NULL DEFAULT now(),
    UNIQUE (token, biz_type)
);
