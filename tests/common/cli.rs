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

/// Runs `segmint --config CONFIG args…` with the variables `env` and no `SEGMINT_*`
/// variable from the caller's environment, so that the file alone configures it.
pub fn segmint_cli(config: &Path, args: &[&str], env: &[(&str, &str)]) -> CliRun {
    let mut cmd = Command::new(segmint_bin());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("SEGMINT_") {
            cmd.env_remove(name);
        }
    }
    let out = cmd
        .arg("--config")
        .arg(config)
        .args(args)
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
