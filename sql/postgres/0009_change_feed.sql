-- segmint schema, version 9: a change feed, so that a catalog refresh reads only the
-- rows written since the last one.
--
-- Every insert or update of a catalog row records the ID of the transaction that wrote
-- it (64-bit, never wraps). A refresh reads, in one snapshot, the rows whose
-- `change_xid` is at or above the oldest transaction its previous snapshot could not
-- see (`pg_snapshot_xmin`): every row committed since that snapshot was written by such
-- a transaction, whatever order the writers committed in. The triggers fire for every
-- writer, segmint or not (an edit by hand included).
--
-- segmint never deletes a catalog row, but an operator may (a token deleted by hand, as
-- Tinyid's operators revoke one). A deletion leaves no row to read: it counts in
-- `segmint_feed.deletions` instead, and a reader that sees the count move reads every
-- row.
CREATE TABLE IF NOT EXISTS segmint_feed (
    id          integer PRIMARY KEY CHECK (id = 1),
    deletions   bigint  NOT NULL
);
INSERT INTO segmint_feed (id, deletions) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;

CREATE OR REPLACE FUNCTION segmint_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE segmint_feed SET deletions = deletions + 1 WHERE id = 1;
    RETURN NULL;
END
$$;
CREATE OR REPLACE FUNCTION segmint_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.change_xid := pg_current_xact_id()::text::bigint;
    RETURN NEW;
END
$$;

-- For each catalog table: the column, its index, and the triggers.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['tiny_id_info', 'tiny_id_token', 'segmint_witness', 'segmint_biz_shape'] LOOP
        EXECUTE format('ALTER TABLE %I ADD COLUMN IF NOT EXISTS change_xid bigint NOT NULL DEFAULT 0', t);
        EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON %I (change_xid)', t || '_change', t);
        EXECUTE format('CREATE OR REPLACE TRIGGER segmint_changed BEFORE INSERT OR UPDATE ON %I
                            FOR EACH ROW EXECUTE FUNCTION segmint_changed()', t);
        EXECUTE format('CREATE OR REPLACE TRIGGER segmint_deleted AFTER DELETE OR TRUNCATE ON %I
                            FOR EACH STATEMENT EXECUTE FUNCTION segmint_deleted()', t);
    END LOOP;
END
$$;
