//! Operating a MariaDB database, seen from outside with real servers and the real
//! `segmint` binary: `segmint migrate` run by several operators at the same moment, or
//! killed midway and run again; a binary log that could lose commits; and the faults of
//! `tests/mysql.rs` (`mariadbd` killed, a backup put back) on Leaf's `leaf_alloc`.
//!
//! "At the same moment" and "midway" are made certain, not hoped for: another session
//! holds a lock that every migration run waits on, the test sees each run waiting in
//! the server's process list, and only then lets them go (or stops and kills one).

use crate::common;
use crate::mysql::{self, TINYID_DB_SQL, Tables};

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use common::cli::{CliProcess, config_file, segmint_ok};
use common::*;
use mysql_async::prelude::Queryable;

/// Tinyid's sample token, granted in its `db.sql` for `test` and `test_odd`.
const TINYID_TOKEN: &str = "0f673adf80504e2eaa552f5d791b644c";

/// How long a migration run may take once nothing holds it (a loaded 2-core machine).
const MIGRATE_LIMIT: Duration = Duration::from_secs(60);

/// The sessions waiting on a lock, `id|state|statement` (on one line): a table's
/// metadata lock, the global read lock (MariaDB's backup lock), or a `GET_LOCK`. Nothing
/// but the migration runs of a test waits in its server.
const WAITING: &str =
    "SELECT id, state, replace(info, '\\n', ' ') FROM information_schema.processlist
    WHERE command IN ('Query', 'Execute') AND id <> connection_id()
      AND (state LIKE 'Waiting for %' OR state = 'User lock')
    ORDER BY id";

/// The migrations of `sql/mysql` (or `sql/mysql_leaf`), as `segmint migrate` names them
/// (`0001_init`), in order.
fn migrations(dir: &str) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("sql").join(dir);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|name| name.strip_suffix(".sql").map(str::to_owned))
        .collect();
    names.sort();
    assert!(names.len() >= 10, "{names:?}");
    names
}

/// The migration history of the database: every version recorded, in order, with
/// commas (one version recorded twice shows twice).
fn history(server: &MariaServer) -> String {
    server.sql("SELECT group_concat(version ORDER BY version) FROM segmint_migrations")
}

/// `1,2,…,n`.
fn versions(n: usize) -> String {
    (1..=n).map(|v| v.to_string()).collect::<Vec<_>>().join(",")
}

/// What a `segmint --json migrate` run applied to its one database; panics, with what
/// it printed, unless it exited 0 without an error.
fn applied(run: &common::cli::CliRun) -> Vec<String> {
    assert!(run.ok(), "segmint migrate failed: {run:?}");
    let report: serde_json::Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("not a JSON report ({e}): {run:?}"));
    let db = &report["databases"][0];
    assert!(db["error"].is_null(), "{report}");
    db["applied"]
        .as_array()
        .unwrap_or_else(|| panic!("{report}"))
        .iter()
        .map(|m| m.as_str().unwrap().to_owned())
        .collect()
}

/// A session of its own on `server`'s database, driven by the test.
async fn session(server: &MariaServer) -> mysql_async::Conn {
    let pool = mysql_async::Pool::new(server.url().as_str());
    pool.get_conn().await.unwrap()
}

/// A Tinyid database (its `db.sql` tables and rows, steps of 10) that no `segmint
/// migrate` has run on yet, its configuration (TOML, and a file), and a reader whose
/// open transaction on `tiny_id_info` makes every ALTER of that table wait until it ends.
async fn held_tinyid_database() -> (
    MariaServer,
    String,
    tempfile::NamedTempFile,
    mysql_async::Conn,
) {
    let server = MariaServer::start();
    server.sql(TINYID_DB_SQL);
    server.sql("UPDATE tiny_id_info SET step = 10");
    let toml = config_toml_urls(&[server.url()], "");
    let config = config_file(&toml);
    let mut reader = session(&server).await;
    reader.query_drop("START TRANSACTION").await.unwrap();
    reader
        .query_drop("SELECT count(*) FROM tiny_id_info")
        .await
        .unwrap();
    (server, toml, config, reader)
}

/// Waits until `n` sessions wait on a lock in `server` (see [`WAITING`]), each run of
/// `runs` still running (one that ended early fails the test with what it printed).
/// Returns the waiting sessions, `id|state|statement`.
async fn until_waiting(server: &MariaServer, runs: &mut [CliProcess], n: usize) -> Vec<String> {
    let what = format!("{n} sessions waiting on a lock");
    eventually(Duration::from_secs(60), &what, async || {
        runs.iter_mut().for_each(CliProcess::assert_running);
        let waiting: Vec<String> = tokio::task::block_in_place(|| server.sql(WAITING))
            .lines()
            .map(str::to_owned)
            .collect();
        if waiting.len() == n {
            Ok(waiting)
        } else {
            Err(format!("{waiting:?}"))
        }
    })
    .await
}

/// `n` runs of `segmint migrate` started at the same moment on the database of
/// `config`, while `holder`, a session that holds a lock the migration needs, makes
/// each run wait; once all `n` are seen waiting, `release` (run by `holder`) lets them
/// go. Returns what each run applied; each must exit 0.
async fn migrate_at_once(
    server: &MariaServer,
    config: &Path,
    n: usize,
    holder: &mut mysql_async::Conn,
    release: &str,
) -> Vec<Vec<String>> {
    let mut runs: Vec<CliProcess> = (0..n)
        .map(|_| CliProcess::spawn(config, &["--json", "migrate"]))
        .collect();
    until_waiting(server, &mut runs, n).await;
    holder.query_drop(release).await.unwrap();
    let mut reports = Vec::new();
    for run in runs {
        reports.push(applied(&run.finish(MIGRATE_LIMIT).await));
    }
    reports
}

/// Every migration in `all` was applied by exactly one of the runs, and the database's
/// history lists each once.
fn each_applied_once(server: &MariaServer, reports: &[Vec<String>], all: &[String]) {
    let mut by_all: Vec<&String> = reports.iter().flatten().collect();
    by_all.sort();
    assert_eq!(
        by_all,
        all.iter().collect::<Vec<_>>(),
        "each migration applied by one run alone: {reports:?}"
    );
    assert_eq!(history(server), versions(all.len()));
}

/// Three `segmint migrate` runs started at the same moment on a Tinyid database (its
/// `db.sql` tables and rows) all exit 0, each migration is applied by one run alone and
/// recorded once, and the schema is complete: a server then serves Tinyid's bizs to
/// Tinyid's own token.
///
/// A reader's open transaction on `tiny_id_info` makes the first ALTER of that table
/// wait; the test lets the runs go only once all three are seen waiting, so they
/// overlap for certain. Each run has read the history before it waits, or waits to
/// read it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_runs_at_the_same_moment_on_a_tinyid_database_all_succeed_once_each() {
    let (server, toml, config, mut reader) = held_tinyid_database().await;
    let all = migrations("mysql");
    let reports = migrate_at_once(&server, config.path(), 3, &mut reader, "COMMIT").await;
    each_applied_once(&server, &reports, &all);

    let app = ServerProcess::start(&toml).await;
    let remote = app.remote(Duration::from_secs(30));
    for (biz, odd) in [("test", false), ("test_odd", true)] {
        let mut seen = HashSet::new();
        for _ in 0..20 {
            for id in common::http::v1_ids(&remote, biz, TINYID_TOKEN, 3).await {
                assert!(id > 1, "{biz}: {id} at or below Tinyid's max_id");
                assert!(!odd || id % 2 == 1, "{biz}: an even ID {id}");
                assert!(seen.insert(id), "{biz}: {id} twice");
            }
        }
    }
}

/// Three `segmint migrate` runs started at the same moment on an empty database all
/// exit 0, each migration applied by one run alone and recorded once; the schema is
/// complete: `segmint biz add` and `token add` work and a server serves the biz.
///
/// Another session holds the global read lock (`FLUSH TABLES WITH READ LOCK`), which
/// every DDL statement waits on: the test lets the runs go once all three are seen
/// waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_runs_at_the_same_moment_on_an_empty_database_all_succeed_once_each() {
    let server = MariaServer::start();
    let toml = config_toml_urls(&[server.url()], "");
    let config = config_file(&toml);
    let mut holder = session(&server).await;
    holder
        .query_drop("FLUSH TABLES WITH READ LOCK")
        .await
        .unwrap();
    let all = migrations("mysql");
    let reports = migrate_at_once(&server, config.path(), 3, &mut holder, "UNLOCK TABLES").await;
    each_applied_once(&server, &reports, &all);

    segmint_ok(config.path(), &["biz", "add", "order", "--step", "10"], &[]);
    let token = segmint_ok(config.path(), &["token", "add", "--biz", "order"], &[]);
    let app = ServerProcess::start(&toml).await;
    let ids = common::http::v1_ids(
        &app.remote(Duration::from_secs(30)),
        "order",
        token.trim(),
        50,
    )
    .await;
    assert_unique(&ids);
    assert_eq!(ids.len(), 50);
}

/// `segmint migrate` killed (SIGKILL) midway, between a migration's ALTER (committed,
/// as DDL commits on its own) and the record of that migration, then run again: the
/// second run applies the rest (the ALTER again among them, which finds its column
/// there), exits 0, and servers serve with no ID twice.
///
/// Midway for certain: a reader's open transaction on `tiny_id_info` makes the run
/// wait on the ALTER of `0004_description`; the test stops the process (SIGSTOP), ends
/// the transaction, sees the ALTER done (the session idle, the stopped client sending
/// nothing more), then kills the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_killed_midway_then_run_again_completes_and_serves_no_id_twice() {
    let (server, toml, config, mut reader) = held_tinyid_database().await;
    let column = "SELECT count(*) FROM information_schema.columns
        WHERE table_schema = database() AND table_name = 'tiny_id_info'
          AND column_name = 'description'";
    assert_eq!(server.sql(column), "0");

    let mut run = CliProcess::spawn(config.path(), &["migrate"]);
    let waiting = until_waiting(&server, std::slice::from_mut(&mut run), 1).await;
    let session_id = match waiting[0].split('|').collect::<Vec<_>>()[..] {
        [id, "Waiting for table metadata lock", statement]
            if statement.starts_with("ALTER TABLE tiny_id_info")
                && statement.contains(" description ") =>
        {
            id.to_owned()
        }
        _ => panic!("not the ALTER of 0004_description: {waiting:?}"),
    };
    assert_eq!(history(&server), versions(3), "0001 to 0003 recorded");
    stop_process(run.pid(), Duration::from_secs(10))
        .await
        .unwrap();
    reader.query_drop("COMMIT").await.unwrap();
    let command =
        format!("SELECT command FROM information_schema.processlist WHERE id = {session_id}");
    eventually(Duration::from_secs(30), "the ALTER done", async || {
        match tokio::task::block_in_place(|| server.sql(&command)).as_str() {
            "Sleep" => Ok(()),
            other => Err(other.to_owned()),
        }
    })
    .await;
    run.child.kill9();
    eventually(
        Duration::from_secs(30),
        "the killed run's session gone",
        async || match tokio::task::block_in_place(|| server.sql(&command)).as_str() {
            "" => Ok(()),
            other => Err(other.to_owned()),
        },
    )
    .await;
    assert_eq!(server.sql(column), "1", "0004's ALTER committed");
    assert_eq!(history(&server), versions(3), "0004 not recorded");

    let all = migrations("mysql");
    let again = CliProcess::spawn(config.path(), &["--json", "migrate"]);
    assert_eq!(applied(&again.finish(MIGRATE_LIMIT).await), all[3..]);
    assert_eq!(history(&server), versions(all.len()));

    let servers = [
        ServerProcess::start(&toml).await,
        ServerProcess::start(&toml).await,
    ];
    let remotes = servers
        .each_ref()
        .map(|s| s.remote(Duration::from_secs(30)));
    let mut seen = HashSet::new();
    for _ in 0..30 {
        for remote in &remotes {
            for id in common::http::v1_ids(remote, "test", TINYID_TOKEN, 7).await {
                assert!(id > 1, "{id} at or below Tinyid's max_id");
                assert!(seen.insert(id), "ID {id} issued twice");
            }
        }
    }
    assert_eq!(seen.len(), 2 * 30 * 7);
}

/// A MariaDB with its binary log on and `sync_binlog = 0` (the binary log flushed when
/// the OS likes: a crash could roll back a commit already answered) is not ready:
/// `/readyz` and `/status` name `sync_binlog`, and no ID is served. `SET GLOBAL
/// sync_binlog = 1` makes it ready without a restart of either server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binary_log_not_synced_at_commit_is_not_ready_until_sync_binlog_is_1() {
    let server = MariaServer::start_with(&["--log-bin", "--sync-binlog=0"]);
    assert_eq!(server.sql("SELECT @@log_bin, @@sync_binlog"), "1|0");
    let toml = config_toml_urls(&[server.url()], "");
    let config = config_file(&toml);
    segmint_ok(config.path(), &["migrate"], &[]);
    segmint_ok(config.path(), &["biz", "add", "order", "--step", "10"], &[]);
    let token = segmint_ok(config.path(), &["token", "add", "--biz", "order"], &[]);
    let app = ServerProcess::start(&toml).await;
    mysql::not_ready_until_fixed(
        &app.remote(Duration::from_secs(30)),
        &server,
        ("order", token.trim()),
        "sync_binlog is 0, not 1",
        "SET GLOBAL sync_binlog = 1",
    )
    .await;
}

/// `mariadbd` killed (`kill -9`) while a reservation from Leaf's `leaf_alloc`
/// (`tables=leaf`) waits on a row lock: no ID from it, none twice after the restart,
/// and every one below the row's `max_id`, where Leaf goes on from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaf_mariadb_killed_during_a_reservation_gives_no_ids_from_it() {
    mysql::killed_during_a_reservation(Tables::Leaf).await;
}

/// Leaf databases (`tables=leaf`), one restored from a real backup of its data
/// directory after IDs were issued from it: fenced by the server that saw its rows
/// advance and by one started after, and no ID issued twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaf_mariadb_restored_from_a_backup_is_fenced_and_issues_no_id_twice() {
    mysql::restored_from_a_backup(Tables::Leaf).await;
}
