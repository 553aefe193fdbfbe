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
pub(crate) const TINYID_DB_SQL: &str = "
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
    not_ready_until_fixed(
        &app,
        &server,
        ("order", &token),
        "innodb_flush_log_at_trx_commit is 2, not 1",
        "SET GLOBAL innodb_flush_log_at_trx_commit = 1",
    )
    .await;
}

/// The server `target` on the database of `server`, whose durability settings do not
/// hold: it becomes not ready, `/readyz` and `/status` naming the setting (`why`), and
/// serves no ID of `biz` with `token`; once `fix` has run on the database, it serves
/// and is ready again, without a restart.
pub(crate) async fn not_ready_until_fixed(
    target: &impl common::http::Target,
    server: &MariaServer,
    (biz, token): (&str, &str),
    why: &str,
    fix: &str,
) {
    let readyz = async |ready: bool| {
        let what = format!("/readyz ready: {ready}");
        common::wait::eventually(Duration::from_secs(30), &what, async || {
            let r = common::http::get(target, "/readyz").await;
            match r.status {
                200 if ready => Ok(()),
                503 if !ready && r.body.contains(why) => Ok(()),
                _ => Err(format!("{}: {}", r.status, r.body)),
            }
        })
        .await;
    };
    readyz(false).await;
    let status_page = common::http::get(target, "/status").await.body;
    assert!(
        status_page.contains(why),
        "/status names it too: {status_page}"
    );
    assert!(
        common::http::try_v1_ids(target, biz, token, 1)
            .await
            .is_err(),
        "no ID from a database that could lose it"
    );
    server.sql(fix);
    common::wait::eventually(Duration::from_secs(30), "IDs again", async || {
        match common::http::try_v1_ids(target, biz, token, 1).await {
            Ok(ids) if ids.len() == 1 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    readyz(true).await;
}

/// How often a test reads `information_schema.INNODB_TRX`. InnoDB refreshes the
/// snapshot that table is read from only when nobody read it for 100 ms: read more often
/// (a fast client, every 20 ms), it never shows a lock wait begun meanwhile.
const INNODB_TRX_POLL: Duration = Duration::from_millis(250);

/// `n` IDs of `biz`, one request each; every one new to `seen`.
async fn one_by_one(
    app: &TestApp,
    biz: &str,
    token: &str,
    n: usize,
    seen: &mut HashSet<i64>,
) -> Vec<i64> {
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        let id = app.ids(biz, token, 1).await[0];
        assert!(seen.insert(id), "ID {id} issued twice");
        ids.push(id);
    }
    ids
}

/// A MariaDB database restored from a real backup (its data directory copied while it
/// was shut down, put back after IDs were issued from it) is fenced by the server that
/// saw its rows advance and by one started after the restore, and no ID is issued
/// twice: the other database witnessed how far its rows had gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mariadb_restored_from_a_backup_is_fenced_and_issues_no_id_twice() {
    restored_from_a_backup(Tables::Tinyid).await;
}

/// Beside Leaf's `leaf_alloc`, the snowflake spec is recorded once, as on the other
/// engines (`contract.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leafs_tables_record_the_snowflake_spec_once() {
    let dbs = Databases::start(Kind::MySql, 1);
    Tables::Leaf.create(dbs.maria(0));
    let config = Tables::Leaf.config(&dbs.urls(), "");
    let store = segmint::store::Store::connect(&config).unwrap();
    for (db, r) in store.cluster().migrate().await.results() {
        r.unwrap_or_else(|e| panic!("migrate {db}: {e}"));
    }
    crate::contract::spec_recorded_once(raw_store(&config, 0).as_ref()).await;
}

/// Where a test keeps its biz rows: Tinyid's `tiny_id_info` (the default, created by
/// `segmint migrate`) or Leaf's `leaf_alloc` (`tables=leaf`, created as Leaf creates it).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Tables {
    Tinyid,
    Leaf,
}

impl Tables {
    /// Makes a new database of `server` one of these tables, before `segmint migrate`.
    fn create(self, server: &MariaServer) {
        if let Tables::Leaf = self {
            server.sql(LEAF_DB_SQL);
        }
    }

    /// A configuration of the databases at `urls`, their rows in these tables.
    fn config(self, urls: &[String], extra: &str) -> segmint::config::Config {
        let urls: Vec<String> = match self {
            Tables::Tinyid => urls.to_vec(),
            Tables::Leaf => urls.iter().map(|u| format!("{u}?tables=leaf")).collect(),
        };
        segmint::config::Config::from_toml(&config_toml_urls(&urls, extra))
            .expect("test configuration")
    }

    /// The table and its name column.
    fn table(self) -> (&'static str, &'static str) {
        match self {
            Tables::Tinyid => ("tiny_id_info", "biz_type"),
            Tables::Leaf => ("leaf_alloc", "biz_tag"),
        }
    }

    /// A statement that reads `biz`'s row as `max_id|version`, as the table holds them.
    fn row(self, biz: &str) -> String {
        let ((table, name), version) = match self {
            Tables::Tinyid => (self.table(), "version"),
            Tables::Leaf => (self.table(), "segmint_version"),
        };
        format!("SELECT max_id, {version} FROM {table} WHERE {name} = '{biz}'")
    }

    /// A statement that locks `biz`'s row (in a transaction).
    fn lock(self, biz: &str) -> String {
        let (table, name) = self.table();
        format!("SELECT * FROM {table} WHERE {name} = '{biz}' FOR UPDATE")
    }

    /// The last ID issued from a row whose `max_id` column holds `max_id`: Leaf's is
    /// the first ID not issued yet.
    fn last_issued(self, max_id: i64) -> i64 {
        match self {
            Tables::Tinyid => max_id,
            Tables::Leaf => max_id - 1,
        }
    }
}

/// A MariaDB database restored from a real backup (its data directory copied while it
/// was shut down, put back after IDs were issued from it), its biz rows in `tables`, is
/// fenced by the server that saw its rows advance and by one started after the
/// restore, and no ID is issued twice.
pub(crate) async fn restored_from_a_backup(tables: Tables) {
    let dbs = Databases::start(Kind::MySql, 2);
    for i in 0..2 {
        tables.create(dbs.maria(i));
    }
    let extra = "adaptive_step = false";
    let config = || tables.config(&dbs.urls(), extra);
    let token = setup_biz(&config(), "order", 10, false).await;
    let backup = tempfile::tempdir().unwrap();
    let copy = |from: &std::path::Path, to: &std::path::Path| {
        let out = std::process::Command::new("cp")
            .arg("-a")
            .arg(from)
            .arg(to)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let saved = backup.path().join("data");
    tokio::task::block_in_place(|| {
        dbs.maria(0).shutdown();
        copy(dbs.maria(0).data(), &saved);
        dbs.maria(0).start_again();
    });

    let running = spawn_app(config()).await;
    let mut seen = HashSet::new();
    let before = one_by_one(&running, "order", &token, 200, &mut seen).await;
    assert!(
        before.iter().filter(|id| *id % 2 == 0).count() >= 10,
        "pg0 (even IDs) served part of the first 200"
    );

    // The restore: pg0 crashes, and its data directory is put back as it was.
    tokio::task::block_in_place(|| {
        dbs.maria(0).stop();
        std::fs::remove_dir_all(dbs.maria(0).data()).unwrap();
        copy(&saved, dbs.maria(0).data());
        dbs.maria(0).start_again();
    });
    one_by_one(&running, "order", &token, 400, &mut seen).await;
    let db = until_fenced(&running, "pg0", true, Duration::from_secs(10)).await;
    assert!(
        db["fenced"]
            .as_str()
            .unwrap_or("")
            .contains("gone back in time"),
        "{db}"
    );
    let fresh = spawn_app(config()).await;
    let from_fresh = one_by_one(&fresh, "order", &token, 400, &mut seen).await;
    until_fenced(&fresh, "pg0", true, Duration::from_secs(10)).await;
    assert!(
        from_fresh.iter().all(|id| id % 2 == 1),
        "a fenced database serves nothing"
    );
    running.stop().await;
    fresh.stop().await;
}

/// `mariadbd` killed (`kill -9`) while a reservation waits on a row lock: the
/// reservation's outcome never reaches segmint, so its segment gives no ID, and once the
/// database is back nothing is reissued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mariadb_killed_during_a_reservation_gives_no_ids_from_it() {
    killed_during_a_reservation(Tables::Tinyid).await;
}

/// `mariadbd` killed while a reservation waits on a row lock, the biz rows in `tables`:
/// no ID from the lost reservation, none twice after the restart, every one below the
/// row's `max_id`.
pub(crate) async fn killed_during_a_reservation(tables: Tables) {
    let server = MariaServer::start();
    tables.create(&server);
    let extra = "adaptive_step = false\nfetch_timeout_ms = 5000\nwait_timeout_ms = 8000";
    let config = tables.config(&[server.url()], extra);
    let token = setup_biz(&config, "order", 10, false).await;
    let app = shared(spawn_app(config).await);
    let mut seen = HashSet::new();
    for id in app.ids("order", &token, 5).await {
        assert!(seen.insert(id));
    }
    // Another session holds the row: the next reservation's UPDATE waits on it.
    let pool = mysql_async::Pool::new(server.url().as_str());
    let mut holder = pool.get_conn().await.unwrap();
    holder.query_drop("START TRANSACTION").await.unwrap();
    holder.query_drop(tables.lock("order")).await.unwrap();
    let row = tables.row("order");
    let before = server.sql(&row);
    let waiting = {
        let (app, token) = (app.clone(), token.clone());
        tokio::spawn(async move { app.get_v1("/v1/ids/order?count=40", Some(&token)).await })
    };
    common::wait::eventually_every(
        INNODB_TRX_POLL,
        Duration::from_secs(10),
        "a reservation waits on the lock",
        async || {
            let waits = tokio::task::block_in_place(|| {
                server.sql("SELECT count(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'")
            });
            if waits == "0" { Err("none yet".to_string()) } else { Ok(()) }
        },
    )
    .await;
    tokio::task::block_in_place(|| server.stop());
    let (status, body) = waiting.await.unwrap();
    assert_ne!(
        status, 200,
        "a reservation whose outcome was lost gave IDs: {body}"
    );
    drop(holder);
    drop(pool);
    tokio::task::block_in_place(|| server.start_again());
    assert_eq!(
        server.sql(&row),
        before,
        "the killed reservation never committed"
    );
    let mut after = 0;
    common::wait::eventually(
        Duration::from_secs(20),
        "100 IDs after the restart",
        async || {
            while after < 100 {
                let ids = common::http::try_v1_ids(&*app, "order", &token, 1).await?;
                assert!(
                    seen.insert(ids[0]),
                    "ID {} issued twice after the restart",
                    ids[0]
                );
                after += 1;
            }
            Ok(())
        },
    )
    .await;
    let max_id: i64 = server.sql(&row).split('|').next().unwrap().parse().unwrap();
    let last = tables.last_issued(max_id);
    assert!(
        seen.iter().all(|id| *id <= last),
        "every ID within the row's max_id ({max_id})"
    );
    app.stop().await;
}

/// Leaf's `leaf_alloc`, as Leaf's README creates it, with its sample row (a smaller
/// step, for many segments of both sides to interleave).
pub(crate) const LEAF_DB_SQL: &str = "
CREATE TABLE `leaf_alloc` (
  `biz_tag` varchar(128)  NOT NULL DEFAULT '',
  `max_id` bigint(20) NOT NULL DEFAULT '1',
  `step` int(11) NOT NULL,
  `description` varchar(256)  DEFAULT NULL,
  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (`biz_tag`)
) ENGINE=InnoDB;

insert into leaf_alloc(biz_tag, max_id, step, description) values('leaf-segment-test', 1, 50, 'Test leaf Segment Mode Get Id');
";

/// Leaf's reservation of one segment of `tag`, as its server makes it
/// (`IDAllocDaoImpl.updateMaxIdAndGetLeafAlloc`, or `…ByCustomStep` when its dynamic
/// step differs from the row's): the UPDATE, then the SELECT, in one transaction. The
/// IDs are `[max_id - step, max_id)` (`SegmentIDGenImpl.updateSegmentFromDb`).
async fn leaf_next_segment(
    conn: &mut mysql_async::Conn,
    tag: &str,
    custom_step: Option<i64>,
) -> Vec<i64> {
    let mut tx = conn
        .start_transaction(mysql_async::TxOpts::default())
        .await
        .unwrap();
    match custom_step {
        None => tx
            .exec_drop(
                "UPDATE leaf_alloc SET max_id = max_id + step WHERE biz_tag = ?",
                (tag,),
            )
            .await
            .unwrap(),
        Some(step) => tx
            .exec_drop(
                "UPDATE leaf_alloc SET max_id = max_id + ? WHERE biz_tag = ?",
                (step, tag),
            )
            .await
            .unwrap(),
    }
    let (max_id, step): (i64, i64) = tx
        .exec_first(
            "SELECT biz_tag, max_id, step FROM leaf_alloc WHERE biz_tag = ?",
            (tag,),
        )
        .await
        .unwrap()
        .map(|(_, max_id, step): (String, i64, i64)| (max_id, step))
        .unwrap();
    tx.commit().await.unwrap();
    let step = custom_step.unwrap_or(step);
    (max_id - step..max_id).collect()
}

/// Leaf servers and a segmint server (`tables=leaf`) issue IDs of one tag from Leaf's
/// own `leaf_alloc` at the same time, through segmint's v1 API and Leaf's own route, and
/// Leaf goes on after segmint stops (its give-back written): no ID twice, and Leaf's
/// columns and row are as Leaf's statements need them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segmint_serves_leafs_table_beside_leafs_own_statements() {
    const TAG: &str = "leaf-segment-test";
    let server = MariaServer::start();
    server.sql(LEAF_DB_SQL);
    let url = format!("{}?tables=leaf", server.url());
    let extra = r#"leaf = { enabled = true, bizs = ["leaf-segment-test"] }"#;
    let config = segmint::config::Config::from_toml(&config_toml_urls(&[url], extra)).unwrap();
    let token = add_token_after_migrate(&config, TAG).await;
    assert_eq!(
        server.sql("SELECT biz_tag, max_id, step, description FROM leaf_alloc"),
        format!("{TAG}|1|50|Test leaf Segment Mode Get Id"),
        "migrating changes no row"
    );
    let app = spawn_app(config).await;

    let leaf = |custom: Option<i64>| {
        let url = server.url();
        tokio::spawn(async move {
            let pool = mysql_async::Pool::new(url.as_str());
            let mut conn = pool.get_conn().await.unwrap();
            let mut ids = Vec::new();
            for _ in 0..40 {
                ids.extend(leaf_next_segment(&mut conn, TAG, custom).await);
                tokio::task::yield_now().await;
            }
            drop(conn);
            pool.disconnect().await.unwrap();
            ids
        })
    };
    let leaf_servers = [leaf(None), leaf(Some(120))];
    let mut ours = Vec::new();
    for i in 0..40 {
        ours.extend(app.ids(TAG, &token, 37).await);
        // Leaf's own route, served by segmint from the same row.
        let r = common::http::get(&app, &format!("/api/segment/get/{TAG}")).await;
        assert_eq!(r.status, 200, "{i}: {r:?}");
        ours.push(r.body.parse().unwrap_or_else(|e| panic!("{e}: {r:?}")));
    }
    let mut theirs = Vec::new();
    for server in leaf_servers {
        theirs.extend(server.await.unwrap());
    }
    app.stop().await;
    let pool = mysql_async::Pool::new(server.url().as_str());
    let mut conn = pool.get_conn().await.unwrap();
    for _ in 0..3 {
        theirs.extend(leaf_next_segment(&mut conn, TAG, None).await);
    }
    drop(conn);
    pool.disconnect().await.unwrap();

    let mut seen = HashSet::new();
    for id in ours.iter().chain(&theirs) {
        assert!(*id >= 1, "ID {id} below Leaf's first");
        assert!(seen.insert(*id), "ID {id} issued twice");
    }
    assert_eq!(ours.len(), 40 * 38, "segmint served every request");
    assert_eq!(
        theirs.len(),
        40 * 50 + 40 * 120 + 3 * 50,
        "Leaf reserved its segments"
    );
    // Every change of max_id moved segmint's version on, Leaf's included.
    let version: i64 = server
        .sql("SELECT segmint_version FROM leaf_alloc")
        .parse()
        .unwrap();
    assert!(version > 83, "version {version}");
}

/// The engine's primitives on Leaf's table keep the contract the suite checks on
/// Tinyid's: an insert never replaces nor lands below a stored layout, the
/// compare-and-set needs version and max_id, a description changes nothing else; and
/// Leaf's `max_id` is one above segmint's (`[max_id - step, max_id)` against `(max_id -
/// step, max_id]`), Leaf's own reservation moving segmint's version on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaf_rows_keep_the_engine_contract() {
    use segmint::store::{BizRow, Inserted, LayoutRow, RowWrite};
    let server = MariaServer::start();
    server.sql(LEAF_DB_SQL);
    let config = config_for_urls(&[format!("{}?tables=leaf", server.url())]);
    let store = segmint::store::Store::connect(&config).unwrap();
    for (db, r) in store.cluster().migrate().await.results() {
        r.unwrap_or_else(|e| panic!("migrate {db}: {e}"));
    }
    let raw = raw_store(&config, 0);
    assert_eq!(
        raw.migrate().await.unwrap(),
        Vec::<String>::new(),
        "migrated once"
    );
    let row = |biz: &str, max_id, version, epoch| BizRow {
        biz_type: biz.into(),
        begin_id: 0,
        max_id,
        step: 10,
        delta: 1,
        remainder: 0,
        version,
        description: Box::default(),
        epoch,
        frozen: false,
        claimed_by: 0,
    };
    // Leaf's own row, as segmint reads it: max_id 1 in Leaf's terms issues from 1.
    let sample = raw.biz("leaf-segment-test").await.unwrap().unwrap();
    assert_eq!((sample.max_id, sample.step, sample.version), (0, 50, 0));
    assert_eq!(&*sample.description, "Test leaf Segment Mode Get Id");

    assert_eq!(
        raw.insert_biz(&row("b", 0, 0, 0)).await.unwrap(),
        Inserted::Yes
    );
    assert_eq!(
        raw.insert_biz(&row("b", 7, 0, 0)).await.unwrap(),
        Inserted::Exists
    );
    assert_eq!(
        raw.biz("b").await.unwrap(),
        Some(row("b", 0, 0, 0)),
        "not replaced"
    );
    assert_eq!(
        server.sql("SELECT max_id FROM leaf_alloc WHERE biz_tag = 'b'"),
        "1"
    );
    let to = |version, max_id| RowWrite {
        version,
        max_id,
        class: None,
    };
    assert_eq!(
        raw.write_row("b", 1, 0, &to(2, 10)).await.unwrap(),
        None,
        "stale version"
    );
    assert_eq!(
        raw.write_row("b", 0, 5, &to(1, 10)).await.unwrap(),
        None,
        "stale max_id"
    );
    assert_eq!(
        raw.write_row("b", 0, 0, &to(1, 10)).await.unwrap(),
        Some(row("b", 10, 1, 0))
    );
    assert_eq!(
        server.sql("SELECT max_id, segmint_version FROM leaf_alloc WHERE biz_tag = 'b'"),
        "11|1"
    );
    // Leaf's reservation: max_id moves, and so does segmint's version.
    server.sql("UPDATE leaf_alloc SET max_id = max_id + step WHERE biz_tag = 'b'");
    assert_eq!(raw.biz("b").await.unwrap(), Some(row("b", 20, 2, 0)));
    assert_eq!(
        raw.write_row("b", 1, 10, &to(2, 30)).await.unwrap(),
        None,
        "Leaf got there first"
    );
    assert_eq!(
        raw.write_row("b", 2, 20, &to(3, 30)).await.unwrap(),
        Some(row("b", 30, 3, 0))
    );
    assert!(raw.describe("b", "orders").await.unwrap());
    assert!(!raw.describe("none", "x").await.unwrap());
    assert_eq!(&*raw.biz("b").await.unwrap().unwrap().description, "orders");
    let one = raw.catalog_of("b", None, &[]).await.unwrap();
    assert_eq!(one.bizs.len(), 1);
    assert_eq!(one.bizs[0].max_id, 30);
    let names: Vec<String> = raw
        .bizs()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.biz_type.to_string())
        .collect();
    assert_eq!(names, ["b", "leaf-segment-test"]);
    let moving = LayoutRow {
        epoch: 5,
        members: "pg0=1:0".into(),
        state: "moving".into(),
        changed_ms: 1,
    };
    assert!(raw.write_layout(&moving, None).await.unwrap());
    assert_eq!(
        raw.insert_bizs(&[row("c", 0, 0, 4), row("d", 0, 0, 4)])
            .await
            .unwrap(),
        [Inserted::LayoutAbove(5); 2]
    );
    assert_eq!(raw.biz("c").await.unwrap(), None, "nothing of the batch");
}

/// segmint's transactions run REPEATABLE READ on a server whose default is READ
/// COMMITTED (a common setting): the locking reads of `insert_bizs` and `take_lease`
/// rely on the gap locks READ COMMITTED does not take. Seen from the server, on a
/// reservation's transaction caught waiting on a row lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segmints_transactions_are_repeatable_read_whatever_the_server_default() {
    let server = MariaServer::start();
    server.sql("SET GLOBAL TRANSACTION ISOLATION LEVEL READ COMMITTED");
    let config = config_for_urls(&[server.url()]);
    setup_biz(&config, "order", 10, false).await;
    let store = shared(segmint::store::Store::connect(&config).unwrap());
    let biz = segmint::biz::BizTag::parse("order").unwrap();
    // Connections used and given back first: a setting lost when the pool takes a
    // connection back would show on the next use.
    for _ in 0..5 {
        store.reserve(&biz, None, None).await.unwrap();
        // Paces the uses, so that each connection goes back to the pool in between.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pool = mysql_async::Pool::new(server.url().as_str());
    let mut holder = pool.get_conn().await.unwrap();
    holder.query_drop("START TRANSACTION").await.unwrap();
    holder
        .query_drop("SELECT * FROM tiny_id_info WHERE biz_type = 'order' FOR UPDATE")
        .await
        .unwrap();
    let reserving = {
        let store = store.clone();
        let biz = biz.clone();
        tokio::spawn(async move { store.reserve(&biz, None, None).await })
    };
    let waiting = "SELECT trx_isolation_level FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'";
    let level = common::wait::eventually_every(
        INNODB_TRX_POLL,
        Duration::from_secs(10),
        "a reservation waits",
        async || match tokio::task::block_in_place(|| server.sql(waiting)) {
            level if level.is_empty() => Err("none yet".to_string()),
            level => Ok(level),
        },
    )
    .await;
    assert_eq!(level, "REPEATABLE READ");
    holder.query_drop("ROLLBACK").await.unwrap();
    let reserved = reserving.await.unwrap().unwrap();
    assert_eq!(reserved.range.ids().count(), 10);
    drop(holder);
    pool.disconnect().await.unwrap();
}

/// The store keeps its MariaDB connections between uses: thirty reservations one after
/// the other open at most a pool's worth of connections, not one each (the driver's
/// default closes every connection handed back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_keeps_its_connections_between_uses() {
    let server = MariaServer::start();
    let config = config_for_urls(&[server.url()]);
    setup_biz(&config, "order", 10, false).await;
    let store = segmint::store::Store::connect(&config).unwrap();
    let biz = segmint::biz::BizTag::parse("order").unwrap();
    store.reserve(&biz, None, None).await.unwrap();
    let connections = || -> u64 {
        let sql = "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
                   WHERE VARIABLE_NAME = 'CONNECTIONS'";
        let value = tokio::task::block_in_place(|| server.sql(sql));
        value
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{value:?}: {e}"))
    };
    let before = connections();
    for _ in 0..30 {
        store.reserve(&biz, None, None).await.unwrap();
    }
    // The count read above is one connection of its own.
    let opened = connections() - before - 1;
    assert!(
        opened <= config.pool_size as u64,
        "30 reservations opened {opened} connections (pool size {})",
        config.pool_size
    );
}

/// A configuration of the databases at `urls`.
fn config_for_urls(urls: &[String]) -> segmint::config::Config {
    segmint::config::Config::from_toml(&config_toml_urls(urls, "")).expect("test configuration")
}

/// Migrates every database of `config`, then grants a new token `biz`.
async fn add_token_after_migrate(config: &segmint::config::Config, biz: &str) -> String {
    let store = segmint::store::Store::connect(config).unwrap();
    for (db, r) in store.cluster().migrate().await.results() {
        r.unwrap_or_else(|e| panic!("migrate {db}: {e}"));
    }
    add_token(config, biz).await
}
