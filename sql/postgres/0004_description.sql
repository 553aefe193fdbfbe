-- segmint schema, version 4: a description per biz, where Leaf's `leaf_alloc` keeps
-- one (`segmint import leaf` copies it). Tinyid's rows have none: empty by default.
ALTER TABLE tiny_id_info
    ADD COLUMN IF NOT EXISTS description varchar(256) NOT NULL DEFAULT '';
