//! Real `segmint` processes on embedded (SQLite) files: kill -9 during traffic and
//! restart, two processes sharing the same files, graceful stop and restart.
//!
//! Every server here is the built binary run as a child process, configured through
//! `--config FILE` and `SEGMINT_BIND`; IDs are fetched over HTTP through the
//! Tinyid-compatible routes and the v1 API alike.

use crate::common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::cli::segmint_ok;
use common::http::{Remote, Via, bearer, compat_request, request, tinyid_params, try_send};
use common::{ServerProcess, config_toml_urls};
use reqwest::Method;

/// Servers and admin commands log warnings only: short logs, quick to scan in a failure.
const QUIET: [(&str, &str); 1] = [("RUST_LOG", "warn")];

/// A scratch directory with a configuration file, its embedded databases migrated,
/// one biz and a token for it.
struct Setup {
    /// Holds the configuration file and the embedded databases.
    dir: tempfile::TempDir,
    /// The configuration, as servers are started with it.
    toml: String,
    /// The file holding `toml`, for the admin commands.
    config: PathBuf,
    /// The one biz.
    biz: String,
    /// A token for `biz`.
    token: String,
}

impl Setup {
    /// Embedded databases `files` (in the scratch directory) with classes `i mod N`,
    /// migrated, with `biz` at `step` and a token for it, all through the CLI.
    fn new(files: &[&str], biz: &str, step: i64) -> Setup {
        let dir = tempfile::Builder::new()
            .prefix("segmint-embedded-")
            .tempdir()
            .unwrap();
        let urls: Vec<String> = files
            .iter()
            .map(|f| format!("sqlite://{}", dir.path().join(f).display()))
            .collect();
        // Generous timeouts: the checks here are about correctness, not latency, and
        // two processes queue on the same file locks (fsync'd commits) constantly.
        // Fixed steps: the tests reason about segments of exactly `step` and want them
        // small, so that reservations race; the adaptive step would widen them.
        let toml = config_toml_urls(
            &urls,
            "fetch_timeout_ms = 5000\nwait_timeout_ms = 10000\ncatalog_refresh_ms = 1000\nadaptive_step = false",
        );
        let config = dir.path().join("segmint.toml");
        std::fs::write(&config, &toml).unwrap();
        segmint_ok(&config, &["migrate"], &QUIET);
        segmint_ok(
            &config,
            &["biz", "add", biz, "--step", &step.to_string()],
            &QUIET,
        );
        let token = segmint_ok(&config, &["token", "add", "--biz", biz], &QUIET);
        let token = token
            .strip_suffix('\n')
            .unwrap_or_else(|| panic!("`token add` prints the token on one line: {token:?}"))
            .to_string();
        assert!(
            token.len() >= 16 && !token.contains(char::is_whitespace),
            "stdout of `token add` is the token alone: {token:?}"
        );
        Setup {
            dir,
            toml,
            config,
            biz: biz.to_string(),
            token,
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `(max_id, step, delta, remainder, version)` of the biz row in embedded file `name`,
    /// read directly with SQLite (no server needs to run).
    fn row(&self, name: &str) -> (i64, i64, i64, i64, i64) {
        let conn = rusqlite::Connection::open(self.file(name))
            .unwrap_or_else(|e| panic!("open {name}: {e}"));
        conn.busy_timeout(Duration::from_secs(5)).unwrap();
        conn.query_row(
            "SELECT max_id, step, delta, remainder, version FROM tiny_id_info WHERE biz_type = ?1",
            [&self.biz],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap_or_else(|e| panic!("read the `{}` row of {name}: {e}", self.biz))
    }

    /// `segmint serve` on this setup's configuration, answering on `/healthz`.
    async fn serve(&self) -> ServerProcess {
        ServerProcess::start_with_env(&self.toml, &QUIET).await
    }
}

/// The kinds of request the client tasks send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Route {
    /// `GET /tinyid/id/nextIdSimple` (one ID, text).
    CompatSimple,
    /// `GET /tinyid/id/nextId?batchSize=N` (JSON envelope).
    CompatBatch,
    /// `GET /v1/ids/{biz}?count=N` with a bearer token.
    V1Ids,
    /// `GET /v1/segments/{biz}`: a whole segment for the client to issue from.
    V1Segment,
}

/// An HTTP client for one server and one biz.
#[derive(Clone)]
struct Client {
    /// The server, asked with a generous timeout.
    server: Remote,
    /// The biz asked for.
    biz: String,
    /// Its token.
    token: String,
}

impl Client {
    fn new(server: &ServerProcess, setup: &Setup) -> Client {
        Client {
            server: server.remote(Duration::from_secs(20)),
            biz: setup.biz.clone(),
            token: setup.token.clone(),
        }
    }

    /// The IDs one request yields (for a segment: every ID in it), or why it failed.
    async fn request(&self, route: Route, n: usize) -> Result<Vec<i64>, String> {
        let (server, biz, token) = (&self.server, self.biz.as_str(), self.token.as_str());
        let batch = n.to_string();
        let req = match route {
            Route::CompatSimple => compat_request(
                server,
                "nextIdSimple",
                Via::Get,
                &tinyid_params(biz, token, None),
            ),
            Route::CompatBatch => compat_request(
                server,
                "nextId",
                Via::Get,
                &tinyid_params(biz, token, Some(&batch)),
            ),
            Route::V1Ids => request(
                server,
                Method::GET,
                &format!("/v1/ids/{biz}?count={n}"),
                bearer(token),
            ),
            Route::V1Segment => request(
                server,
                Method::GET,
                &format!("/v1/segments/{biz}"),
                bearer(token),
            ),
        };
        let r = try_send(req).await.map_err(|e| format!("{route:?}: {e}"))?;
        let (status, error_header, body) = (r.status, r.error_header, r.body);
        if status != 200 {
            return Err(format!("{route:?}: HTTP {status}: {body}"));
        }
        let json = || {
            serde_json::from_str::<serde_json::Value>(&body)
                .map_err(|e| format!("{route:?}: not JSON ({e}): {body}"))
        };
        let ids = match route {
            Route::CompatSimple => {
                if let Some(reason) = error_header {
                    return Err(format!("{route:?}: X-Segmint-Error: {reason}"));
                }
                body.split(',')
                    .map(|s| s.parse::<i64>())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("{route:?}: not IDs ({e}): {body:?}"))?
            }
            Route::CompatBatch => {
                let v = json()?;
                if v["code"] != 200 {
                    return Err(format!("{route:?}: Tinyid error: {body}"));
                }
                serde_json::from_value(v["data"].clone())
                    .map_err(|e| format!("{route:?}: bad data ({e}): {body}"))?
            }
            Route::V1Ids => serde_json::from_value(json()?["ids"].clone())
                .map_err(|e| format!("{route:?}: bad ids ({e}): {body}"))?,
            Route::V1Segment => segment_ids(&json()?)
                .map_err(|e| format!("{route:?}: inconsistent segment ({e}): {body}"))?,
        };
        let expected = match route {
            Route::CompatSimple => Some(1),
            Route::CompatBatch | Route::V1Ids => Some(n),
            Route::V1Segment => None,
        };
        if let Some(want) = expected
            && ids.len() != want
        {
            return Err(format!(
                "{route:?}: asked for {want} IDs, got {}: {body}",
                ids.len()
            ));
        }
        Ok(ids)
    }
}

/// Every ID of a segment as returned by `/v1/segments`: all `x` in
/// `(current_id, max_id]` with `x % delta == remainder`, checked against the
/// segment's own `first_id`, `count` and `step`.
fn segment_ids(v: &serde_json::Value) -> Result<Vec<i64>, String> {
    let field = |k: &str| v[k].as_i64().ok_or_else(|| format!("no integer `{k}`"));
    let (current, max, delta, remainder, step) = (
        field("current_id")?,
        field("max_id")?,
        field("delta")?,
        field("remainder")?,
        field("step")?,
    );
    if delta < 1 || !(0..delta).contains(&remainder) {
        return Err(format!("bad class {remainder} mod {delta}"));
    }
    if max - current != step {
        return Err(format!(
            "max_id - current_id = {} is not the step {step}",
            max - current
        ));
    }
    let ids: Vec<i64> = (current + 1..=max)
        .filter(|x| x.rem_euclid(delta) == remainder)
        .collect();
    if v["count"].as_u64() != Some(ids.len() as u64) {
        return Err(format!("count is not {}", ids.len()));
    }
    if v["first_id"].as_i64() != ids.first().copied() {
        return Err(format!("first_id is not {:?}", ids.first()));
    }
    Ok(ids)
}

/// Where an ID came from, to explain a duplicate.
#[derive(Debug, Clone, Copy)]
struct Source {
    server: usize,
    route: Route,
}

/// What one client task saw.
#[derive(Default)]
struct Outcome {
    ids: Vec<(i64, Source)>,
    ok: usize,
    /// Failures seen before the server was being killed: never acceptable.
    failures: Vec<String>,
    /// Failures seen once the kill had started: expected.
    at_kill: usize,
}

/// Sends requests (cycling through `routes`, batch sizes 1..=40) to `client` until
/// `stop`; counts the IDs received into `issued`. A failure observed while `killing`
/// is set is expected; any other is recorded as a failure.
async fn traffic(
    client: Client,
    server: usize,
    routes: &'static [Route],
    seed: usize,
    stop: Arc<AtomicBool>,
    killing: Arc<AtomicBool>,
    issued: Arc<AtomicUsize>,
) -> Outcome {
    let mut out = Outcome::default();
    let mut i = seed;
    while !stop.load(Ordering::SeqCst) {
        i += 1;
        let route = routes[i % routes.len()];
        let n = 1 + (i * 7919 + seed * 31) % 40;
        match client.request(route, n).await {
            Ok(ids) => {
                out.ok += 1;
                issued.fetch_add(ids.len(), Ordering::Relaxed);
                out.ids
                    .extend(ids.into_iter().map(|id| (id, Source { server, route })));
            }
            Err(e) => {
                if killing.load(Ordering::SeqCst) {
                    out.at_kill += 1;
                } else {
                    out.failures.push(e);
                }
                // Paces the retries after a failure.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    out
}

/// Duplicated IDs with every place each came from (at most `limit` of them).
fn duplicates(ids: &[(i64, Source)], limit: usize) -> Vec<(i64, Vec<Source>)> {
    let mut sorted: Vec<(i64, Source)> = ids.to_vec();
    sorted.sort_by_key(|(id, _)| *id);
    let mut dupes: Vec<(i64, Vec<Source>)> = Vec::new();
    for w in sorted.windows(2) {
        if w[0].0 == w[1].0 {
            match dupes.last_mut() {
                Some((id, sources)) if *id == w[0].0 => sources.push(w[1].1),
                _ => {
                    if dupes.len() == limit {
                        break;
                    }
                    dupes.push((w[0].0, vec![w[0].1, w[1].1]));
                }
            }
        }
    }
    dupes
}

const ALL_ID_ROUTES: &[Route] = &[Route::CompatBatch, Route::V1Ids, Route::CompatSimple];

/// kill -9 during traffic, several times over: no ID handed out after a restart was
/// handed out before any earlier crash, and each restart starts on a fresh segment
/// above everything issued before. After each crash the file's row also covers every
/// ID issued so far (a reservation was durable before its IDs were handed out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_traffic_never_reissues() {
    const KILLS: usize = 4;
    const TASKS: usize = 6;
    let setup = Setup::new(&["a.db"], "crash", 50);
    let mut before: Vec<(i64, Source)> = Vec::new();
    let mut max_before: Option<i64> = None;
    // max_id of the file read after the last crash: a restart starts above it.
    let mut reserved_before: Option<i64> = None;

    for round in 0..=KILLS {
        let mut server = setup.serve().await;
        let client = Client::new(&server, &setup);
        let (stop, killing) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let issued = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                tokio::spawn(traffic(
                    client.clone(),
                    round,
                    ALL_ID_ROUTES,
                    t * 1000,
                    stop.clone(),
                    killing.clone(),
                    issued.clone(),
                ))
            })
            .collect();
        // Traffic for a while before the kill, so that it falls under load.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let issued_before_kill = issued.load(Ordering::SeqCst);
        let crash = round < KILLS;
        if crash {
            // Kill while the tasks keep sending: some requests fail at the kill.
            killing.store(true, Ordering::SeqCst);
            tokio::task::block_in_place(|| server.kill9());
            // The tasks go on sending to the dead server a moment before they stop.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        stop.store(true, Ordering::SeqCst);
        let mut round_ids: Vec<(i64, Source)> = Vec::new();
        let (mut ok, mut at_kill, mut failures) = (0, 0, Vec::new());
        for t in tasks {
            let out = t.await.expect("client task");
            round_ids.extend(out.ids);
            ok += out.ok;
            at_kill += out.at_kill;
            failures.extend(out.failures);
        }
        assert!(
            failures.is_empty(),
            "round {round}: {} request(s) failed while the server was up, e.g. {:?}\n{}",
            failures.len(),
            &failures[..failures.len().min(5)],
            server.log_tail()
        );
        assert!(
            issued_before_kill > 0 && ok > TASKS,
            "round {round}: traffic ran ({ok} successful requests, {issued_before_kill} IDs before the kill)\n{}",
            server.log_tail()
        );
        if !crash {
            tokio::task::block_in_place(|| server.kill9());
        }
        println!(
            "round {round}: {ok} requests, {} IDs, {at_kill} failed at the kill",
            round_ids.len()
        );

        let dupes = duplicates(&round_ids, 10);
        assert!(
            dupes.is_empty(),
            "round {round}: duplicate IDs within one server run: {dupes:?}"
        );
        let round_min = round_ids.iter().map(|(id, _)| *id).min().unwrap();
        let round_max = round_ids.iter().map(|(id, _)| *id).max().unwrap();
        assert!(
            round_min >= 1,
            "round {round}: IDs start at 1, got {round_min}"
        );
        if let Some(max_before) = max_before {
            let mut all: Vec<(i64, Source)> = before.clone();
            all.extend(round_ids.iter().copied());
            let reissued = duplicates(&all, 10);
            assert!(
                reissued.is_empty(),
                "round {round}: IDs issued after restart {round} were issued before it (server = round of issue): {reissued:?}"
            );
            assert!(
                round_min > max_before,
                "round {round}: after the restart the smallest ID was {round_min}, but {max_before} was already issued before it: not a fresh segment"
            );
        }
        if let Some(reserved) = reserved_before {
            assert!(
                round_min > reserved,
                "round {round}: after the restart ID {round_min} was issued from the range reserved before the crash (max_id {reserved})"
            );
        }
        // Whatever the crash interrupted, the file covers every ID handed out so far.
        let (max_id, step, delta, remainder, version) = setup.row("a.db");
        assert_eq!(
            (step, delta, remainder),
            (50, 1, 0),
            "the biz row keeps its settings"
        );
        assert!(
            max_id >= round_max,
            "round {round}: after the crash a.db has max_id {max_id} (version {version}), but ID {round_max} was issued: a reservation was lost"
        );
        before.extend(round_ids);
        reserved_before = Some(max_id);
        max_before = Some(max_before.unwrap_or(0).max(round_max));
    }
}

/// Two server processes on the same two embedded files (even and odd), with a step so
/// small that their reservations race all the time: no ID is ever issued twice, both
/// classes are used, nothing fails, and each file's row covers what was issued from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_share_embedded_files() {
    const TASKS: usize = 8;
    const STEP: i64 = 20;
    const ROUTES: &[Route] = &[
        Route::CompatBatch,
        Route::V1Ids,
        Route::V1Segment,
        Route::CompatSimple,
        Route::V1Ids,
    ];
    let setup = Setup::new(&["even.db", "odd.db"], "race", STEP);
    let servers = [setup.serve().await, setup.serve().await];
    let (stop, never) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let issued = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            tokio::spawn(traffic(
                Client::new(&servers[t % 2], &setup),
                t % 2,
                ROUTES,
                t * 1000,
                stop.clone(),
                never.clone(),
                issued.clone(),
            ))
        })
        .collect();
    // At least 2 s, and on until 50k IDs (capped at 10 s on a slow disk).
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let elapsed = started.elapsed();
        if elapsed >= Duration::from_secs(10)
            || (elapsed >= Duration::from_secs(2) && issued.load(Ordering::SeqCst) >= 50_000)
        {
            break;
        }
    }
    stop.store(true, Ordering::SeqCst);
    let mut ids: Vec<(i64, Source)> = Vec::new();
    let mut failures = Vec::new();
    let mut per_route: HashMap<(usize, Route), usize> = HashMap::new();
    for t in tasks {
        let out = t.await.expect("client task");
        for (_, s) in &out.ids {
            *per_route.entry((s.server, s.route)).or_default() += 1;
        }
        ids.extend(out.ids);
        failures.extend(out.failures);
    }
    let elapsed = started.elapsed();
    let logs = format!("{}\n{}", servers[0].log_tail(), servers[1].log_tail());
    println!(
        "{} IDs in {elapsed:?}; IDs per (server, route): {per_route:?}",
        ids.len()
    );
    assert!(
        failures.is_empty(),
        "{} request(s) failed, e.g. {:?}\n{logs}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    let dupes = duplicates(&ids, 10);
    assert!(
        dupes.is_empty(),
        "duplicate IDs across two processes sharing the files (of {} IDs): {dupes:?}",
        ids.len()
    );
    for server in 0..2 {
        for route in [Route::CompatBatch, Route::V1Ids, Route::V1Segment] {
            assert!(
                per_route.get(&(server, route)).copied().unwrap_or(0) > 0,
                "server {server} issued IDs through {route:?}: {per_route:?}"
            );
        }
    }
    let max_of = |parity: i64| {
        ids.iter()
            .map(|(id, _)| *id)
            .filter(|id| id.rem_euclid(2) == parity)
            .max()
    };
    let (even_max, odd_max) = (max_of(0), max_of(1));
    assert!(
        even_max.is_some() && odd_max.is_some(),
        "both files issued IDs: largest even {even_max:?}, largest odd {odd_max:?}"
    );

    for (mut server, i) in servers.into_iter().zip(0..) {
        let status = server.sigterm(Duration::from_secs(15)).await;
        assert_eq!(
            status.code(),
            Some(0),
            "server {i} stops cleanly on SIGTERM\n{}",
            server.log_tail()
        );
    }
    let mut reservations = 0;
    for (file, remainder, max_issued) in [("even.db", 0, even_max), ("odd.db", 1, odd_max)] {
        let (max_id, step, delta, rem, version) = setup.row(file);
        assert_eq!(
            (step, delta, rem),
            (STEP, 2, remainder),
            "{file}: the row's step and class"
        );
        let max_issued = max_issued.unwrap();
        assert!(
            max_id >= max_issued,
            "{file}: max_id {max_id} (version {version}) does not cover the issued ID {max_issued}"
        );
        reservations += version;
    }
    let list = segmint_ok(&setup.config, &["biz", "list"], &QUIET);
    assert_eq!(
        list.lines().filter(|l| l.contains(" race ")).count(),
        2,
        "`biz list` shows the row of each file:\n{list}"
    );
    // Each segment holds STEP / 2 IDs of its class: the two processes between them
    // reserved at least enough segments for what they issued.
    assert!(
        reservations * STEP / 2 >= ids.len() as i64,
        "{reservations} reservations of {} IDs each cannot have issued {} distinct IDs",
        STEP / 2,
        ids.len()
    );
    println!("{reservations} reservations over the two files");
}

/// SIGTERM stops the server cleanly (exit 0); after a restart the first ID, from the
/// compat `nextIdSimple` route, is above the last one before and above the reserved
/// range the file records: the unused rest of the old segment is never reused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_survives_restart_without_gap_reuse() {
    let setup = Setup::new(&["a.db"], "calm", 100);
    // (last ID issued, max_id the file recorded) at the previous stop.
    let mut before: Option<(i64, i64)> = None;
    for run in 0..3 {
        let mut server = setup.serve().await;
        let client = Client::new(&server, &setup);
        let mut ids = Vec::new();
        for _ in 0..30 {
            let got = client
                .request(Route::CompatSimple, 1)
                .await
                .unwrap_or_else(|e| panic!("run {run}: {e}\n{}", server.log_tail()));
            ids.extend(got);
        }
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "run {run}: one sequential client gets increasing IDs: {ids:?}"
        );
        if let Some((last, reserved)) = before {
            assert!(
                ids[0] > last,
                "run {run}: the first ID after the restart, {}, is not above the last one before it, {last}",
                ids[0]
            );
            assert!(
                ids[0] > reserved,
                "run {run}: the first ID after the restart, {}, lies in the range reserved before the stop (max_id {reserved}): the old segment was reused",
                ids[0]
            );
        }
        let status = server.sigterm(Duration::from_secs(15)).await;
        assert_eq!(
            status.code(),
            Some(0),
            "run {run}: graceful stop exits 0\n{}",
            server.log_tail()
        );
        let (max_id, ..) = setup.row("a.db");
        let last = *ids.last().unwrap();
        assert!(
            max_id >= last,
            "run {run}: the file's max_id {max_id} covers the last issued ID {last}"
        );
        before = Some((last, max_id));
    }
}
