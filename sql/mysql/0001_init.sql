-- segmint schema on MySQL/MariaDB, version 1: Tinyid's own two tables, exactly as
-- Tinyid's db.sql creates them, so that segmint serves in place beside Tinyid servers.
-- On a database that holds them already (a Tinyid database), nothing changes here:
-- segmint adds only its own tables and columns, which Tinyid's statements never name.
CREATE TABLE IF NOT EXISTS `tiny_id_info` (
  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT,
  `biz_type` varchar(63) NOT NULL DEFAULT '',
  `begin_id` bigint(20) NOT NULL DEFAULT '0',
  `max_id` bigint(20) NOT NULL DEFAULT '0',
  `step` int(11) DEFAULT '0',
  `delta` int(11) NOT NULL DEFAULT '1',
  `remainder` int(11) NOT NULL DEFAULT '0',
  `create_time` timestamp NOT NULL DEFAULT '2010-01-01 00:00:00',
  `update_time` timestamp NOT NULL DEFAULT '2010-01-01 00:00:00',
  `version` bigint(20) NOT NULL DEFAULT '0',
  PRIMARY KEY (`id`),
  UNIQUE KEY `uniq_biz_type` (`biz_type`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8;

-- Tinyid keeps a token in plain text; segmint writes the SHA-256 (hex) of its own.
CREATE TABLE IF NOT EXISTS `tiny_id_token` (
  `id` int(11) unsigned NOT NULL AUTO_INCREMENT,
  `token` varchar(255) NOT NULL DEFAULT '',
  `biz_type` varchar(63) NOT NULL DEFAULT '',
  `remark` varchar(255) NOT NULL DEFAULT '',
  `create_time` timestamp NOT NULL DEFAULT '2010-01-01 00:00:00',
  `update_time` timestamp NOT NULL DEFAULT '2010-01-01 00:00:00',
  PRIMARY KEY (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8;
