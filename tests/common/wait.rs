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
