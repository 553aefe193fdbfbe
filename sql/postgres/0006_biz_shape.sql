-- segmint schema, version 6: how a biz's IDs look. A biz without a row here is
-- sequential and plain. The row is the same on every database (segmint refuses a biz
-- whose rows differ) and is written before the biz's rows, so that no server ever
-- issues a biz's IDs without knowing their order.
CREATE TABLE IF NOT EXISTS segmint_biz_shape (
    biz_type         varchar(63) PRIMARY KEY,
    -- sequential, shuffled or opaque.
    id_order         varchar(16) NOT NULL,
    -- shuffled: indexes per block (the biz's step over its restriction's modulus).
    block            bigint      NOT NULL,
    -- opaque: every ID is below this.
    domain           bigint      NOT NULL,
    -- The biz's own restriction (1 mod 2 for odd-only; 1 and 0 for none).
    within_delta     bigint      NOT NULL,
    within_remainder bigint      NOT NULL,
    -- The 128-bit key of the order, hex. A leak makes the order predictable; it never
    -- makes two IDs equal.
    shape_key        varchar(32) NOT NULL,
    prefix           varchar(16) NOT NULL,
    width            integer     NOT NULL,
    base             integer     NOT NULL,
    check_char       boolean     NOT NULL,
    -- Whether the v1 API writes the IDs as JSON strings.
    as_string        boolean     NOT NULL
);
