-- segmint schema, version 7: layout epochs, for adding and removing databases while
-- servers run (`segmint db add` / `db remove`).
--
-- Each biz row records the layout epoch its class was set in, and whether it is frozen:
-- a frozen row never gives out a segment. A layout change freezes every row of a biz,
-- then moves the rows of the new layout's databases to their new classes above every
-- ID the frozen rows could have issued; rows of a removed database stay frozen.
ALTER TABLE tiny_id_info
    ADD COLUMN IF NOT EXISTS layout_epoch bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS frozen boolean NOT NULL DEFAULT false;

-- The layouts, one row per epoch, the same on every database: which databases issue
-- IDs and from which residue class. `members` is `name=delta:remainder` joined by
-- commas; `state` is `moving` while the change runs, `done` once every biz and worker
-- ID follows it, `superseded` when a later change replaced it before it was done.
CREATE TABLE IF NOT EXISTS segmint_layout (
    epoch       bigint      PRIMARY KEY,
    members     text        NOT NULL,
    state       varchar(16) NOT NULL,
    changed_ms  bigint      NOT NULL
);
