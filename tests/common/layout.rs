//! A cluster of PostgreSQL databases for layout changes (`segmint db add` / `db remove`):
//! configurations naming some of them with the classes a change gives, the admin
//! commands run against them (also killed midway), and checks of their biz rows.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::cli::{CliRun, config_file, segmint_cli, segmint_ok};
use super::{ChildGuard, Databases, Kind, segmint_bin};

/// How often a running change rewrites its layout row in the layout tests' clusters
/// (`protocol.heartbeat_ms`; 1 s by default).
pub const HEARTBEAT: Duration = Duration::from_millis(250);

/// How long a change's row must stay the same before the layout tests' servers and
/// commands take it for cut off (`protocol.silent_ms`; 3 s by default). Ten beats: a
/// command whose beat comes 2.25 s late (a loaded machine) is still taken for alive,
/// more room than the defaults leave (2 s).
pub const SILENT: Duration = Duration::from_millis(2500);

/// The configuration's catalog refresh (`catalog_refresh_ms`).
pub const REFRESH: Duration = Duration::from_millis(500);

/// Configuration naming the databases `members` (indexes into `dbs`, as `pg{i}`), the
/// k-th of n with the class `k mod n`: the classes `segmint db add/remove` gives them.
/// Servers and commands alike get the short [`HEARTBEAT`] and [`SILENT`], so that a
/// cut-off change is taken over sooner, as every process of a cluster must share them.
pub fn toml_for(dbs: &Databases, members: &[usize]) -> String {
    let urls = dbs.urls();
    let n = members.len();
    let mut toml = format!(
        "bind = \"127.0.0.1:0\"\nworkers = 2\nfetch_timeout_ms = 1000\nwait_timeout_ms = 3000\n\
         backoff_initial_ms = 100\nbackoff_max_ms = 400\ncatalog_refresh_ms = {}\nadaptive_step = false\n\
         protocol = {{ heartbeat_ms = {}, silent_ms = {} }}\n",
        REFRESH.as_millis(),
        HEARTBEAT.as_millis(),
        SILENT.as_millis(),
    );
    for (k, &i) in members.iter().enumerate() {
        toml.push_str(&format!(
            "[[databases]]\nname = \"pg{i}\"\nurl = \"{}\"\ndelta = {n}\nremainder = {k}\n",
            urls[i]
        ));
    }
    toml
}

/// Runs `segmint args…` with the configuration `toml`, which may fail.
pub fn cli(toml: &str, args: &[&str]) -> CliRun {
    let file = config_file(toml);
    segmint_cli(file.path(), args, &[])
}

/// Runs `segmint args…` with the configuration `toml`; must succeed. Its output.
pub fn cli_ok(toml: &str, args: &[&str]) -> String {
    let file = config_file(toml);
    segmint_ok(file.path(), args, &[])
}

/// Starts `segmint args…` and kills it (SIGKILL) once it printed `lines` lines
/// containing `marker`. Returns what it printed; panics when it ended first.
pub fn kill_midway(toml: &str, args: &[&str], marker: &str, lines: usize) -> String {
    let file = config_file(toml);
    // Its errors go to a file, read only when it ended first (a pipe left unread could
    // fill and stall it).
    let errors = tempfile::NamedTempFile::new().expect("a file for stderr");
    let mut child = ChildGuard(
        Command::new(segmint_bin())
            .arg("--config")
            .arg(file.path())
            .args(args)
            .env_remove("SEGMINT_CONFIG")
            .stdout(Stdio::piped())
            .stderr(errors.reopen().expect("reopen the stderr file"))
            .spawn()
            .expect("start segmint"),
    );
    let out = child.0.stdout.take().expect("stdout");
    let mut seen = 0;
    let mut printed = String::new();
    for line in BufReader::new(out).lines() {
        let line = line.expect("read the command's output");
        printed.push_str(&line);
        printed.push('\n');
        if line.contains(marker) {
            seen += 1;
            if seen == lines {
                child.0.kill().expect("kill segmint");
                let _ = child.0.wait();
                return printed;
            }
        }
    }
    let _ = child.0.wait();
    let stderr = std::fs::read_to_string(errors.path()).unwrap_or_default();
    panic!(
        "segmint {args:?} ended before {lines} lines with `{marker}`:\n{printed}\nstderr:\n{stderr}"
    );
}

/// Unfrozen rows of `biz` on each database: `(db, delta, remainder, epoch)`.
pub fn live_rows(dbs: &Databases, n: usize, biz: &str) -> Vec<(usize, i64, i64, i64)> {
    (0..n)
        .filter(|&i| dbs.has_table(i, "tiny_id_info"))
        .filter_map(|i| {
            let row = dbs.sql(
                i,
                &format!(
                    "SELECT delta, remainder, layout_epoch FROM tiny_id_info \
                     WHERE biz_type = '{biz}' AND NOT frozen"
                ),
            );
            let f: Vec<i64> = row.split('|').filter_map(|x| x.parse().ok()).collect();
            (f.len() == 3).then(|| (i, f[0], f[1], f[2]))
        })
        .collect()
}

/// The highest `max_id` of `biz` over the first `n` databases: every ID reserved of it
/// so far lies at or below it.
pub fn highest_max_id(dbs: &Databases, n: usize, biz: &str) -> i64 {
    (0..n)
        .map(|i| {
            dbs.sql(
                i,
                &format!("SELECT max_id FROM tiny_id_info WHERE biz_type = '{biz}'"),
            )
            .parse::<i64>()
            .unwrap_or_else(|e| panic!("max_id of {biz} on database {i}: {e}"))
        })
        .max()
        .unwrap_or(i64::MIN)
}

/// `n` PostgreSQL databases, the first `members` of them in the configuration, with
/// the biz `plain` and, when `odd`, the odd-only `odd`, both of step `step`; a token
/// for each.
pub struct Cluster {
    pub dbs: Databases,
    pub urls: Vec<String>,
    /// The configuration naming the first `members` databases.
    pub toml: String,
    pub plain_token: String,
    pub odd_token: String,
}

impl Cluster {
    pub fn start(n: usize, members: usize, step: &str, odd: bool) -> Cluster {
        let dbs = Databases::start(Kind::Postgres, n);
        let urls = dbs.urls();
        let toml = toml_for(&dbs, &(0..members).collect::<Vec<_>>());
        cli_ok(&toml, &["migrate"]);
        cli_ok(&toml, &["biz", "add", "plain", "--step", step]);
        let token = |biz: &str| {
            cli_ok(&toml, &["token", "add", "--biz", biz])
                .trim()
                .to_owned()
        };
        let plain_token = token("plain");
        let odd_token = match odd {
            true => {
                cli_ok(&toml, &["biz", "add", "odd", "--step", step, "--odd"]);
                token("odd")
            }
            false => String::new(),
        };
        Cluster {
            dbs,
            urls,
            toml,
            plain_token,
            odd_token,
        }
    }
}

/// Bizs that make a change take long enough to cut it off midway.
pub fn bulk_bizs(dbs: &Databases, n: usize) {
    dbs.sql(
        0,
        &format!(
            "INSERT INTO tiny_id_info (biz_type, begin_id, max_id, step, delta, remainder) \
             SELECT 'bulk' || g, 0, g * 1000, 100, 1, 0 FROM generate_series(1, {n}) g"
        ),
    );
}

/// Every biz has its unfrozen rows in one layout epoch, on distinct classes.
pub fn assert_consistent(dbs: &Databases, n: usize) {
    let mut rows: std::collections::HashMap<String, Vec<(usize, i64, i64, i64)>> =
        Default::default();
    for i in (0..n).filter(|&i| dbs.has_table(i, "tiny_id_info")) {
        for line in dbs
            .sql(
                i,
                "SELECT biz_type, delta, remainder, layout_epoch FROM tiny_id_info WHERE NOT frozen",
            )
            .lines()
            .filter(|l| !l.is_empty())
        {
            let f: Vec<&str> = line.split('|').collect();
            rows.entry(f[0].to_owned()).or_default().push((
                i,
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
                f[3].parse().unwrap(),
            ));
        }
    }
    for (biz, rows) in rows {
        let epochs: HashSet<i64> = rows.iter().map(|r| r.3).collect();
        assert!(
            epochs.len() <= 1,
            "biz `{biz}` serves from two layouts: {rows:?}"
        );
    }
}
