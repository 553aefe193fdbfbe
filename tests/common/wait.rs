//! Waiting for a condition: one polling loop for every test that waits on something
//! outside it (a background fetch, a database coming back, a catalog refresh).

use std::time::{Duration, Instant};

/// How often [`eventually`] checks again.
const POLL: Duration = Duration::from_millis(20);

/// Checks `check` until it returns `Ok`, every [`POLL`], for at most `limit`; then
/// panics naming `what` and the last answer `check` gave (its `Err`). A check may also
/// panic itself on an answer that must never come.
pub async fn eventually<T>(
    limit: Duration,
    what: &str,
    check: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    eventually_every(POLL, limit, what, check).await
}

/// [`eventually`], checking every `every`: for a check that costs too much to run every
/// [`POLL`] (a Prometheus query), or whose answer changes only that often.
pub async fn eventually_every<T>(
    every: Duration,
    limit: Duration,
    what: &str,
    mut check: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(last) if Instant::now() >= deadline => {
                panic!("{what}: not within {limit:?}; last: {last}")
            }
            Err(_) => tokio::time::sleep(every).await,
        }
    }
}

/// The database `name` as `/readyz` shows it.
pub async fn readyz_database(app: &super::TestApp, name: &str) -> serde_json::Value {
    let (_, body) = app.get_v1("/readyz", None).await;
    body["databases"]
        .as_array()
        .and_then(|dbs| dbs.iter().find(|d| d["name"] == name).cloned())
        .unwrap_or_else(|| panic!("no database {name} in {body}"))
}

/// Waits until `/readyz` shows `name` fenced (or not), within `limit`.
pub async fn until_fenced(
    app: &super::TestApp,
    name: &str,
    fenced: bool,
    limit: Duration,
) -> serde_json::Value {
    eventually(limit, &format!("{name} fenced: {fenced}"), async || {
        let db = readyz_database(app, name).await;
        if db["fenced"].is_string() == fenced {
            Ok(db)
        } else {
            Err(db.to_string())
        }
    })
    .await
}

/// Waits until `sql` on `db` answers `want`, within `limit`; `what` names the state.
pub async fn until_sql(db: &super::PgCluster, sql: &str, want: &str, what: &str, limit: Duration) {
    eventually(limit, what, async || match db.psql(sql) {
        got if got == want => Ok(()),
        got => Err(format!("{sql} answered {got:?}, not {want:?}")),
    })
    .await
}

/// Waits until a background locker (`BEGIN; SELECT … FOR UPDATE; SELECT pg_sleep(…)`,
/// see `PgCluster::psql_background`) holds its lock: a session of `db` sleeps in
/// `pg_sleep` with a lock on `table` granted, so its `FOR UPDATE` is done.
pub async fn until_locker_sleeps(db: &super::PgCluster, table: &str, limit: Duration) {
    let sql = format!(
        "SELECT count(*) FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid \
         JOIN pg_class c ON c.oid = l.relation \
         WHERE a.wait_event = 'PgSleep' AND l.granted AND c.relname = '{table}'"
    );
    let what = format!("a background locker holds its lock on {table}");
    until_sql(db, &sql, "1", &what, limit).await
}

/// Waits until `n` of segmint's connections to `db` wait on a lock (a reservation
/// caught behind a locker).
pub async fn until_segmint_waits_on_lock(db: &super::PgCluster, n: usize, limit: Duration) {
    let sql = "SELECT count(*) FROM pg_stat_activity \
               WHERE application_name = 'segmint' AND wait_event_type = 'Lock'";
    let what = format!("{n} of segmint's connections wait on a lock");
    until_sql(db, sql, &n.to_string(), &what, limit).await
}

/// Catalog reads of the database `name` (full and of the feed) that `target`'s
/// `/metrics` shows.
pub async fn catalog_reads(target: &impl super::http::Target, name: &str) -> f64 {
    let mut reads = 0.0;
    for kind in ["feed", "full"] {
        let series = format!("segmint_catalog_reads_total{{database=\"{name}\",read=\"{kind}\"}}");
        reads += super::http::metric(target, &series).await;
    }
    reads
}

/// Waits until `target` has read the database `name` `more` times after `from` reads
/// (as [`catalog_reads`] counts them), within `limit`. A read is counted just before
/// the catalog takes it in, and refreshes run in turn: of two reads counted after
/// `from`, the first is in the catalog.
pub async fn until_catalog_read(
    target: &impl super::http::Target,
    name: &str,
    from: f64,
    more: u32,
    limit: Duration,
) {
    let what = format!("{more} more catalog read(s) of {name}");
    eventually(limit, &what, async || {
        let reads = catalog_reads(target, name).await;
        if reads >= from + f64::from(more) {
            Ok(())
        } else {
            Err(format!("{reads} reads, from {from}"))
        }
    })
    .await
}
