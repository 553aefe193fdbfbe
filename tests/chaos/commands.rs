//! The operator's `segmint db …` commands as real processes: run to the end, started
//! together, or killed (SIGKILL) at a chosen point; and the configurations they run with.

use std::io::{BufRead, BufReader, Read};
use std::process::Stdio;

use super::*;

/// How long the harness retries a `segmint db` command: `fence` needs every other
/// database, `add` and `remove` every database (a server fault never stops them).
pub(crate) const DB_COMMAND_RETRY: Duration = Duration::from_secs(30);
/// Longest one `segmint db` process may run before the harness kills it: a layout
/// change gives each step on one database 30 s, and takes a few seconds in all here.
pub(crate) const COMMAND_LIMIT: Duration = Duration::from_secs(60);

/// When the harness kills a command it started.
#[derive(Debug, Clone, Copy)]
pub(crate) enum KillAt {
    /// Never (but at [`COMMAND_LIMIT`]).
    Never,
    /// This long after it started.
    After(Duration),
    /// Once it has printed this many lines of its change, from the line announcing it
    /// (`layout epoch A → B: …`, printed once the epoch is claimed) on: a random point
    /// of the change itself, not of the migrations and reads before it.
    Lines(usize),
}

/// One `segmint db …` command to run: its configuration and arguments, and when to
/// kill it.
pub(crate) struct DbSpec {
    pub(crate) config: PathBuf,
    pub(crate) args: Vec<String>,
    pub(crate) kill: KillAt,
}

impl DbSpec {
    pub(crate) fn new(config: &Path, args: &[&str], kill: KillAt) -> DbSpec {
        DbSpec {
            config: config.to_path_buf(),
            args: ["db"].iter().chain(args).map(|a| a.to_string()).collect(),
            kill,
        }
    }
}

/// What one `segmint db …` process did.
pub(crate) struct DbRun {
    /// `segmint db remove pg1`, as the operator typed it.
    pub(crate) command: String,
    /// The exit code; `None` when a signal ended it.
    pub(crate) code: Option<i32>,
    /// Whether the harness killed it (at its [`KillAt`], or at [`COMMAND_LIMIT`]).
    pub(crate) killed: bool,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    /// From its start to its end.
    pub(crate) secs: f64,
}

impl DbRun {
    pub(crate) fn ok(&self) -> bool {
        self.code == Some(0)
    }

    /// The message it exited with (`segmint: …` on its standard error), or its last
    /// line of output.
    pub(crate) fn message(&self) -> String {
        self.stderr
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("segmint: "))
            .or_else(|| self.last_line())
            .unwrap_or_default()
            .to_string()
    }

    /// Its last non-empty line of standard output.
    pub(crate) fn last_line(&self) -> Option<&str> {
        self.stdout.lines().rev().find(|l| !l.trim().is_empty())
    }

    /// How it ended, in a few words, for notes.
    pub(crate) fn ending(&self) -> String {
        match (self.killed, self.code) {
            (true, _) => format!("killed after {:.2} s", self.secs),
            (false, Some(0)) => format!("exit 0 in {:.2} s", self.secs),
            (false, Some(code)) => format!("exit {code} in {:.2} s", self.secs),
            (false, None) => format!("ended by a signal after {:.2} s", self.secs),
        }
    }
}

/// Text cut to `n` characters, on one line, for notes.
pub(crate) fn short(text: &str, n: usize) -> String {
    let line = text.replace('\n', " ");
    match line.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line,
    }
}

/// Starts every command of `specs` at once (one right after the other), and waits for
/// each to end or be killed. Blocking.
fn run_blocking(specs: &[DbSpec]) -> Result<Vec<DbRun>, String> {
    struct Running {
        child: ChildGuard,
        lines: Arc<AtomicUsize>,
        stdout: std::thread::JoinHandle<String>,
        stderr: std::thread::JoinHandle<String>,
        ended: Option<(Option<i32>, bool, f64)>,
    }
    let began = Instant::now();
    let mut running = Vec::new();
    for spec in specs {
        let mut cmd = Command::new(common::segmint_bin());
        // The file alone configures it, as `common::cli::segmint_cli` does.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("SEGMINT_") {
                cmd.env_remove(name);
            }
        }
        let mut child = cmd
            .arg("--config")
            .arg(&spec.config)
            .args(&spec.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("start segmint {}: {e}", spec.args.join(" ")))?;
        let lines = Arc::new(AtomicUsize::new(0));
        let out = child.stdout.take().expect("piped stdout");
        let seen = lines.clone();
        let stdout = std::thread::spawn(move || {
            let mut text = String::new();
            let mut changing = false;
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                changing |= line.starts_with("layout epoch ") && line.contains(" → ");
                if changing {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
                text.push_str(&line);
                text.push('\n');
            }
            text
        });
        let mut err = child.stderr.take().expect("piped stderr");
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text);
            text
        });
        running.push(Running {
            child: ChildGuard(child),
            lines,
            stdout,
            stderr,
            ended: None,
        });
    }
    while running.iter().any(|r| r.ended.is_none()) {
        let secs = began.elapsed();
        for (r, spec) in running.iter_mut().zip(specs) {
            if r.ended.is_some() {
                continue;
            }
            let child = &mut r.child.0;
            if let Some(status) = child.try_wait().map_err(|e| format!("wait: {e}"))? {
                r.ended = Some((status.code(), false, secs.as_secs_f64()));
                continue;
            }
            let due = secs >= COMMAND_LIMIT
                || match spec.kill {
                    KillAt::Never => false,
                    KillAt::After(d) => secs >= d,
                    KillAt::Lines(n) => r.lines.load(Ordering::SeqCst) >= n,
                };
            if due {
                // SIGKILL; the child is only reaped here, so its PID is still its own.
                child.kill().map_err(|e| format!("kill: {e}"))?;
                let status = child.wait().map_err(|e| format!("wait: {e}"))?;
                r.ended = Some((status.code(), true, secs.as_secs_f64()));
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(running
        .into_iter()
        .zip(specs)
        .map(|(r, spec)| {
            let (code, killed, secs) = r.ended.expect("ended");
            DbRun {
                command: format!("segmint {}", spec.args.join(" ")),
                code,
                killed,
                stdout: r.stdout.join().unwrap_or_default(),
                stderr: r.stderr.join().unwrap_or_default(),
                secs,
            }
        })
        .collect())
}

/// Runs the commands of `specs` together, off the runtime: see [`run_blocking`].
pub(crate) async fn run_together(specs: Vec<DbSpec>) -> Result<Vec<DbRun>, String> {
    tokio::task::spawn_blocking(move || run_blocking(&specs))
        .await
        .map_err(|e| e.to_string())?
}

/// Runs one command: see [`run_blocking`].
pub(crate) async fn run_one(spec: DbSpec) -> Result<DbRun, String> {
    let mut runs = run_together(vec![spec]).await?;
    Ok(runs.remove(0))
}

/// What [`db_command`] returns for a `db remove` that an earlier run of it finished.
pub(crate) const FINISHED_EARLIER: &str = "finished by an earlier run";

/// A `segmint db` command run until it succeeded.
pub(crate) struct Ran {
    /// What its last run printed.
    pub(crate) out: String,
    /// What every run printed, the failed ones first.
    pub(crate) printed: String,
    /// The messages of the runs that failed before, in order.
    pub(crate) failed: Vec<String>,
}

impl Ran {
    /// How many runs it took, and why the failed ones failed (each message once),
    /// for notes: ` (3 runs; before: "…"; "…")`, nothing after one run.
    pub(crate) fn runs(&self) -> String {
        if self.failed.is_empty() {
            return String::new();
        }
        let mut why: Vec<String> = self.failed.iter().map(|m| short(m, 100)).collect();
        why.dedup();
        format!(
            " ({} runs; before: \"{}\")",
            self.failed.len() + 1,
            why.join("\"; \"")
        )
    }
}

/// Runs `segmint db ARGS` with the servers' configuration until it succeeds, for at
/// most [`DB_COMMAND_RETRY`]: another fault may have a database down or stalled at
/// the time.
///
/// A `db remove` stopped by another fault after it wrote its layout `done` on some
/// databases (the last step) has taken the database out: the run after it is refused,
/// the database being out of the layout already. That ends it too, with its message
/// and [`FINISHED_EARLIER`] as the output: only layout faults run layout commands, one
/// at a time, so nothing else took it out.
pub(crate) async fn db_command(ctx: &Ctx, args: &[&str]) -> Result<Ran, String> {
    let began = Instant::now();
    let mut failed = Vec::new();
    let mut printed = String::new();
    loop {
        let run = run_one(DbSpec::new(&ctx.servers[0].config, args, KillAt::Never)).await?;
        printed.push_str(&run.stdout);
        if run.ok() {
            return Ok(Ran {
                out: run.stdout,
                printed,
                failed,
            });
        }
        if !failed.is_empty()
            && args.first() == Some(&"remove")
            && run.message().contains("is not in the layout")
        {
            return Ok(Ran {
                out: format!("{}\n{FINISHED_EARLIER}\n", run.message()),
                printed,
                failed,
            });
        }
        failed.push(run.message());
        if began.elapsed() > DB_COMMAND_RETRY {
            return Err(format!(
                "`{}` failed {} times ({}): {}{}",
                run.command,
                failed.len(),
                run.ending(),
                run.stderr,
                run.stdout
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The servers' configuration less database `db`, written beside it: what an operator
/// who took it out of the file too early (or edited the wrong copy) runs with.
pub(crate) fn config_without(ctx: &Ctx, db: usize) -> Result<PathBuf, String> {
    let full = &ctx.servers[0].config;
    let text = std::fs::read_to_string(full).map_err(|e| format!("{}: {e}", full.display()))?;
    let marker = "[[databases]]";
    let mut parts = text.split(marker);
    let mut kept = parts.next().unwrap_or_default().to_string();
    let name = format!("name = \"{}\"", db_name(db));
    let mut dropped = 0;
    for part in parts {
        if part.lines().any(|l| l.trim() == name) {
            dropped += 1;
        } else {
            kept.push_str(marker);
            kept.push_str(part);
        }
    }
    if dropped != 1 {
        return Err(format!(
            "{} names {} {dropped} times",
            full.display(),
            db_name(db)
        ));
    }
    let path = full.with_file_name(format!("segmint-without-{}.toml", db_name(db)));
    std::fs::write(&path, kept).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}
