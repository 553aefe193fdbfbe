-- segmint schema, version 8: which layout change last wrote a biz row.
--
-- A layout change writes each row it freezes or switches with its own epoch here, and
-- never writes a row that a later change (a higher epoch) wrote: a command that was
-- superseded while it ran (paused, or slow) can then no longer move a biz back. 0: no
-- change has written the row.
ALTER TABLE tiny_id_info
    ADD COLUMN IF NOT EXISTS claimed_by bigint NOT NULL DEFAULT 0;
