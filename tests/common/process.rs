//! Real `segmint` processes: the binary, `segmint serve` started and waited for, and
//! children killed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use super::free_port;

/// A child process killed when dropped.
pub struct ChildGuard(pub std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl ChildGuard {
    /// SIGKILL, as a crash would; waits until the process is gone.
    pub fn kill9(&mut self) {
        self.0.kill().expect("SIGKILL the process");
        let status = self.0.wait().expect("wait for the process");
        assert!(
            status.code().is_none(),
            "killed by a signal, not an exit: {status}"
        );
    }

    /// Sends SIGTERM to this process alone (never a group) and waits for its exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        send_signal(self.0.id(), "TERM").unwrap();
        self.0.wait().expect("wait for the process").code()
    }

    /// Sends SIGTERM and waits at most `limit` for the process to exit: how long it
    /// took and its status, or `None` if it was still running (it is then killed on
    /// drop).
    ///
    /// # Errors
    /// When the signal cannot be sent or the process cannot be polled.
    pub async fn terminate_within(
        &mut self,
        limit: Duration,
    ) -> Result<Option<(Duration, ExitStatus)>, String> {
        send_signal(self.0.id(), "TERM")?;
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(status) = self.0.try_wait().map_err(|e| e.to_string())? {
                return Ok(Some((start.elapsed(), status)));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(None)
    }
}

/// Sends `signal` (`TERM`, `KILL`, `STOP`, …) to process `pid` alone, never a group.
///
/// # Errors
/// When `kill` cannot run or fails.
pub fn send_signal(pid: u32, signal: &str) -> Result<(), String> {
    // Only ever a positive PID: one process, never a group.
    assert!(pid > 0);
    let status = Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .status()
        .map_err(|e| format!("run kill: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("kill -s {signal} {pid}: {status}"))
    }
}

/// Stops process `pid` (`SIGSTOP`) and waits, at most `limit`, until every thread of
/// it is stopped: `kill` returns before a running thread has taken the signal, and a
/// thread still running may act on an answer that arrives meanwhile.
///
/// # Errors
/// When `kill` fails, or a thread still runs after `limit`.
pub async fn stop_process(pid: u32, limit: Duration) -> Result<(), String> {
    send_signal(pid, "STOP")?;
    let all_stopped = || -> Result<bool, String> {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map_err(|e| e.to_string())?;
        for task in tasks {
            let stat =
                std::fs::read_to_string(task.map_err(|e| e.to_string())?.path().join("stat"))
                    .map_err(|e| e.to_string())?;
            // The state follows the command's closing parenthesis.
            let state = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next());
            if state != Some('T') {
                return Ok(false);
            }
        }
        Ok(true)
    };
    let start = Instant::now();
    while !all_stopped()? {
        if start.elapsed() > limit {
            return Err(format!("process {pid} still runs {limit:?} after SIGSTOP"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// The path of the `segmint` binary built for these tests.
pub fn segmint_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_segmint"))
}

/// `segmint --config CONFIG serve` on `127.0.0.1:port` (through `SEGMINT_BIND`), with
/// stdin closed and no `SEGMINT_CONFIG` from the environment. The caller chooses the
/// log level and where the output goes.
pub fn serve_command(config: &Path, port: u16) -> Command {
    let mut cmd = Command::new(segmint_bin());
    cmd.arg("--config")
        .arg(config)
        .arg("serve")
        .env("SEGMINT_BIND", format!("127.0.0.1:{port}"))
        .env_remove("SEGMINT_CONFIG")
        .stdin(std::process::Stdio::null());
    cmd
}

/// Polls `GET {base}/healthz` until it answers with a 2xx status.
///
/// # Errors
/// When `exited` reports that the server process ended first, or after `limit`.
pub async fn wait_healthy(
    base: &str,
    limit: Duration,
    mut exited: impl FnMut() -> Option<ExitStatus>,
) -> Result<(), String> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .expect("an HTTP client");
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(r) = http.get(format!("{base}/healthz")).send().await
            && r.status().is_success()
        {
            return Ok(());
        }
        if let Some(status) = exited() {
            return Err(format!("segmint serve exited before answering: {status}"));
        }
        if Instant::now() > deadline {
            return Err(format!("no answer on {base}/healthz within {limit:?}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// [`wait_healthy`] for a child process the caller owns.
pub async fn child_healthy(child: &mut Child, base: &str, limit: Duration) -> Result<(), String> {
    wait_healthy(base, limit, || child.try_wait().ok().flatten()).await
}

/// A real `segmint serve` process on a free loopback port, with its configuration and
/// its log (stderr) in a temporary directory; killed when dropped.
pub struct ServerProcess {
    pub child: ChildGuard,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// Where the server's stderr goes.
    pub log: PathBuf,
    /// Holds the configuration and the log.
    _dir: tempfile::TempDir,
}

impl ServerProcess {
    /// Starts `segmint serve` with the configuration `toml` and waits until it answers.
    pub async fn start(toml: &str) -> ServerProcess {
        Self::start_with_env(toml, &[]).await
    }

    /// [`ServerProcess::start`] with the variables `env` set for the server.
    pub async fn start_with_env(toml: &str, env: &[(&str, &str)]) -> ServerProcess {
        Self::start_on(toml, free_port(), env).await
    }

    /// [`ServerProcess::start_with_env`] on `port`: a restart keeps its address.
    pub async fn start_on(toml: &str, port: u16, env: &[(&str, &str)]) -> ServerProcess {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("segmint.toml");
        std::fs::write(&file, toml).unwrap();
        let log = dir.path().join("serve.log");
        let mut child = ChildGuard(
            serve_command(&file, port)
                .envs(env.iter().copied())
                .stdout(std::process::Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .unwrap(),
        );
        let base = format!("http://127.0.0.1:{port}");
        child_healthy(&mut child.0, &base, Duration::from_secs(20))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "{e}; log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            });
        ServerProcess {
            child,
            base,
            log,
            _dir: dir,
        }
    }

    /// The server's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// [`ChildGuard::terminate_within`] for the server, which must take the signal.
    pub async fn terminate_within(&mut self, limit: Duration) -> Option<(Duration, ExitStatus)> {
        self.child
            .terminate_within(limit)
            .await
            .unwrap_or_else(|e| panic!("terminate the server: {e}"))
    }
}
