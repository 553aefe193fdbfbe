-- segmint schema on a Leaf database, version 1: Leaf's own `leaf_alloc`, exactly as
-- Leaf's README creates it, served in place beside Leaf servers. On a database that
-- holds it already, segmint only adds columns Leaf's statements never name.
CREATE TABLE IF NOT EXISTS `leaf_alloc` (
  `biz_tag` varchar(128) NOT NULL DEFAULT '',
  `max_id` bigint(20) NOT NULL DEFAULT '1',
  `step` int(11) NOT NULL,
  `description` varchar(256) DEFAULT NULL,
  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (`biz_tag`)
) ENGINE=InnoDB;

-- segmint's version of a row, and its residue class (Leaf's rows issue every ID).
ALTER TABLE leaf_alloc ADD COLUMN IF NOT EXISTS segmint_version bigint NOT NULL DEFAULT 0;
ALTER TABLE leaf_alloc ADD COLUMN IF NOT EXISTS delta bigint NOT NULL DEFAULT 1;
ALTER TABLE leaf_alloc ADD COLUMN IF NOT EXISTS remainder bigint NOT NULL DEFAULT 0;

-- Leaf reserves with `UPDATE leaf_alloc SET max_id = max_id + step`, which leaves
-- segmint_version alone: this moves it on, so that a row never holds two max_ids at
-- one version (segmint takes that for a row rewritten behind its back).
CREATE TRIGGER IF NOT EXISTS segmint_leaf_version BEFORE UPDATE ON leaf_alloc FOR EACH ROW
  SET NEW.segmint_version = IF(NEW.max_id <> OLD.max_id AND NEW.segmint_version = OLD.segmint_version,
                               OLD.segmint_version + 1, NEW.segmint_version);

-- segmint's tokens (Leaf has none), in Tinyid's table as on a Tinyid database.
CREATE TABLE IF NOT EXISTS `tiny_id_token` (
  `id` int(11) unsigned NOT NULL AUTO_INCREMENT,
  `token` varchar(255) NOT NULL DEFAULT '',
  `biz_type` varchar(63) NOT NULL DEFAULT '',
  `remark` varchar(255) NOT NULL DEFAULT '',
  `create_time` timestamp NOT NULL DEFAULT '2010-01-01 00:00:00',
  `update_time` timestamp NOT NULL DEFAULT '2010-01-01 00:00:00',
  PRIMARY KEY (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8;
