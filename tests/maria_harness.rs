//! The MariaDB harness (`common::maria`): throwaway servers start side by side, run
//! SQL as `a|b` lines, keep committed rows across a crash and a clean shutdown, and
//! share nothing.

use crate::common;

use std::time::Instant;

use common::MariaServer;

/// Two servers started at once, as parallel tests do.
fn two_servers() -> (MariaServer, MariaServer) {
    std::thread::scope(|s| {
        let a = s.spawn(|| {
            let started = Instant::now();
            let server = MariaServer::start();
            eprintln!("server a started in {:?}", started.elapsed());
            server
        });
        let b = s.spawn(|| {
            let started = Instant::now();
            let server = MariaServer::start();
            eprintln!("server b started in {:?}", started.elapsed());
            server
        });
        (
            a.join().expect("start server a"),
            b.join().expect("start server b"),
        )
    })
}

#[test]
fn servers_keep_committed_rows_across_a_crash_and_share_nothing() {
    let (a, b) = two_servers();
    assert_ne!(a.port, b.port);
    assert_ne!(a.data(), b.data());
    assert_eq!(
        a.url(),
        format!("mysql://root@127.0.0.1:{}/segmint", a.port)
    );

    // The settings the harness gives, and the account of the URL.
    assert_eq!(a.sql("SELECT @@innodb_flush_log_at_trx_commit"), "1");
    assert_eq!(
        a.sql("SELECT @@port, @@bind_address"),
        format!("{}|127.0.0.1", a.port)
    );
    assert_eq!(
        a.sql("SELECT CURRENT_USER(), DATABASE()"),
        "root@127.0.0.1|segmint"
    );
    assert_eq!(
        a.sql("SHOW GRANTS").lines().next(),
        Some("GRANT ALL PRIVILEGES ON *.* TO `root`@`127.0.0.1` WITH GRANT OPTION")
    );
    assert_eq!(
        a.sql("SELECT @@character_set_server, @@character_set_database"),
        "utf8mb4|utf8mb4"
    );

    // Rows as `a|b` lines; NULL as an empty field, apart from the string 'NULL';
    // markup and a newline in a value come back whole.
    a.sql(
        "CREATE TABLE t (k VARCHAR(20) PRIMARY KEY, v BIGINT NULL) ENGINE=InnoDB;
         INSERT INTO t VALUES ('one', 1), ('none', NULL), ('NULL', 3), ('<&\">', 4), ('x\\ny', 5)",
    );
    assert_eq!(
        a.sql("SELECT k, v FROM t WHERE v IS NULL OR v < 4 ORDER BY v"),
        "none|\none|1\nNULL|3"
    );
    assert_eq!(a.sql("SELECT k FROM t WHERE v = 4"), "<&\">");
    assert_eq!(a.sql("SELECT k FROM t WHERE v = 5"), "x\ny");
    assert_eq!(a.sql("SELECT k FROM t WHERE v > 100"), "");
    // Every result set, in order.
    assert_eq!(a.sql("SELECT 1; DO 0; SELECT 'two', NULL"), "1\ntwo|");

    // The other server has none of it.
    assert_eq!(b.sql("SHOW TABLES"), "");
    b.sql(
        "CREATE TABLE t (k VARCHAR(20) PRIMARY KEY, v BIGINT NULL); INSERT INTO t VALUES ('b', 2)",
    );
    assert_eq!(b.sql("SELECT k, v FROM t"), "b|2");

    // A crash keeps what was committed, not what was not; same port after.
    a.sql("START TRANSACTION; UPDATE t SET v = 10 WHERE k = 'one'; COMMIT");
    let pid = a.pid().expect("a runs");
    a.stop();
    assert_eq!(a.pid(), None);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "mariadbd {pid} still runs after stop()"
    );
    let port = a.port;
    a.start_again();
    assert_eq!(a.port, port);
    assert_ne!(a.pid(), Some(pid));
    assert_eq!(a.sql("SELECT v FROM t WHERE k = 'one'"), "10");
    assert_eq!(a.sql("SELECT count(*) FROM t"), "5");
    assert!(
        std::fs::read_to_string(a.log())
            .unwrap()
            .contains("ready for connections"),
        "the log is at {}",
        a.log().display()
    );

    // So does a clean shutdown.
    a.sql("INSERT INTO t VALUES ('after', 6)");
    a.shutdown();
    a.start_again();
    assert_eq!(a.sql("SELECT v FROM t WHERE k = 'after'"), "6");

    assert_eq!(b.sql("SELECT k, v FROM t"), "b|2");
}

#[test]
fn failed_sql_panics_with_the_error() {
    let server = MariaServer::start();
    let failed = std::panic::catch_unwind(|| server.sql("SELECT * FROM missing"))
        .expect_err("SQL on a missing table must panic");
    let message = failed
        .downcast_ref::<String>()
        .expect("a formatted panic message");
    assert!(message.contains("doesn't exist"), "{message}");
    assert!(message.contains("SELECT * FROM missing"), "{message}");
    // The server is still there.
    assert_eq!(server.sql("SELECT 1 + 1"), "2");
}
