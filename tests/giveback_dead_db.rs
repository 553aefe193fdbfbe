//! Shutdown with the database gone: the real `segmint serve` binary, several bizs with
//! cached segments, PostgreSQL stopped (`pg_ctl -m immediate stop`), then SIGTERM. The
//! give-back cannot reach the database: the process must still exit within a bound
//! that does not grow with the number of bizs, say the cached IDs were wasted, and
//! once the database is back no ID is issued twice.

use crate::common;

use std::time::Duration;

use common::*;

const BIZS: usize = 10;
const STEP: i64 = 100;
/// Issued per biz before the stop: past the 20 % preload point, so both segments are
/// cached.
const ISSUED: usize = 30;

/// `max_id` of `biz`'s row.
fn max_id(pg: &PgCluster, biz: &str) -> i64 {
    pg.row(biz).split('|').next().unwrap().parse().unwrap()
}

/// How the database goes away before the stop.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// `pg_ctl -m immediate stop`: connections are refused at once.
    Stopped,
    /// Every process of the cluster stopped with SIGSTOP: connections and queries go
    /// unanswered, as with a hung host, until the fetch timeout.
    Stalled,
}

/// The processes of the cluster listening on `port`: its postmaster (found by the
/// `-p PORT` of its command line) and the postmaster's children.
fn cluster_pids(port: u16) -> Vec<u32> {
    let procs: Vec<(u32, String, u32)> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // The parent is the second field after the parenthesised command name.
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((
                pid,
                String::from_utf8_lossy(&cmdline).replace('\0', " "),
                ppid,
            ))
        })
        .collect();
    let flag = format!(" -p {port} ");
    let postmaster = procs
        .iter()
        .find(|(_, cmd, _)| cmd.contains("postgres") && cmd.contains(&flag))
        .map(|&(pid, _, _)| pid)
        .unwrap_or_else(|| panic!("no postmaster on port {port}"));
    let mut pids = vec![postmaster];
    pids.extend(
        procs
            .iter()
            .filter(|&&(_, _, ppid)| ppid == postmaster)
            .map(|&(pid, _, _)| pid),
    );
    pids
}

/// Resumes stalled processes when dropped, so that a failed test still leaves a
/// cluster that can be stopped.
struct Resume(Vec<u32>);

impl Drop for Resume {
    fn drop(&mut self) {
        // No assertion: this may run while a failed test unwinds.
        for pid in &self.0 {
            let _ = std::process::Command::new("kill")
                .args(["-s", "CONT", &pid.to_string()])
                .status();
        }
    }
}

/// Sends `signal` to each of `pids`. A backend may exit between the listing and the
/// signal (a connection closed by the pool): a process gone is not a failure.
fn signal(signal: &str, pids: &[u32]) {
    for pid in pids {
        let sent = std::process::Command::new("kill")
            .args(["-s", signal, &pid.to_string()])
            .status()
            .unwrap();
        let gone = !std::path::Path::new(&format!("/proc/{pid}")).exists();
        assert!(sent.success() || gone, "kill -s {signal} {pid}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_the_database_stopped_exits_promptly_and_wastes_the_cache() {
    stop_with_the_database_gone(Fault::Stopped).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_the_database_stalled_exits_promptly_and_wastes_the_cache() {
    stop_with_the_database_gone(Fault::Stalled).await;
}

async fn stop_with_the_database_gone(fault: Fault) {
    let pg = PgCluster::start();
    let extra = "preload_percent = 20\nadaptive_step = false\nfetch_timeout_ms = 1000";
    let toml = config_toml(&[&pg], extra);
    let config = config(&[&pg], extra);
    let bizs: Vec<String> = (0..BIZS).map(|i| format!("biz{i}")).collect();
    let mut tokens = Vec::new();
    for biz in &bizs {
        tokens.push(setup_biz(&config, biz, STEP, false).await);
    }

    let mut server = ServerProcess::start(&toml).await;
    let base = server.base.clone();
    {
        // Dropped before the stop: no idle keep-alive connection for it to wait on.
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        for (biz, token) in bizs.iter().zip(&tokens) {
            let r = http
                .get(format!("{base}/v1/ids/{biz}?count={ISSUED}"))
                .bearer_auth(token)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            let body: serde_json::Value = r.json().await.unwrap();
            let ids: Vec<i64> = serde_json::from_value(body["ids"].clone()).unwrap();
            assert_eq!(ids, (1..=ISSUED as i64).collect::<Vec<_>>());
        }
    }
    // Each biz prefetches its second segment: the rows stand at two steps.
    eventually(
        Duration::from_secs(10),
        "every biz prefetches",
        async || {
            let behind = bizs
                .iter()
                .map(|biz| (biz, tokio::task::block_in_place(|| max_id(&pg, biz))))
                .find(|&(_, max)| max != 2 * STEP);
            match behind {
                None => Ok(()),
                Some((biz, max)) => Err(format!("{biz} at max_id {max}")),
            }
        },
    )
    .await;

    let stalled = match fault {
        Fault::Stopped => {
            tokio::task::block_in_place(|| pg.stop());
            Resume(Vec::new())
        }
        Fault::Stalled => {
            let resume = Resume(cluster_pids(pg.port));
            signal("STOP", &resume.0);
            resume
        }
    };
    // Drain and worker stop take about a second; the give-back is bounded on its own,
    // whatever the number of bizs (sequential, it took bizs × 2 × fetch_timeout).
    let took = server.terminate_within(Duration::from_secs(6)).await;
    let text = server.log_text();
    drop(server);
    drop(stalled);
    let Some((took, status)) = took else {
        panic!("still running 6 s after SIGTERM with the database gone; log:\n{text}");
    };
    assert_eq!(status.code(), Some(0), "{text}");
    let cached = BIZS as u64 * (2 * STEP as u64 - ISSUED as u64);
    assert!(
        text.contains(&format!("given_back=0 wasted={cached}")),
        "the log does not count {cached} wasted IDs:\n{text}"
    );
    eprintln!("stopped in {took:?} with {BIZS} bizs and the database down");

    // Back up: every row is above every issued ID, and a new server continues after
    // them. (A give-back the stalled database received may still commit once it
    // resumes: it moves the row down to the last issued ID, never below.)
    if fault == Fault::Stopped {
        tokio::task::block_in_place(|| pg.start_again());
    }
    for biz in &bizs {
        let max = tokio::task::block_in_place(|| max_id(&pg, biz));
        assert!(
            max >= ISSUED as i64,
            "{biz}: row at {max}, below an issued ID"
        );
        if fault == Fault::Stopped {
            assert_eq!(max, 2 * STEP, "{biz}: nothing could be given back");
        }
    }
    let app = spawn_app(config).await;
    for (biz, token) in bizs.iter().zip(&tokens) {
        let ids = app.ids(biz, token, 3).await;
        assert!(
            ids.iter().all(|&id| id > ISSUED as i64),
            "{biz}: an ID issued before the stop came again: {ids:?}"
        );
    }
    app.stop().await;
}
