//! The `segmint` admin commands (`migrate`, `biz`, `token`, `db` …) run as the operator
//! runs them: the built binary, a configuration file, and what it printed.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use super::segmint_bin;

/// What one `segmint` command did.
#[derive(Debug)]
pub struct CliRun {
    /// The exit code (`None` when a signal ended it).
    pub code: Option<i32>,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error: reports and logs.
    pub stderr: String,
}

impl CliRun {
    /// Exited 0.
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }

    /// The error of a command run with `--json` that failed: `{"kind", "reason",
    /// "message", "hint", "notes"}`, the document it printed last on stderr (its logs
    /// come before it).
    pub fn failure(&self) -> serde_json::Value {
        assert!(!self.ok(), "did not fail:\n{}", self.stdout);
        let last = self.stderr.lines().last().unwrap_or_default();
        let mut doc: serde_json::Value = serde_json::from_str(last)
            .unwrap_or_else(|e| panic!("no JSON error document ({e}):\n{}", self.stderr));
        doc["error"].take()
    }
}

/// `segmint --config CONFIG args…` with no `SEGMINT_*` variable from the caller's
/// environment, so that the file alone configures it.
pub fn segmint_command(config: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(segmint_bin());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("SEGMINT_") {
            cmd.env_remove(name);
        }
    }
    cmd.arg("--config").arg(config).args(args);
    cmd
}

/// Runs [`segmint_command`] with the variables `env`.
pub fn segmint_cli(config: &Path, args: &[&str], env: &[(&str, &str)]) -> CliRun {
    let out = segmint_command(config, args)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("run segmint {args:?}: {e}"));
    CliRun {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// [`segmint_cli`] for a command that must succeed; its standard output.
pub fn segmint_ok(config: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let run = segmint_cli(config, args, env);
    assert!(
        run.ok(),
        "segmint {args:?} failed ({:?}):\nstdout: {}\nstderr: {}",
        run.code,
        run.stdout,
        run.stderr
    );
    run.stdout
}

/// A temporary configuration file holding `toml`, removed on drop.
pub fn config_file(toml: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(toml.as_bytes()).unwrap();
    file
}

/// A `segmint` command running as a process of its own, its output going to files:
/// for commands run at the same moment, or stopped and killed midway. Killed when
/// dropped.
pub struct CliProcess {
    pub child: super::ChildGuard,
    /// What the command was run with, for messages.
    args: Vec<String>,
    /// Holds its standard output and error.
    dir: tempfile::TempDir,
}

impl CliProcess {
    /// Starts `segmint --config CONFIG args…` (as [`segmint_cli`] runs it).
    pub fn spawn(config: &Path, args: &[&str]) -> CliProcess {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str| std::fs::File::create(dir.path().join(name)).unwrap();
        let child = segmint_command(config, args)
            .stdin(std::process::Stdio::null())
            .stdout(file("stdout"))
            .stderr(file("stderr"))
            .spawn()
            .unwrap_or_else(|e| panic!("run segmint {args:?}: {e}"));
        CliProcess {
            child: super::ChildGuard(child),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            dir,
        }
    }

    /// The process ID.
    pub fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// What the command did, once it has ended; `None` while it runs.
    pub fn ended(&mut self) -> Option<CliRun> {
        let status = self.child.0.try_wait().expect("poll segmint")?;
        let read = |name: &str| std::fs::read_to_string(self.dir.path().join(name)).unwrap();
        Some(CliRun {
            code: status.code(),
            stdout: read("stdout"),
            stderr: read("stderr"),
        })
    }

    /// Panics, with what the command printed, if it has ended: for a command that must
    /// still be running (waiting on a lock).
    pub fn assert_running(&mut self) {
        if let Some(run) = self.ended() {
            panic!("segmint {:?} ended early: {run:?}", self.args);
        }
    }

    /// What the command did, waiting at most `limit` for it to end.
    pub async fn finish(mut self, limit: std::time::Duration) -> CliRun {
        let what = format!("segmint {:?} ends", self.args);
        super::eventually(limit, &what, async || {
            self.ended().ok_or_else(|| "running".to_owned())
        })
        .await
    }
}

/// Two databases (PostgreSQL unless [`CliCluster::start_kind`] says otherwise), a
/// configuration file naming them (with `extra` settings) and their schema, for tests
/// that drive `segmint` commands and servers.
pub struct CliCluster {
    pub dbs: super::Databases,
    pub toml: String,
    pub file: tempfile::NamedTempFile,
}

impl CliCluster {
    pub fn start(extra: &str) -> CliCluster {
        CliCluster::start_kind(super::Kind::Postgres, extra)
    }

    /// [`CliCluster::start`] on two databases of `kind`.
    pub fn start_kind(kind: super::Kind, extra: &str) -> CliCluster {
        let dbs = super::Databases::start(kind, 2);
        let toml = super::config_toml_urls(&dbs.urls(), extra);
        let file = config_file(&toml);
        segmint_ok(file.path(), &["migrate"], &[]);
        CliCluster { dbs, toml, file }
    }

    /// `biz add NAME --step STEP extra…`; a token for it.
    pub fn add(&self, name: &str, step: i64, extra: &[&str]) -> String {
        let step = step.to_string();
        let mut args = vec!["biz", "add", name, "--step", &step];
        args.extend_from_slice(extra);
        segmint_ok(self.file.path(), &args, &[]);
        segmint_ok(self.file.path(), &["token", "add", "--biz", name], &[])
            .trim()
            .to_owned()
    }

    /// `id decode BIZ ID`'s output.
    pub fn decode(&self, biz: &str, id: &str) -> String {
        segmint_ok(self.file.path(), &["id", "decode", biz, id], &[])
    }
}
