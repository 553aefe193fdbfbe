-- segmint schema, version 2: witnesses. Each database records how far the biz rows of
-- the *other* databases have advanced, so that a database that goes back in time (a
-- restore from backup, a promoted asynchronous replica) is caught by any server, also
-- one started after the regression. Written by segmint after every reservation, before
-- the reserved segment is used.
CREATE TABLE IF NOT EXISTS segmint_witness (
    -- The configured name of the database whose row is witnessed.
    database    varchar(63)  NOT NULL,
    biz_type    varchar(63)  NOT NULL,
    -- The highest version seen of that row, and its max_id at that version.
    version     bigint       NOT NULL,
    max_id      bigint       NOT NULL,
    -- The highest max_id ever seen of that row (give-back lowers max_id): no ID above
    -- it was reserved from the row.
    high_id     bigint       NOT NULL,
    update_time timestamptz  NOT NULL DEFAULT now(),
    PRIMARY KEY (database, biz_type)
);
