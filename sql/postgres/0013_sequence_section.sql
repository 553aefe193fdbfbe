-- segmint schema, version 13: sequence sections. A sequence biz's keys are grouped in
-- sections; each section has one row per database holding its bound (every number
-- answered for its keys is at or below it) and the lease of the server that owns it.
-- Rows are written only by compare-and-set on version (segmint_core::sequence::claim).
CREATE TABLE IF NOT EXISTS segmint_sequence_section (
    biz_type    varchar(63)  NOT NULL,
    section     integer      NOT NULL CHECK (section >= 0),
    -- The server that owns (or last owned) the section: host, process ID, random tag.
    holder      varchar(200) NOT NULL,
    -- Grows with every write: the compare-and-set of the row.
    version     bigint       NOT NULL CHECK (version > 0),
    -- Every number answered for the section's keys is at or below it.
    bound       bigint       NOT NULL,
    -- When the holder's lease runs out, by this database's clock (Unix milliseconds).
    expires_ms  bigint       NOT NULL,
    update_time timestamptz  NOT NULL DEFAULT now(),
    PRIMARY KEY (biz_type, section)
);
