//! Python virtualenvs for the tests that drive segmint with a Python tool or client
//! (schemathesis, redis-py): `target/{name}-venv`, created with `python3 -m venv` and
//! filled from a pinned requirements file unless it already holds exactly those
//! requirements. A test that needs one fails, never skips, when it cannot be made.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::eventually_every;

/// The repository's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs a command to completion; panics with its output unless it succeeds.
pub fn run(what: &str, cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {cmd:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Held while a virtualenv (or another install under `target/`) is being checked or
/// installed, so that two tests (or two runs) at once do not install into it together.
pub struct InstallLock(PathBuf);

impl InstallLock {
    pub async fn acquire(path: PathBuf) -> InstallLock {
        // Another run's install takes minutes: twice a second is often enough.
        eventually_every(
            Duration::from_millis(500),
            Duration::from_secs(900),
            &format!("{} released by another run", path.display()),
            async || {
                // A lock left by a run that was killed mid-install goes stale.
                let stale = std::fs::metadata(&path)
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t.elapsed().unwrap_or_default() > Duration::from_secs(900));
                if stale {
                    let _ = std::fs::remove_file(&path);
                }
                match File::create_new(&path) {
                    Ok(_) => Ok(InstallLock(path.clone())),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err("held".into()),
                    Err(e) => panic!("create {}: {e}", path.display()),
                }
            },
        )
        .await
    }
}

impl Drop for InstallLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The directory of `target/{name}-venv`, holding exactly the packages of
/// `requirements` (a path from the repository's root).
pub async fn venv(name: &str, requirements: &str) -> PathBuf {
    let requirements = root().join(requirements);
    let wanted = std::fs::read_to_string(&requirements)
        .unwrap_or_else(|e| panic!("read {}: {e}", requirements.display()));
    let target = root().join("target");
    std::fs::create_dir_all(&target).unwrap();
    let venv = target.join(format!("{name}-venv"));
    // What the virtualenv was last filled from.
    let stamp = venv.join("segmint-requirements.txt");
    let _lock = InstallLock::acquire(target.join(format!("{name}-venv.lock"))).await;
    let installed = |stamp: &Path| std::fs::read_to_string(stamp).is_ok_and(|s| s == wanted);
    if !(venv.join("bin/python").is_file() && installed(&stamp)) {
        eprintln!(
            "{name}: installing {} into {}",
            requirements.display(),
            venv.display()
        );
        let _ = std::fs::remove_file(&stamp);
        run(
            "python3 -m venv (needs Python 3 with its venv module; on Debian: apt-get install python3-venv)",
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
        );
        run(
            &format!("pip install -r {} (needs PyPI)", requirements.display()),
            Command::new(venv.join("bin/python"))
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--disable-pip-version-check",
                    "--no-input",
                    "-q",
                    "-r",
                ])
                .arg(&requirements),
        );
        std::fs::write(&stamp, &wanted).unwrap();
    }
    venv
}

/// The Python of `target/redis-venv`, which holds redis-py
/// (`scripts/redis-requirements.txt`).
pub async fn redis_python() -> PathBuf {
    venv("redis", "scripts/redis-requirements.txt")
        .await
        .join("bin/python")
}

/// Runs `python script` (a path from the repository's root), configured by `args`, to
/// its end within `limit` (killed if the test ends first); its standard output. Panics
/// with both outputs unless it succeeds.
pub async fn run_script(
    python: &Path,
    script: &str,
    args: impl FnOnce(&mut Command) -> &mut Command,
    limit: Duration,
) -> String {
    let out = tempfile::tempdir().unwrap();
    let (stdout, stderr) = (out.path().join("stdout"), out.path().join("stderr"));
    let mut command = Command::new(python);
    command
        .arg(root().join(script))
        .stdin(std::process::Stdio::null())
        .stdout(File::create(&stdout).unwrap())
        .stderr(File::create(&stderr).unwrap());
    let mut child = super::ChildGuard(
        args(&mut command)
            .spawn()
            .unwrap_or_else(|e| panic!("run {script}: {e}")),
    );
    let status = eventually_every(
        Duration::from_millis(50),
        limit,
        &format!("{script} done"),
        async || child.0.try_wait().unwrap().ok_or("running".to_string()),
    )
    .await;
    let read = |path: &Path| std::fs::read_to_string(path).unwrap();
    let (report, log) = (read(&stdout), read(&stderr));
    assert!(
        status.success(),
        "{script} failed ({status}):\n{report}\n{log}"
    );
    report
}
