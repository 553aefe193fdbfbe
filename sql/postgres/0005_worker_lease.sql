-- segmint schema, version 5: snowflake worker-ID leases. A database leases only the
-- worker IDs of its own residue class (worker_id % delta = remainder), so two databases
-- never lease the same one. Times are Unix milliseconds; expires_ms is by this
-- database's clock, last_ms and bound_ms by the holder's.
CREATE TABLE IF NOT EXISTS segmint_worker_lease (
    worker_id   integer      PRIMARY KEY CHECK (worker_id BETWEEN 0 AND 1023),
    -- Who holds (or last held) the lease: host, process ID and a random tag.
    holder      varchar(200) NOT NULL,
    -- Grows with every take, renewal and release: the compare-and-set of the lease.
    version     bigint       NOT NULL,
    -- When the lease runs out, by this database's clock; free a grace period later.
    expires_ms  bigint       NOT NULL,
    -- The last timestamp the holder had issued at its last renewal.
    last_ms     bigint       NOT NULL,
    -- The highest timestamp the holder may issue: a new holder issues only above it.
    bound_ms    bigint       NOT NULL,
    update_time timestamptz  NOT NULL DEFAULT now()
);
