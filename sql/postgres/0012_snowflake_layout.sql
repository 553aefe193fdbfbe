-- segmint schema, version 12: the snowflake spec (epoch and bit layout) every server of
-- the cluster issues with, written once by the first server to lease a worker ID and
-- never changed but for `confirmed`, set once: a server with another spec never leases
-- (crates/core/src/snowflake/agreement.rs).
CREATE TABLE IF NOT EXISTS segmint_snowflake (
    id          smallint     PRIMARY KEY CHECK (id = 1),
    -- `epoch_ms=… unit_ms=… timestamp_bits=… worker_bits=… sequence_bits=…`
    spec        varchar(200) NOT NULL,
    -- Set once a server read every database of the layout holding this spec: a server
    -- that cannot read them all may then lease on it.
    confirmed   boolean      NOT NULL DEFAULT false,
    recorded_at timestamptz  NOT NULL DEFAULT now()
);
