//! Storage faults under a real `segmint serve` on an embedded (SQLite) store: a full
//! file system and a write that fails with an I/O error. Every reservation whose commit
//! failed must give no IDs: no ID is issued twice, requests fail with "unavailable"
//! while the fault lasts, the failure is logged, and the store's `max_id` covers every
//! ID issued once the fault is gone.
//!
//! The faults are real: a 3 MB tmpfs filled with a ballast file (needs root to mount),
//! and the server's file-size limit lowered from outside with `prlimit`, which makes
//! the kernel refuse writes that grow the write-ahead log (EFBIG).

use crate::common;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{
    ChildGuard, child_healthy, config_toml_urls, eventually, free_port, segmint_bin, serve_command,
};

/// IDs per request, as in the report.
const BATCH: usize = 7;

/// Runs `segmint --config FILE args…`; returns whether it succeeded, stdout, stderr.
fn segmint(config: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(segmint_bin())
        .arg("--config")
        .arg(config)
        .args(args)
        .env("RUST_LOG", "warn")
        .env_remove("SEGMINT_CONFIG")
        .output()
        .unwrap_or_else(|e| panic!("run segmint {args:?}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// As [`segmint`], asserting success; returns stdout.
fn segmint_ok(config: &Path, args: &[&str]) -> String {
    let (ok, stdout, stderr) = segmint(config, args);
    assert!(
        ok,
        "segmint {args:?} failed:\nstdout: {stdout}\nstderr: {stderr}"
    );
    stdout
}

/// A 3 MB tmpfs mounted on a fresh directory, unmounted on drop.
struct Tmpfs {
    /// The mount point; removed once unmounted.
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount() -> Tmpfs {
        let dir = tempfile::Builder::new()
            .prefix("segmint-tmpfs-")
            .tempdir()
            .unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=3m", "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "this test needs a real full file system: `mount -t tmpfs` failed (run the tests as root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: a server still holding files there must not keep the mount behind.
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// A store at `db`, migrated, with biz `faulty` (step 10) and a token for it; the
/// configuration file lives in `config_dir`.
struct Setup {
    /// The configuration file every command and server here is given.
    config: PathBuf,
    /// A token granted `faulty`.
    token: String,
}

impl Setup {
    fn new(config_dir: &Path, db: &Path) -> Setup {
        let toml = config_toml_urls(
            &[format!("sqlite://{}", db.display())],
            "adaptive_step = false\nbackoff_initial_ms = 50\nbackoff_max_ms = 200",
        );
        let config = config_dir.join("segmint.toml");
        std::fs::write(&config, toml).unwrap();
        segmint_ok(&config, &["migrate"]);
        segmint_ok(&config, &["biz", "add", "faulty", "--step", "10"]);
        let token = segmint_ok(&config, &["token", "add", "--biz", "faulty"])
            .trim()
            .to_string();
        Setup { config, token }
    }

    /// The biz's `max_id` as `segmint biz list` reports it.
    fn listed_max_id(&self) -> i64 {
        let out = segmint_ok(&self.config, &["biz", "list"]);
        let line = out
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some("faulty"))
            .unwrap_or_else(|| panic!("no row of `faulty` in `biz list`:\n{out}"));
        line.split_whitespace().nth(2).unwrap().parse().unwrap()
    }
}

/// A `segmint serve` child whose log (stderr) is collected as it is written. The log
/// goes through a pipe, not a file: a file would be subject to the faults too.
struct Server {
    /// The process, killed on drop.
    child: ChildGuard,
    /// `http://127.0.0.1:port`.
    base: String,
    /// Everything the server logged so far.
    log: Arc<Mutex<String>>,
    /// Long timeout: a request waiting out a failing store must not look like a hang.
    http: reqwest::Client,
}

impl Server {
    /// Starts `cmd` (a [`serve_command`], possibly wrapped) listening on `port`.
    async fn start(mut cmd: Command, port: u16) -> Server {
        let mut child = cmd
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn segmint serve");
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let mut child = ChildGuard(child);
        let base = format!("http://127.0.0.1:{port}");
        if let Err(e) = child_healthy(&mut child.0, &base, Duration::from_secs(20)).await {
            panic!("{e}\n{}", log.lock().unwrap());
        }
        Server {
            child,
            base,
            log,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(20))
                .build()
                .unwrap(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.0.id()
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// One request for [`BATCH`] IDs, through the v1 API on even `n` and the Tinyid
    /// `nextId` route on odd `n`: the IDs, or the failure as (HTTP status, body).
    async fn request(&self, token: &str, n: usize) -> Result<Vec<i64>, (u16, String)> {
        let req = match n % 2 {
            0 => self
                .http
                .get(format!("{}/v1/ids/faulty?count={BATCH}", self.base))
                .bearer_auth(token),
            _ => self.http.get(format!(
                "{}/tinyid/id/nextId?bizType=faulty&token={token}&batchSize={BATCH}",
                self.base
            )),
        };
        let r = req.send().await.map_err(|e| (0, e.to_string()))?;
        let status = r.status().as_u16();
        let body: serde_json::Value = r.json().await.map_err(|e| (status, e.to_string()))?;
        let ids = match n % 2 {
            0 if status == 200 => &body["ids"],
            1 if status == 200 && body["code"] == 200 => &body["data"],
            _ => return Err((status, body.to_string())),
        };
        Ok(serde_json::from_value(ids.clone()).expect("a list of IDs"))
    }
}

/// Every ID issued so far, and the failures seen.
#[derive(Default)]
struct Issued {
    /// Every ID answered with success, in order.
    ids: Vec<i64>,
    /// Every failed request's HTTP status and body.
    failures: Vec<(u16, String)>,
    /// Requests made; alternates the route used.
    requests: usize,
}

impl Issued {
    /// One request for IDs; whether it gave any.
    async fn take(&mut self, server: &Server, token: &str) -> bool {
        self.requests += 1;
        match server.request(token, self.requests).await {
            Ok(ids) => {
                assert_eq!(ids.len(), BATCH, "a 200 carries every ID asked for");
                self.ids.extend(ids);
                true
            }
            Err(failure) => {
                self.failures.push(failure);
                false
            }
        }
    }

    fn assert_unique(&self, when: &str) {
        let mut seen = HashSet::new();
        let dups: Vec<i64> = self
            .ids
            .iter()
            .copied()
            .filter(|id| !seen.insert(*id))
            .collect();
        assert!(
            dups.is_empty(),
            "{when}: {} of {} IDs issued were duplicates, e.g. {:?}",
            dups.len(),
            self.ids.len(),
            &dups[..dups.len().min(10)]
        );
    }
}

/// A failure that says the store is unavailable: 503 on v1, Tinyid code 6.
fn is_unavailable((status, body): &(u16, String)) -> bool {
    match status {
        503 => body.contains("\"unavailable\""),
        200 => body.contains("\"code\":6"),
        _ => false,
    }
}

/// Runs the scenario on a running server: IDs before, `fault_on`, many requests
/// (some must fail, all as unavailable; the log must show `logged`), `fault_off`,
/// IDs again; no duplicate anywhere, and the store's `max_id` covers every ID.
async fn survives(
    setup: &Setup,
    server: &Server,
    fault_on: impl FnOnce(),
    fault_off: impl FnOnce(),
    logged: &str,
) {
    let mut issued = Issued::default();
    for _ in 0..20 {
        assert!(
            issued.take(server, &setup.token).await,
            "before the fault: {:?}",
            issued.failures
        );
    }
    fault_on();
    let ok_before = issued.ids.len();
    for _ in 0..400 {
        issued.take(server, &setup.token).await;
    }
    let during = issued.ids.len() - ok_before;
    issued.assert_unique("while the store could not commit");
    assert!(
        !issued.failures.is_empty(),
        "every one of 400 requests succeeded ({during} IDs) although the store could not commit"
    );
    let odd: Vec<_> = issued
        .failures
        .iter()
        .filter(|f| !is_unavailable(f))
        .collect();
    assert!(
        odd.is_empty(),
        "failures other than 'unavailable': {:?}",
        &odd[..odd.len().min(5)]
    );
    let log = server.log();
    assert!(
        log.contains(logged),
        "the server's log does not mention {logged:?}:\n{log}"
    );
    eprintln!(
        "during the fault: {} requests failed as unavailable, {during} IDs issued (each from a committed segment)",
        issued.failures.len()
    );

    fault_off();
    // Ready first: the database's back-off after the fault's last failure is over (a
    // request may be answered from IDs cached before it while it lasts, and the next
    // one refused as unavailable until it ends).
    eventually(
        Duration::from_secs(20),
        "the store ready and IDs once the fault is lifted",
        async || {
            let ready = reqwest::get(format!("{}/readyz", server.base))
                .await
                .map_err(|e| e.to_string())?;
            if !ready.status().is_success() {
                return Err(format!("/readyz: {}", ready.status()));
            }
            if issued.take(server, &setup.token).await {
                Ok(())
            } else {
                Err(format!("{:?}", issued.failures.last()))
            }
        },
    )
    .await;
    for _ in 0..50 {
        assert!(
            issued.take(server, &setup.token).await,
            "after the fault: {:?}",
            issued.failures.last()
        );
    }
    issued.assert_unique("over the whole run");
    let highest = issued.ids.iter().copied().max().unwrap();
    let listed = setup.listed_max_id();
    assert!(
        listed >= highest,
        "`biz list` shows max_id {listed}, below the issued ID {highest}: a restart would issue it again"
    );
}

#[tokio::test]
async fn full_file_system_gives_no_duplicate() {
    let fs = Tmpfs::mount();
    let setup = Setup::new(fs.path(), &fs.path().join("segmint.db"));
    let port = free_port();
    let server = Server::start(serve_command(&setup.config, port), port).await;
    let ballast = fs.path().join("ballast");
    survives(
        &setup,
        &server,
        || {
            let mut file = std::fs::File::create(&ballast).unwrap();
            let chunk = vec![0x5au8; 64 * 1024];
            let err = loop {
                if let Err(e) = file.write_all(&chunk) {
                    break e;
                }
            };
            assert_eq!(
                err.raw_os_error(),
                Some(28),
                "the ballast stops on ENOSPC: {err}"
            );
        },
        || std::fs::remove_file(&ballast).unwrap(),
        "database or disk is full",
    )
    .await;
}

/// After a full disk on a small file system (the 3 MB tmpfs), the store gets its
/// space back: once the ballast is removed, IDs come again within seconds, and keep
/// coming over thousands of reservations whose write-ahead log, left to SQLite's
/// automatic checkpoint (at about 4 MB), would fill the file system again. A biz added
/// afterwards on the same file works too.
#[tokio::test]
async fn a_small_file_system_serves_again_once_space_returns() {
    let fs = Tmpfs::mount();
    let db = fs.path().join("segmint.db");
    let setup = Setup::new(fs.path(), &db);
    let port = free_port();
    let server = Server::start(serve_command(&setup.config, port), port).await;
    let ballast = fs.path().join("ballast");
    let mut issued = Issued::default();
    for _ in 0..20 {
        assert!(
            issued.take(&server, &setup.token).await,
            "{:?}",
            issued.failures
        );
    }
    {
        let mut file = std::fs::File::create(&ballast).unwrap();
        let chunk = vec![0x5au8; 64 * 1024];
        while file.write_all(&chunk).is_ok() {}
    }
    // The disk is full: requests fail (each cached segment runs out) as unavailable.
    eventually(
        Duration::from_secs(20),
        "a request refused on the full disk",
        async || match issued.take(&server, &setup.token).await {
            true => Err("served".to_owned()),
            false => Ok(()),
        },
    )
    .await;
    std::fs::remove_file(&ballast).unwrap();
    eventually(
        Duration::from_secs(10),
        "IDs once the space is back",
        async || match issued.take(&server, &setup.token).await {
            true => Ok(()),
            false => Err(format!("{:?}", issued.failures.last())),
        },
    )
    .await;
    // 3,000 requests of 7 IDs at step 10: over 2,000 reservations, each a commit of
    // pages of 4 KB in the write-ahead log.
    let failed_before = issued.failures.len();
    for _ in 0..3_000 {
        issued.take(&server, &setup.token).await;
    }
    let wal = std::fs::metadata(format!("{}-wal", db.display())).map_or(0, |m| m.len());
    assert_eq!(
        issued.failures.len(),
        failed_before,
        "requests failed after the space came back (write-ahead log {wal} bytes): {:?}",
        issued.failures.last()
    );
    issued.assert_unique("over the whole run");
    let log = server.log();
    assert!(
        log.contains("the write-ahead log is checkpointed and truncated after a full disk"),
        "the store did not reclaim its log's space:\n{log}"
    );
    segmint_ok(&setup.config, &["biz", "add", "after", "--step", "10"]);
}

#[tokio::test]
async fn write_error_gives_no_duplicate() {
    let dir = tempfile::Builder::new()
        .prefix("segmint-ioerr-")
        .tempdir()
        .unwrap();
    let db = dir.path().join("segmint.db");
    let setup = Setup::new(dir.path(), &db);
    let port = free_port();
    // SIGXFSZ ignored (and kept so across exec): a write past the file-size limit then
    // fails with EFBIG instead of killing the server.
    let serve = serve_command(&setup.config, port);
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("trap '' XFSZ; exec \"$0\" \"$@\"")
        .arg(serve.get_program())
        .args(serve.get_args())
        .stdin(Stdio::null());
    for (key, value) in serve.get_envs() {
        match value {
            Some(v) => cmd.env(key, v),
            None => cmd.env_remove(key),
        };
    }
    let server = Server::start(cmd, port).await;
    let pid = server.pid().to_string();
    // Only the soft limit moves: raising a hard limit again needs CAP_SYS_RESOURCE.
    let prlimit = |limit: &str| {
        let out = Command::new("prlimit")
            .args(["--pid", &pid, &format!("--fsize={limit}")])
            .output()
            .expect("run prlimit");
        assert!(
            out.status.success(),
            "prlimit --fsize={limit}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let wal = PathBuf::from(format!("{}-wal", db.display()));
    survives(
        &setup,
        &server,
        || {
            let size = std::fs::metadata(&wal).expect("the write-ahead log").len();
            assert!(size > 0, "the write-ahead log has frames");
            prlimit(&format!("{size}:"));
        },
        || prlimit("unlimited:"),
        "disk I/O error",
    )
    .await;
}

/// Runs `cmd` (a `segmint serve`) expecting it to refuse to start: its exit status and
/// stderr. Fails if it is still running after 20 s (it serves instead of refusing).
async fn refused(mut cmd: Command) -> (std::process::ExitStatus, String) {
    let mut child = ChildGuard(
        cmd.env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn segmint serve"),
    );
    let status = eventually(
        Duration::from_secs(20),
        "segmint serve exits (it started instead of refusing)",
        async || child.0.try_wait().unwrap().ok_or_else(|| "running".into()),
    )
    .await;
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.0.stderr.take().unwrap(), &mut stderr).unwrap();
    (status, stderr)
}

/// Removes an embedded store: the file and its write-ahead log and shared memory.
fn delete_store(db: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let file = PathBuf::from(format!("{}{suffix}", db.display()));
        if file.exists() {
            std::fs::remove_file(&file).unwrap();
        }
    }
}

/// A store that existed and issued IDs, then was deleted: `serve` refuses to start
/// over, naming the file and why, and creates nothing; `biz list` refuses likewise.
/// An explicit initialisation (`migrate`, `serve --init`) creates a new one.
#[tokio::test]
async fn deleted_store_is_refused_until_initialised() {
    let dir = tempfile::Builder::new()
        .prefix("segmint-missing-")
        .tempdir()
        .unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let db = data.join("segmint.db");
    let setup = Setup::new(dir.path(), &db);
    let port = free_port();
    let mut server = Server::start(serve_command(&setup.config, port), port).await;
    let mut issued = Issued::default();
    assert!(issued.take(&server, &setup.token).await);
    assert_eq!(server.child.terminate(), Some(0));
    delete_store(&db);

    let (status, stderr) = refused(serve_command(&setup.config, free_port())).await;
    assert!(!status.success(), "exit status {status}");
    assert!(
        stderr.contains(&db.display().to_string()) && stderr.contains("not a first start"),
        "the refusal names the file and why:\n{stderr}"
    );
    assert!(!db.exists(), "a refused start creates no store");
    let (ok, _, stderr) = segmint(&setup.config, &["biz", "list"]);
    assert!(
        !ok && stderr.contains(&db.display().to_string()) && !db.exists(),
        "`biz list` on a missing store: {stderr}"
    );

    let mut init = serve_command(&setup.config, port);
    init.arg("--init");
    let server = Server::start(init, port).await;
    assert!(db.exists(), "`serve --init` creates the store");
    assert!(
        server.log().contains("creating a new embedded store"),
        "{}",
        server.log()
    );
    drop(server);
    delete_store(&db);
    segmint_ok(&setup.config, &["migrate"]);
    assert!(db.exists(), "`migrate` creates the store");
}

/// The quick start: `segmint serve` with no configuration in a fresh directory creates
/// data/segmint.db and serves; once that file is deleted (data/ stays), it refuses.
#[tokio::test]
async fn quick_start_creates_the_store_once() {
    let dir = tempfile::Builder::new()
        .prefix("segmint-fresh-")
        .tempdir()
        .unwrap();
    let port = free_port();
    let serve = || {
        let mut cmd = Command::new(segmint_bin());
        cmd.arg("serve")
            .current_dir(dir.path())
            .env("SEGMINT_BIND", format!("127.0.0.1:{port}"))
            .env_remove("SEGMINT_CONFIG")
            .stdin(Stdio::null());
        cmd
    };
    let mut server = Server::start(serve(), port).await;
    let db = dir.path().join("data/segmint.db");
    assert!(db.exists(), "the first start creates {}", db.display());
    assert_eq!(server.child.terminate(), Some(0));
    delete_store(&db);
    let (status, stderr) = refused(serve()).await;
    assert!(
        !status.success() && stderr.contains(&db.display().to_string()),
        "{status}: {stderr}"
    );
}
