-- segmint schema, version 11: a biz whose counter restarts each period. Empty: it
-- never restarts. Otherwise `reset;zone;start;pattern`, e.g.
-- `daily;Asia/Shanghai;1;ORD{yyyy}{MM}{dd}{seq:06}` (crates/store/src/catalog.rs reads it).
ALTER TABLE segmint_biz_shape ADD COLUMN IF NOT EXISTS period_spec varchar(128) NOT NULL DEFAULT '';
