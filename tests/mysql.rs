//! The MySQL engine in place on Tinyid's own tables: a MariaDB database made by Tinyid's
//! `db.sql`, migrated by segmint, served by a segmint server while Tinyid's own
//! statements (run here as Tinyid's server runs them) reserve segments of the same rows.

use crate::common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use mysql_async::prelude::Queryable;

/// Tinyid's `db.sql` (its two tables and its sample rows), as Tinyid ships it: `test`,
/// and `test_odd`, a biz of odd IDs only.
const TINYID_DB_SQL: &str = "
CREATE TABLE `tiny_id_info` (
  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT COMMENT '自增主键',
  `biz_type` varchar(63) NOT NULL DEFAULT '' COMMENT '业务类型，唯一',
  `begin_id` bigint(20) NOT NULL DEFAULT '0' COMMENT '开始id，仅记录初始值，无其他含义。初始化时begin_id和max_id应相同',
  `max_id` bigint(20) NOT NULL DEFAULT '0' COMMENT '当前最大id',
  `step` int(11) DEFAULT '0' COMMENT '步长',
  `delta` int(11) NOT NULL DEFAULT '1' COMMENT '每次id增量',
  `remainder` int(11) NOT NULL DEFAULT '0' COMMENT '余数',
  `create_time` timestamp NOT NULL DEFAULT '2010-01-01 00:00:00' COMMENT '创建时间',
  `update_time` timestamp NOT NULL DEFAULT '2010-01-01 00:00:00' COMMENT '更新时间',
  `version` bigint(20) NOT NULL DEFAULT '0' COMMENT '版本号',
  PRIMARY KEY (`id`),
  UNIQUE KEY `uniq_biz_type` (`biz_type`)
) ENGINE=InnoDB AUTO_INCREMENT=1 DEFAULT CHARSET=utf8 COMMENT 'id信息表';

CREATE TABLE `tiny_id_token` (
  `id` int(11) unsigned NOT NULL AUTO_INCREMENT COMMENT '自增id',
  `token` varchar(255) NOT NULL DEFAULT '' COMMENT 'token',
  `biz_type` varchar(63) NOT NULL DEFAULT '' COMMENT '此token可访问的业务类型标识',
  `remark` varchar(255) NOT NULL DEFAULT '' COMMENT '备注',
  `create_time` timestamp NOT NULL DEFAULT '2010-01-01 00:00:00' COMMENT '创建时间',
  `update_time` timestamp NOT NULL DEFAULT '2010-01-01 00:00:00' COMMENT '更新时间',
  PRIMARY KEY (`id`)
) ENGINE=InnoDB AUTO_INCREMENT=1 DEFAULT CHARSET=utf8 COMMENT 'token信息表';

INSERT INTO `tiny_id_info` (`id`, `biz_type`, `begin_id`, `max_id`, `step`, `delta`, `remainder`, `create_time`, `update_time`, `version`)
VALUES
  (1, 'test', 1, 1, 100000, 1, 0, '2018-07-21 23:52:58', '2018-07-22 23:19:27', 1),
  (2, 'test_odd', 1, 1, 100000, 2, 1, '2018-07-21 23:52:58', '2018-07-23 00:39:24', 3);

INSERT INTO `tiny_id_token` (`id`, `token`, `biz_type`, `remark`, `create_time`, `update_time`)
VALUES
  (1, '0f673adf80504e2eaa552f5d791b644c', 'test', '1', '2017-12-14 16:36:46', '2017-12-14 16:36:48'),
  (2, '0f673adf80504e2eaa552f5d791b644c', 'test_odd', '1', '2017-12-14 16:36:46', '2017-12-14 16:36:48');
";

/// Tinyid's reservation of one segment of `biz`, as its server makes it
/// (`DbSegmentIdServiceImpl.getNextSegmentId` and `TinyIdInfoDAOImpl`): read the row,
/// then the compare-and-set, retried on a lost race. The IDs of the segment are those
/// `SegmentId` issues: above the old `max_id` up to the new one, in the row's class.
async fn tinyid_next_segment(conn: &mut mysql_async::Conn, biz: &str) -> Vec<i64> {
    for _ in 0..100 {
        let row: mysql_async::Row = conn
            .exec_first(
                "select id, biz_type, begin_id, max_id, step, delta, remainder, create_time, update_time, version from tiny_id_info where biz_type = ?",
                (biz,),
            )
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no row of {biz}"));
        let id: u64 = row.get(0).unwrap();
        let max_id: i64 = row.get(3).unwrap();
        let step: i64 = row.get(4).unwrap();
        let (delta, remainder): (i64, i64) = (row.get(5).unwrap(), row.get(6).unwrap());
        let version: i64 = row.get(9).unwrap();
        let new_max_id = max_id + step;
        conn.exec_drop(
            "update tiny_id_info set max_id= ?, update_time=now(), version=version+1 where id=? and max_id=? and version=? and biz_type=?",
            (new_max_id, id, max_id, version, biz),
        )
        .await
        .unwrap();
        if conn.affected_rows() == 1 {
            return (max_id + 1..=new_max_id)
                .filter(|id| id.rem_euclid(delta) == remainder)
                .collect();
        }
    }
    panic!("Tinyid's reservation of {biz} lost 100 races in a row");
}

/// Tinyid servers and a segmint server issue IDs of the same two bizs from Tinyid's own
/// tables at the same time, and after segmint stops (its give-back written): no ID is
/// issued twice, the odd-only biz stays odd, and Tinyid's columns and rows are as
/// Tinyid's statements need them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segmint_serves_tinyids_tables_beside_tinyids_own_statements() {
    let server = MariaServer::start();
    server.sql(TINYID_DB_SQL);
    // Steps small enough for many segments of both sides to interleave.
    server.sql("UPDATE tiny_id_info SET step = 50");
    let config = config_for_urls(&[server.url()]);
    let token = add_token_after_migrate(&config, "test").await;
    let token_odd = add_token(&config, "test_odd").await;
    assert_eq!(
        server.sql("SELECT biz_type, begin_id, max_id, step, delta, remainder, version FROM tiny_id_info ORDER BY id"),
        "test|1|1|50|1|0|1\ntest_odd|1|1|50|2|1|3",
        "migrating changes no row"
    );
    let app = spawn_app(config).await;

    let url = server.url();
    let tinyid = |biz: &'static str| {
        let url = url.clone();
        tokio::spawn(async move {
            let pool = mysql_async::Pool::new(url.as_str());
            let mut conn = pool.get_conn().await.unwrap();
            let mut ids = Vec::new();
            for _ in 0..40 {
                ids.extend(tinyid_next_segment(&mut conn, biz).await);
                tokio::task::yield_now().await;
            }
            drop(conn);
            pool.disconnect().await.unwrap();
            ids
        })
    };
    let tinyid_servers = [
        tinyid("test"),
        tinyid("test"),
        tinyid("test_odd"),
        tinyid("test_odd"),
    ];
    let mut segmint = (Vec::new(), Vec::new());
    for _ in 0..40 {
        segmint.0.extend(app.ids("test", &token, 37).await);
        segmint.1.extend(app.ids("test_odd", &token_odd, 37).await);
    }
    let mut tinyid_ids = (Vec::new(), Vec::new());
    for (i, server) in tinyid_servers.into_iter().enumerate() {
        let ids = server.await.unwrap();
        if i < 2 {
            &mut tinyid_ids.0
        } else {
            &mut tinyid_ids.1
        }
        .extend(ids);
    }
    app.stop().await;
    // After segmint's give-back: Tinyid goes on from the row.
    let pool = mysql_async::Pool::new(server.url().as_str());
    let mut conn = pool.get_conn().await.unwrap();
    for _ in 0..3 {
        tinyid_ids
            .0
            .extend(tinyid_next_segment(&mut conn, "test").await);
        tinyid_ids
            .1
            .extend(tinyid_next_segment(&mut conn, "test_odd").await);
    }

    for (biz, ours, theirs) in [
        ("test", &segmint.0, &tinyid_ids.0),
        ("test_odd", &segmint.1, &tinyid_ids.1),
    ] {
        assert_eq!(ours.len(), 40 * 37, "{biz}: segmint served every request");
        assert!(
            theirs.len() >= 80 * 25,
            "{biz}: Tinyid reserved its segments"
        );
        let mut seen = HashSet::new();
        for id in ours.iter().chain(theirs) {
            assert!(seen.insert(*id), "{biz}: ID {id} issued twice");
        }
        if biz == "test_odd" {
            assert!(seen.iter().all(|id| id % 2 == 1), "{biz}: an even ID");
        }
    }
    // Tinyid's row is still Tinyid's: its columns read as Tinyid reads them.
    let version: i64 = server
        .sql("SELECT version FROM tiny_id_info WHERE biz_type = 'test'")
        .parse()
        .unwrap();
    assert!(
        version > 80,
        "both sides advanced the row: version {version}"
    );
    drop(conn);
    pool.disconnect().await.unwrap();
}

/// Tinyid's tokens are plain text in its table, and its servers read them so. While they
/// run, segmint accepts the same tokens from the same rows (reading each as its hash);
/// once they are gone, one statement replaces every plain token by its hash and the
/// tokens still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tinyids_plain_tokens_work_in_place_and_once_hashed() {
    const TINYID_TOKEN: &str = "0f673adf80504e2eaa552f5d791b644c";
    let server = MariaServer::start();
    server.sql(TINYID_DB_SQL);
    let config = config_for_urls(&[server.url()]);
    let ours = add_token_after_migrate(&config, "test").await;
    let app = spawn_app(config.clone()).await;
    for (biz, token) in [
        ("test", TINYID_TOKEN),
        ("test_odd", TINYID_TOKEN),
        ("test", &ours),
    ] {
        let r = common::http::next_id_simple(&app, biz, token).await;
        assert_eq!(r.status, 200, "{biz}: {r:?}");
        let id: i64 = r
            .body
            .parse()
            .unwrap_or_else(|e| panic!("{biz}: {e}: {r:?}"));
        assert!(biz != "test_odd" || id % 2 == 1, "{biz}: {id}");
    }
    let r = common::http::next_id_simple(&app, "test", "0f673adf80504e2eaa552f5d791b644d").await;
    assert!(r.body.parse::<i64>().is_err(), "a wrong token: {r:?}");
    // Tinyid's rows still hold Tinyid's plain token; segmint's holds a hash.
    assert_eq!(
        server.sql("SELECT token FROM tiny_id_token WHERE id <= 2 ORDER BY id"),
        format!("{TINYID_TOKEN}\n{TINYID_TOKEN}")
    );
    let stored = server.sql("SELECT token FROM tiny_id_token WHERE id = 3");
    assert!(stored.len() == 64 && stored != ours, "{stored}");
    app.stop().await;

    // The last Tinyid server is gone: hash the plain tokens (docs/mysql.md).
    server.sql(
        "UPDATE tiny_id_token SET token = SHA2(token, 256)
         WHERE token NOT REGEXP '^[0-9a-fA-F]{64}$'",
    );
    assert_eq!(
        server.sql(
            "SELECT count(*) FROM tiny_id_token WHERE token = '0f673adf80504e2eaa552f5d791b644c'"
        ),
        "0"
    );
    let app = spawn_app(config).await;
    let r = common::http::next_id_simple(&app, "test", TINYID_TOKEN).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.body.parse::<i64>().is_ok(), "{r:?}");
}

/// MySQL's durability settings are global (no session can turn them on for itself, as
/// segmint's PostgreSQL sessions turn on `synchronous_commit`): a database that could
/// lose a commit it answered is not ready, says why, and serves no ID until fixed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_could_lose_commits_is_not_ready_and_says_why() {
    let server = MariaServer::start();
    let config = config_for_urls(&[server.url()]);
    let token = setup_biz(&config, "order", 10, false).await;
    let app = spawn_app(config).await;
    let (status, body) = app.get_v1("/readyz", None).await;
    assert_eq!(status, 200, "{body}");
    server.sql("SET GLOBAL innodb_flush_log_at_trx_commit = 2");
    let why = "innodb_flush_log_at_trx_commit is 2, not 1";
    common::wait::eventually(
        Duration::from_secs(30),
        "/readyz names the setting",
        async || {
            let (status, body) = app.get("/readyz").await;
            if status == 503 && body.contains(why) {
                Ok(())
            } else {
                Err(format!("{status}: {body}"))
            }
        },
    )
    .await;
    let (_, status_page) = app.get("/status").await;
    assert!(status_page.contains(why), "/status names it too");
    assert!(
        common::http::try_v1_ids(&app, "order", &token, 1)
            .await
            .is_err(),
        "no ID from a database that could lose it"
    );
    server.sql("SET GLOBAL innodb_flush_log_at_trx_commit = 1");
    common::wait::eventually(Duration::from_secs(30), "ready again", async || {
        match common::http::try_v1_ids(&app, "order", &token, 1).await {
            Ok(ids) if ids.len() == 1 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

/// A configuration of the databases at `urls`.
fn config_for_urls(urls: &[String]) -> segmint::config::Config {
    segmint::config::Config::from_toml(&config_toml_urls(urls, "")).expect("test configuration")
}

/// Migrates every database of `config`, then grants a new token `biz`.
async fn add_token_after_migrate(config: &segmint::config::Config, biz: &str) -> String {
    let store = segmint::store::Store::connect(config).unwrap();
    for (db, r) in store.migrate().await {
        r.unwrap_or_else(|e| panic!("migrate {db}: {e}"));
    }
    add_token(config, biz).await
}
