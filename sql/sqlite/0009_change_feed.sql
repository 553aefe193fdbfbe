-- segmint schema, version 9: a change feed, so that a catalog refresh reads only the
-- rows written since the last one (see the PostgreSQL migration of the same number).
--
-- SQLite runs one write transaction at a time, so one counter serves: every insert or
-- update of a catalog row advances it and records its value in the row. A refresh reads
-- the counter and the rows in one snapshot; every row written afterwards carries a
-- higher value. `incarnation` tells this file from another, and the counter going back
-- tells a file restored from a copy: both mean a full read. A deletion (segmint never
-- deletes; an operator may) leaves no row to read: it counts in `deletions`, and a reader
-- that sees the count move reads every row.
CREATE TABLE IF NOT EXISTS segmint_change (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    n           INTEGER NOT NULL,
    incarnation TEXT    NOT NULL,
    deletions   INTEGER NOT NULL DEFAULT 0
) STRICT;
INSERT OR IGNORE INTO segmint_change (id, n, incarnation) VALUES (1, 0, lower(hex(randomblob(8))));

ALTER TABLE tiny_id_info ADD COLUMN change_n INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tiny_id_token ADD COLUMN change_n INTEGER NOT NULL DEFAULT 0;
ALTER TABLE segmint_witness ADD COLUMN change_n INTEGER NOT NULL DEFAULT 0;
ALTER TABLE segmint_biz_shape ADD COLUMN change_n INTEGER NOT NULL DEFAULT 0;

CREATE INDEX IF NOT EXISTS tiny_id_info_change ON tiny_id_info (change_n);
CREATE INDEX IF NOT EXISTS tiny_id_token_change ON tiny_id_token (change_n);
CREATE INDEX IF NOT EXISTS segmint_witness_change ON segmint_witness (change_n);
CREATE INDEX IF NOT EXISTS segmint_biz_shape_change ON segmint_biz_shape (change_n);

-- The inner UPDATE changes `change_n`, so its own trigger's WHEN is false: no recursion.
CREATE TRIGGER IF NOT EXISTS tiny_id_info_inserted AFTER INSERT ON tiny_id_info BEGIN
    UPDATE segmint_change SET n = n + 1 WHERE id = 1;
    UPDATE tiny_id_info SET change_n = (SELECT n FROM segmint_change WHERE id = 1) WHERE rowid = NEW.rowid;
END;
CREATE TRIGGER IF NOT EXISTS tiny_id_info_updated AFTER UPDATE ON tiny_id_info
    WHEN NEW.change_n = OLD.change_n BEGIN
    UPDATE segmint_change SET n = n + 1 WHERE id = 1;
    UPDATE tiny_id_info SET change_n = (SELECT n FROM segmint_change WHERE id = 1) WHERE rowid = NEW.rowid;
END;
CREATE TRIGGER IF NOT EXISTS tiny_id_token_inserted AFTER INSERT ON tiny_id_token BEGIN
    UPDATE segmint_change SET n = n + 1 WHERE id = 1;
    UPDATE tiny_id_token SET change_n = (SELECT n FROM segmint_change WHERE id = 1) WHERE rowid = NEW.rowid;
END;
CREATE TRIGGER IF NOT EXISTS tiny_id_token_updated AFTER UPDATE ON tiny_id_token
    WHEN NEW.change_n = OLD.change_n BEGIN
    UPDATE segmint_change SET n = n + 1 WHERE id = 1;
    UPDATE tiny_id_token SET change_n = (SELECT n FROM segmint_change WHERE id = 1) WHERE rowid = NEW.rowid;
END;
CREATE TRIGGER IF NOT EXISTS segmint_witness_inserted AFTER INSERT ON segmint_witness BEGIN
    UPDATE segmint_change SET n = n + 1 WHERE id = 1;
    UPDATE segmint_witness SET change_n = (SELECT n FROM segmint_change WHERE id = 1) WHERE rowid = NEW.rowid;
END;
CREATE TRIGGER IF NOT EXISTS segmint_witness_updated AFTER UPDATE ON segmint_witness
    WHEN NEW.change_n = OLD.change_n BEGIN
    UPDATE segmint_change SET n = n + 1 WHERE id = 1;
    UPDATE segmint_witness SET change_n = (SELECT n FROM segmint_change WHERE id = 1) WHERE rowid = NEW.rowid;
END;
CREATE TRIGGER IF NOT EXISTS segmint_biz_shape_inserted AFTER INSERT ON segmint_biz_shape BEGIN
    UPDATE segmint_change SET n = n + 1 WHERE id = 1;
    UPDATE segmint_biz_shape SET change_n = (SELECT n FROM segmint_change WHERE id = 1) WHERE rowid = NEW.rowid;
END;
CREATE TRIGGER IF NOT EXISTS segmint_biz_shape_updated AFTER UPDATE ON segmint_biz_shape
    WHEN NEW.change_n = OLD.change_n BEGIN
    UPDATE segmint_change SET n = n + 1 WHERE id = 1;
    UPDATE segmint_biz_shape SET change_n = (SELECT n FROM segmint_change WHERE id = 1) WHERE rowid = NEW.rowid;
END;
CREATE TRIGGER IF NOT EXISTS tiny_id_info_deleted AFTER DELETE ON tiny_id_info BEGIN
    UPDATE segmint_change SET deletions = deletions + 1 WHERE id = 1;
END;
CREATE TRIGGER IF NOT EXISTS tiny_id_token_deleted AFTER DELETE ON tiny_id_token BEGIN
    UPDATE segmint_change SET deletions = deletions + 1 WHERE id = 1;
END;
CREATE TRIGGER IF NOT EXISTS segmint_witness_deleted AFTER DELETE ON segmint_witness BEGIN
    UPDATE segmint_change SET deletions = deletions + 1 WHERE id = 1;
END;
CREATE TRIGGER IF NOT EXISTS segmint_biz_shape_deleted AFTER DELETE ON segmint_biz_shape BEGIN
    UPDATE segmint_change SET deletions = deletions + 1 WHERE id = 1;
END;
